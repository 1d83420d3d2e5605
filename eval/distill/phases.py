"""The distillation study's phases: import the teacher's records, train the student, judge the held-out
split, and the result rows (`report.domain_rows`). Each phase keeps its result in the run's work folder,
so a killed run resumes where it stopped, and a finished phase is reused only for the same settings.

The import runs in this process (`data_gen.stage.import_records`). Training runs as `spanjudge train` in a child
process (its log in the work folder): an hour-long training that the out-of-memory killer ends is reported with its
signal, peak memory and what lowers it, and the study lives to say so; run again, it resumes from the checkpoint.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from dataclasses import fields as dataclass_fields
from pathlib import Path
from typing import Any

import yaml

from spanjudge.core.configio import configs_dir
from spanjudge.core.cpus import cpu_threads
from spanjudge.core.crash import describe_exit
from spanjudge.core.digests import file_sha256
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.fileio import atomic_write_json
from spanjudge.core.progress import Advance
from spanjudge.data_gen.stage import import_records
from spanjudge.data_gen.teacher import ImportSummary
from spanjudge.eval.distill.judgments import archive, readings, restorable
from spanjudge.eval.distill.report import domain_rows
from spanjudge.eval.distill.study import (
    ENGINE_LABELS,
    STUDENTS,
    StudySettings,
    checkout_free,
    engine_and_decoding,
    held_out_tables,
    judging_key,
    per_device_batch,
    recipe_settings,
    student_engine,
)
from spanjudge.eval.spans.decision_fit import decided_spans
from spanjudge.eval.spans.judging import (
    consensus_predictions,
    expected_predictions,
    judge_span_documents,
    predictions,
)
from spanjudge.eval.spans.metrics import mark_numbers
from spanjudge.eval.spans.quintd import quintd_tables
from spanjudge.inference.backends.llamacpp.lora_export import adapter_to_gguf
from spanjudge.inference.backends.registry import engine as engine_declaration
from spanjudge.inference.decisions import DecisionRule
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.judge import Judge
from spanjudge.inference.judge_workers import JudgeWorkers
from spanjudge.inference.probabilities import READING
from spanjudge.inference.shipped_models import gemma3_gguf, smollm2_gguf
from spanjudge.training.config import field_default

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
TRAIN_CONFIG = configs_dir() / "train" / "smollm2_cpu_smoke.yaml"
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # what a student is: its LoRA weights (sha256: `another_student`)
WHOLE_WEIGHTS = "model.safetensors"  # or, fully fine-tuned, the whole model's


def student_weights(adapter: Path) -> Path:
    """The file whose sha256 names a trained student: its LoRA weights, or (full fine-tuning) its model's."""
    return adapter / ADAPTER_WEIGHTS if (adapter / ADAPTER_WEIGHTS).is_file() else adapter / WHOLE_WEIGHTS


def run_command(command: list[str], log: Path, stdout: Path | None = None) -> float:
    """Run a spanjudge command with its output in `log` (its standard output in `stdout`, when given); the wall
    time in seconds. A failure says how the command ended (a signal by name, with its likely cause), its peak
    memory and, for a training killed by the out-of-memory killer, what lowers the memory; the same line ends
    the log."""
    import resource
    import signal

    started = time.perf_counter()
    with log.open("a", encoding="utf-8") as handle, ExitStack() as files:
        out = files.enter_context(stdout.open("w", encoding="utf-8")) if stdout else handle
        process = subprocess.run(command, env=ENV, stdout=out, stderr=handle if stdout else subprocess.STDOUT)
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
        raise SpanjudgeError(f"{message}; see {log}")
    return round(time.perf_counter() - started, 1)


