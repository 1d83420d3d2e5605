"""The model card: its data built here from the run and the options, its prose in the Jinja
template `configs/cards/model.jinja` (YAML metadata with `model-index` when results are given,
intended use, usage snippets, training, data provenance, meta-evaluation table)."""

from __future__ import annotations

from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from .markdown import category_rows, cell, render, slug
from .results import EvalResults
from .run_folder import HUB_BASES, RunFolder
from .staging import CONFIG_FILE, staged_config_text

TAGS = ("spanjudge", "nlg-evaluation", "llm-as-a-judge", "lora")
DEFAULT_LICENSE = "other"
TEMPLATE = "model.jinja"
# the training metrics the card lists, by label
_METRICS = (
    ("optimizer steps", "global_step"),
    ("training examples", "train_examples"),
    ("training loss (mean)", "train_loss"),
    ("validation loss", "eval_loss"),
    ("processes", "world_size"),
    ("training time (s)", "train_runtime"),
    ("input tokens seen", "input_tokens_seen"),
)


@dataclass(frozen=True)
class CardOptions:
    repo_id: str
    base_model: str
    merged: bool = False
    full: bool = False  # fully fine-tuned: the whole model (staged as merged weights are), no adapter
    license: str = DEFAULT_LICENSE
    datasets: tuple[str, ...] = ()
    eval_results: EvalResults | None = None


def _model_index(results: EvalResults | None) -> list[Any]:
    """The card metadata's `model-index` entries, one per result row."""
    from huggingface_hub import EvalResult

    if results is None:
        return []
    return [
        EvalResult(
            task_type="text-generation",
            task_name="NLG evaluation (meta-evaluation)",
            dataset_type=slug(row.dataset),
            dataset_name=row.dataset,
            metric_type=slug(row.metric),
            metric_value=round(row.value, 4),
            metric_name=" ".join(part for part in (row.aspect, row.level and f"{row.level}-level", row.metric) if part),
        )
        for row in results.rows
    ]


def _metadata(options: CardOptions) -> str:
    from huggingface_hub import ModelCardData

    rows = options.eval_results.rows if options.eval_results else []
    return str(
        ModelCardData(
            base_model=options.base_model,
            library_name="transformers" if options.merged or options.full else "peft",
            pipeline_tag="text-generation",
            license=options.license,
            tags=[tag for tag in TAGS if not (options.full and tag == "lora")],
            datasets=list(options.datasets) or None,
            model_name=options.repo_id.split("/")[-1] if rows else None,
            eval_results=_model_index(options.eval_results) or None,
        ).to_yaml()
    )


def _training(run: RunFolder) -> dict[str, Any]:
    meta, lora = run.metadata, run.config.get("lora") or {}
    rows = [(label, run.metrics.get(key)) for label, key in _METRICS if run.metrics.get(key) is not None]
    if meta.max_length:
        rows.append(("max sequence length", meta.max_length))
    return {
        "lora": f"rank {lora.get('r')}, alpha {lora.get('alpha')}, dropout {lora.get('dropout')}"
        if lora and not run.full
        else None,
        "recorded": run.recorded_base,
        "gguf_base": run.recorded_base in HUB_BASES,
        "metrics": rows,
        "config_file": CONFIG_FILE,
        "config": staged_config_text(run.config_text) if run.config_text else None,
        "versions": ", ".join(f"{k} {v}" for k, v in meta.versions.items()),
    }


def _provenance(run: RunFolder) -> dict[str, Any]:
    meta, stats, data_run = run.metadata, run.data_stats, run.data_run
    train_file = meta.train_file or (run.config.get("data") or {}).get("train")
    annotators = list((stats.get("parse_failure_rate") or {}).keys())
    called = list((data_run.get("model_calls") or {}).keys())
    counts = [
        f"{label} {cell(source.get(label))}"
        for label, source in (
            ("records", data_run),
            ("train", data_run),
            ("validation", data_run),
            ("unscored", stats if "unscored" in stats else data_run),
        )
        if source.get(label) is not None
    ]
    aspects = stats.get("counts_per_aspect") or {}
    return {
        # a key the file holds wins, even when null (as the raw record's .get(key, default) did)
        "examples": cell(
            meta.train_examples if "train_examples" in meta.model_fields_set else run.metrics.get("train_examples")
        ),
        "train_file": Path(str(train_file)).name if train_file else None,
        "found": bool(stats or data_run),
        "annotators": annotators,
        "supervisors": [name for name in called if name not in annotators] if annotators else [],
        "called": called,
        "counts": ", ".join(counts),
        "tasks": sorted({key.split("/", 1)[0] for key in aspects}),
        "pairs": len(aspects),
        "categories": category_rows(stats),
    }


def _meta_eval(results: EvalResults | None) -> dict[str, Any] | None:
    if results is None:
        return None
    rows = [
        (
            row.dataset if row.task is None else f"{row.dataset} ({row.task})",
            row.aspect,
            row.level,
            row.metric,
            f"{row.value:.3f}",
            f"[{row.ci_low:.3f}, {row.ci_high:.3f}]" if row.ci_low is not None and row.ci_high is not None else None,
            row.n,
        )
        for row in results.rows
    ]
    return {"source": results.source, "judge": results.judge, "rows": rows, "skipped": results.skipped}


def _vllm_rank(lora_rank: int) -> int:
    """vLLM's --max-lora-rank takes one of a few sizes: the smallest that holds the adapter's."""
    return next((r for r in (8, 16, 32, 64, 128, 256, 512) if r >= lora_rank), lora_rank)


def render_card(run: RunFolder, options: CardOptions) -> str:
    """The model card: YAML metadata (with model-index when results are given) and the Markdown body."""
    from huggingface_hub import ModelCard

    text = render(
        TEMPLATE,
        metadata=_metadata(options),
        repo=options.repo_id,
        name=options.repo_id.split("/")[-1],
        base=options.base_model,
        merged=options.merged or options.full,
        full=options.full,
        license_unset=options.license == DEFAULT_LICENSE,
        vllm_rank=_vllm_rank(run.lora_rank),
        training=_training(run),
        provenance=_provenance(run),
        meta_eval=_meta_eval(options.eval_results),
        # the version that trained it (what loads it), else the one publishing
        spanjudge_version=run.metadata.versions.get("spanjudge") or version("spanjudge"),
    )
    return str(ModelCard(text))