def import_quintd(
    work: Path,
    name: str,
    config_path: Path,
    domains: list[str],
    tables: tuple[int, int],
    *,
    validation_fraction: float | None = None,
    ids: Path | None = None,
    **source: Any,
) -> ImportSummary:
    """The import stage (`data_gen.stage.import_records`, in this process) of quintd-1 `tables` of `domains` into
    `work/name`, by `config_path` with `source`'s settings changed (and only the records the `ids` file names); a
    finished import is reused only for the very same settings (the config's copy in `work/name.yaml`)."""
    out = work / name
    config = yaml.safe_load(config_path.read_text())
    config["source"].update(domains=domains, table_range=list(tables), **source)
    if validation_fraction is not None:
        config["validation_fraction"] = validation_fraction
    path, text = work / f"{name}.yaml", yaml.safe_dump(config, sort_keys=False)
    if (out / "run.json").is_file():
        if not path.is_file() or path.read_text() != text:
            raise InputError(
                f"{out} was imported with other settings than this run's; use another --label or delete {work}"
            )
        recorded = json.loads((out / "run.json").read_text())
        known = {f.name for f in dataclass_fields(ImportSummary)}
        return ImportSummary(**{"name": name, "format": "quintd1", **{k: v for k, v in recorded.items() if k in known},
                                "out_dir": out})  # fmt: skip
    path.write_text(text)
    return import_records(path, out, ids=ids).summary


@dataclass(frozen=True)
class TeacherRecords:
    """The teacher's training records of a run: how many train and validate, and how many of the training ones
    came from --extra-domains (None without)."""

    train: int
    validation: int
    extra_train: int | None = None


def import_teacher(work: Path, args: StudySettings) -> TeacherRecords:
    """GPT-4's records on the training tables; with --extra-domains, theirs appended to the training split.

    The validation split stays the main domains' own, so eval loss is comparable across runs.
    """
    # quintd-1's spans on wikidata quote their outputs well; other domains' misquote more often: their spans
    # that match nowhere are dropped (counted in stats.md)
    # only what differs from the config is written into the run's copy of it (its text is the import's identity)
    changed: dict[str, Any] = {} if args.domains == ["wikidata"] else {"on_mismatch": "relocate_or_drop"}
    # gpt-4 and config: the import config's own teacher (gpt-4 in the default config; a vote in an ensemble's)
    if args.train_source not in ("gpt-4", "config"):
        changed["annotator"] = args.train_source
    imported = import_quintd(work, "teacher", args.import_config, args.domains, args.train_tables, **changed)
    if not args.extra_domains:
        return TeacherRecords(imported.train, imported.validation)
    # the other domains' GPT-4 spans misquote their outputs more often: drop those spans (counted in stats.md)
    extra = import_quintd(
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
    return TeacherRecords(len(lines), imported.validation, extra.train + extra.validation)


def teacher_folder(work: Path) -> Path:
    return work / ("teacher_mixed" if (work / "teacher_mixed").is_dir() else "teacher")


def training_examples(work: Path, repeat_no_error: int) -> int:
    """Examples in one epoch: every teacher record, 'No Error' ones `repeat_no_error` times."""
    records = [json.loads(line) for line in (teacher_folder(work) / "train.jsonl").read_text().splitlines()]
    return sum(1 if r["evaluation"]["errors"] else repeat_no_error for r in records)


def train_student(work: Path, args: StudySettings) -> dict[str, Any]:
    run_dir = work / "student"
    n_train = training_examples(work, args.repeat_no_error)
    steps = args.steps or math.ceil(args.epochs * n_train / args.batch)
    sets = {
        "data.train": str(teacher_folder(work)),
        "data.max_length": 2048,
        "data.too_long": args.too_long,
        "data.repeat_no_error": args.repeat_no_error,
        "data.example_weights": args.example_weights,
        "training.output_dir": str(run_dir),
        "training.max_steps": steps,
        "training.effective_batch_size": args.batch,
        "training.per_device_batch_size": per_device_batch(args),
        "training.learning_rate": args.lr,
        "training.warmup_ratio": 0.05,
        "training.save_steps": 20,
        "training.logging_steps": 5,
        "lora.r": args.rank,
        "lora.alpha": 2 * args.rank,
        "training.finetuning": args.finetuning,
        "training.decision_weight": args.decision_weight,
        "training.seed": args.train_seed,
        **STUDENTS[args.student]["sets"],
    }
    return {"steps": steps, "examples_per_epoch": n_train, "settings": sets, **train(run_dir, sets, work)}


def another_student(label: str, train: dict[str, Any], split: str, runs: dict[str, Any]) -> str | None:
    """What is wrong with judging `split` with the student just trained for run `label`, when it is not the one
    the run's recorded rows were judged with; None: the same student, or nothing recorded. A student is retrained
    wherever the run's work folder is gone (another machine or session), and training on the CPU repeats itself
    bit for bit only on the same kernels. The same student has the same adapter (its sha256; for a run recorded
    before that, the same losses). On test this is an error, since the decision thresholds come from the dev
    judgments of the recorded student; on dev, the new student's rows replace the recorded ones."""
    recorded = runs.get(label, {}).get("settings", {}).get("train")
    if not recorded:
        return None
    if "adapter_sha256" in recorded and "adapter_sha256" in train:
        if recorded["adapter_sha256"] == train["adapter_sha256"]:
            return None
        differ = f"adapter sha256 {train['adapter_sha256'][:12]}, not {recorded['adapter_sha256'][:12]}"
    elif all(recorded.get(k) == train.get(k) for k in ("train_loss", "eval_loss")):
        return None
    else:
        differ = f"eval loss {train.get('eval_loss')}, not {recorded.get('eval_loss')}"
    if split == "test":
        return (
            f"{label}: the student trained here is not the one its dev thresholds were fitted with ({differ}); "
            f"judge the dev split with it first (bench/distill_protocol.sh {label}), then the test split"
        )
    return f"not the student recorded for {label} ({differ}): its dev rows are replaced"


def train(run_dir: Path, sets: dict[str, Any], work: Path) -> dict[str, Any]:
    """`spanjudge train` with these `--set`s into `run_dir` (log: work/train.log), or the finished run there when it
    was trained with the same settings; its wall time and final metrics."""
    metrics_path = run_dir / "metrics.json"
    if metrics_path.is_file():  # a finished student is reused only if it was trained with these settings
        differ = _differing(sets, yaml.safe_load((run_dir / "train_config.yaml").read_text()))
        if differ:
            raise InputError(f"{run_dir} was trained with other settings ({', '.join(differ)}); use another --label or "
                     f"delete {work}")  # fmt: skip
    else:  # `spanjudge train` resumes a killed run from its last checkpoint
        command = [str(BIN / "spanjudge"), "train", "--config", str(TRAIN_CONFIG)]
        for key, value in sets.items():
            command += ["--set", f"{key}={value}"]
        (run_dir / "bench_wall.json").write_text(json.dumps({"wall_s": run_command(command, work / "train.log")}))
    metrics = json.loads(metrics_path.read_text())
    wall = (
        json.loads((run_dir / "bench_wall.json").read_text())["wall_s"]
        if (run_dir / "bench_wall.json").is_file()
        else None
    )
    # the precision it computed in moves the adapter (float32 on a CPU without native bf16, bf16 autocast with it)
    keep = ("train_loss", "eval_loss", "tokens_per_second", "train_runtime", "precision")
    # which student this is: a retrained one is the same only if its adapter is (`another_student`)
    fingerprint = {"adapter_sha256": file_sha256(student_weights(run_dir / "adapter"))}
    return {"wall_s": wall, **{k: metrics.get(k) for k in keep if k in metrics}, **fingerprint}


def _differing(sets: dict[str, Any], saved: dict[str, Any]) -> list[str]:
    """The `--set` keys whose value differs from the run's saved train_config.yaml (section → key → value). A key
    the saved file lacks was added to the config after that run, which trained with the key's default."""
    differ = []
    for dotted, value in sets.items():
        section, key = dotted.split(".", 1)
        before = saved.get(section, {}).get(key, field_default(section, key))
        if str(before) != str(value):  # the saved YAML holds paths as text
            differ.append(f"{dotted} {before!r}, not {value!r}")
    return differ


def student_gguf(student: str) -> Path:

    return gemma3_gguf() if student == "gemma3" else smollm2_gguf()


def judge_maker(
    engine: str,
    folder: Path,
    gguf: Path,
    lora: Path | None,
    args: StudySettings,
    constrained: bool,
    probabilities: bool,
    samples: int = 0,
) -> Callable[[], Any]:
    """A judge of `folder` (an adapter, or a base with a chat template) on `engine`: transformers (the exact
    probability reader, in this process; transformers-drafted: its replies written by drafted decoding; -bf16 in
    bfloat16; -stop with its errors ending at the first block written again), llamacpp
    (the GGUF with its GGUF LoRA, in this process) or llamacpp-server (the same served: the engine starts and
    stops the server; with `probabilities`, read in this process from the same GGUF and LoRA)."""
    engine, decoding, variant = engine_and_decoding(engine)
    declared = engine_declaration(engine)
    workers = args.judging_workers if declared.in_process else 1  # a server runs its requests in parallel itself
    options: dict[str, Any] | None = dict(variant) or None
    if declared.reads_gguf:
        options = {"gguf": str(gguf), "n_ctx": 4096, "n_threads": max(1, cpu_threads() // workers)}
        if lora is not None:
            options["lora"] = str(lora)
        if declared.launch is not None:  # a server it starts: the chat template by llama.cpp's name
            options["chat_format"] = STUDENTS[args.student]["chat_format"]
    served_model = "judge" if "served_model" in declared.judge_options else None  # None: the option's default

    def make() -> Any:
        prepared = Judge.prepare(
            folder, engine=engine, engine_options=options, max_new_tokens=args.max_new_tokens, retries=args.retries,
            max_context=4096, constrained=constrained, probabilities=probabilities, samples=samples,
            served_model=served_model, decoding=decoding,
        )  # fmt: skip
        return prepared.load() if workers == 1 else JudgeWorkers(prepared, workers).start()

    return make


Say = Callable[[str], None]


def held_out_documents(args: StudySettings, split: str | None = None) -> tuple[list[Any], dict[str, Any]]:
    """The outputs of a held-out split (the run's, or `split`) with the humans' spans, and the teacher's spans."""
    tables = held_out_tables(args if split is None else replace(args, split=split))
    docs = quintd_tables("human", tables, args.eval_domains)
    teacher = {d.id: d.gold_spans for d in quintd_tables("gpt-4", tables, args.eval_domains)}
    return docs, teacher


def judge_held_out(
    work: Path, args: StudySettings, say: Say, keep: Path | None = None
) -> tuple[list[Any], dict[str, Any], dict[str, Any]]:
    """The held-out outputs of the run's split (with the humans' spans), each judge's judgments of them (kept
    in `work`, so a killed run resumes and a finished judge is read back; and compressed under `keep`, the
    results' judgments folder, `judgments.archive`) and the teacher's spans on them."""

    adapter = work / "student" / "adapter"
    gguf = student_gguf(args.student)
    base_folder = Path(convert_gguf(gguf, progress=say))
    engine = student_engine(args)
    lora = work / "student-lora.gguf" if engine_declaration(engine_and_decoding(engine)[0]).reads_gguf else None
    if lora is not None and not lora.is_file():
        adapter_to_gguf(adapter, json.loads((base_folder / "config.json").read_text()), lora)
    tables = held_out_tables(args)
    docs, teacher = held_out_documents(args)
    say(f"held out ({args.split} split, tables {tables[0]}-{tables[1] - 1}): {len(docs)} outputs with human spans")
    judged = {}
    # the base is served without the LoRA; its prompt is rendered by the tokenizer of a folder with a chat
    # template: Gemma's GGUF has none, so its base renders through the student's (Gemma's turns, as trained)
    base_turns = adapter if args.student == "gemma3" else base_folder
    key = judging_key(args.eval_domains, tables, args.max_new_tokens, args.retries)
    # The base judges the test split only (the row beside each reported recipe), on the contract's grammar so
    # that it writes evaluations at all (unconstrained it parses none); once per student model and setting.
    judges: list[tuple[str, Path, Path | None, int]] = [("student", adapter, lora, 0)]
    student = file_sha256(student_weights(adapter))  # computed once, when it was trained
    if args.split == "test" and args.base:
        judges.insert(0, ("base", base_turns, None, 0))
    if args.samples:  # self-consistency: the same student asked again for N sampled replies per output
        judges.append(("student", adapter, lora, args.samples))
    for name, folder, adapter_gguf, samples in judges:
        constrained = args.constrained or name == "base"
        name += "+grammar" if constrained else ""
        probabilities = name.startswith("student") and args.probabilities and not samples
        name += "+probabilities" if probabilities else f"+consensus{samples}" if samples else ""
        # the engine is in the file's name, so one engine's judgments never resume another's
        judge_engine = engine if name.startswith("student") else "llamacpp-server"
        label = ENGINE_LABELS[judge_engine]
        path = work / "judgments" / f"{name}_{label}_{key}.json"
        if name.startswith("base"):  # the untrained base is the same judge in every run: judged once per setting
            base_key = key if args.student == "smollm2" else f"{args.student}_{key}"
            path = work.parent / "base_judgments" / f"{base_key}+grammar.json"
        make = judge_maker(judge_engine, folder, gguf, adapter_gguf, args, constrained, probabilities, samples)
        # who judged: the same judge's judgments kept by any run are restored, not judged again (runs/ is lost
        # with the machine; the base is the same judge in every run, and a retrained student may be the same)
        identity = judge_identity(name, label, args.student, key, None if name.startswith("base") else student)
        if keep is not None and not path.is_file() and (found := restorable(keep, args.split, name, identity)):
            atomic_write_json(path, {k: v for k, v in found[1].items() if k != "identity"})
            say(f"{name}: the same judge's judgments restored from {found[0]}")
        judge = None if path.is_file() else make()
        try:
            judged[name] = judge_span_documents(judge, docs, path, _said_progress(name, len(docs), say))
        finally:
            if judge is not None:
                judge.close()
        if keep is not None:
            archive(keep, args.label, args.split, name, {**judged[name], "identity": identity})
    return docs, judged, teacher


def judge_identity(name: str, engine: str, student: str, judging: str, adapter_sha256: str | None) -> dict[str, Any]:
    """Who made a run's judgments (kept with them, `judgments.restorable`): the judge's name, engine, student model,
    judging settings and adapter; with probabilities, also what a reading holds (`probabilities.READING`), so that
    judgments read before a reader read more are never restored for one read now."""
    identity: dict[str, Any] = {
        "judge": name, "engine": engine, "student": student, "judging": judging, "adapter_sha256": adapter_sha256
    }  # fmt: skip
    if name.endswith("+probabilities"):
        identity["reading"] = READING
    return identity


def _said_progress(name: str, total: int, say: Say) -> Advance:
    """A progress row said as lines: `NAME: K/TOTAL judged`."""
    done = 0

    def advance(n: int, /, **counts: int) -> None:
        nonlocal done
        done += n
        say(f"{name}: {done}/{total} judged")

    return advance


def result_rows(
    docs: list[Any],
    judged: dict[str, Any],
    teacher: dict[str, Any],
    args: StudySettings,
    say: Say,
    rule: DecisionRule | None = None,
) -> list[dict[str, Any]]:
    """The agreement rows of every judge (the student's written replies, its expected and consensus readings,
    its decisions under `rule` (fitted on the run's dev judgments), the base), the teacher and the
    mark-every-number baseline, per domain and pooled; the student's rows read with its probabilities carry
    their calibration (`eval.spans.calibration`)."""

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
        if not name.endswith("+probabilities"):
            rows += rows_of(name.split("+")[0], predictions(payload), payload)
            continue
        read = readings(payload)
        rows += rows_of("student", predictions(payload), payload, readings=read)
        spans, counts = expected_predictions(payload)
        rows += rows_of("student·expected", spans, payload, counts=counts, written=False)
        if rule is not None:
            rows += rows_of("student·decided", decided_spans(read, rule), payload, written=False)
    rows += rows_of("teacher", teacher)
    rows += rows_of("number_baseline", {d.id: mark_numbers(d.output) for d in docs})
    return rows


def run_settings(
    args: StudySettings, imported: TeacherRecords, train: dict[str, Any], judged: dict[str, Any]
) -> dict[str, Any]:
    """What the results record of a run: its recipe, the phases' outcomes and each judge's wall time."""
    return {
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
        "train_outputs": imported.train,
        "extra_domains": args.extra_domains,
        "extra_train": imported.extra_train,
        "extra_tables": list(args.extra_tables) if args.extra_domains else None,
        "import_config": checkout_free(args.import_config),
        "batch": args.batch,
        "lr": args.lr,
        "rank": args.rank,
        "finetuning": args.finetuning,
        "repeat_no_error": args.repeat_no_error,
        "example_weights": args.example_weights,
        "decision_weight": args.decision_weight,
        "train_seed": args.train_seed,
        "max_new_tokens": args.max_new_tokens,
        "retries": args.retries,
        "constrained": args.constrained,
        "probabilities": args.probabilities,
        "samples": args.samples,
        "student_engine": args.student_engine,
        "recipe_settings": recipe_settings(args),
        "resamples": args.resamples,
        "train": train,
        "judge_wall_s": {f"{args.split}/{name}": payload["wall_s"] for name, payload in judged.items()},
        "student": STUDENTS[args.student]["describe"],
        "student_model": args.student,
        "teacher": "GPT-4 (gpt-4-1106-preview) spans from quintd-1",
        "note": args.note,
    }
