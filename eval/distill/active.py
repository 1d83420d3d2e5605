"""The active-learning loop on quintd-1 (issue #50): does a judge learn more from people annotating the outputs it
is least sure of than from as many outputs drawn at random? `bench/active_loop.py` drives it, with the commands
a user runs:

1. **start**: a finished protocol run's student (`bench/distill_quintd.py`, default smollm2-mixed-cut-s42), with
   that run's settings (domains, training tables, splits, judging);
2. **pool**: the quintd-1 outputs of tables no split of the start holds (default 25-39 of its domains), imported
   with the humans' spans (`spanjudge import`: they stay unread until an arm imports some), scored by the start
   with its probabilities (`spanjudge score --engine llamacpp --probabilities --written`);
3. **arms**: `spanjudge select --by confidence` (the N outputs whose least believed span is least believed, or
   whose P(no error) is lowest where it writes none) or `--by random --seed S` (N drawn) writes the factgenie
   campaign; the humans' quintd-1 spans of those N stand in for that campaign's answers (`spanjudge import
   --ids`), and `spanjudge train` continues the start's adapter on them (`lora.init_from`: training from the base
   on the teacher's records and these would cost the start's whole training again per arm on a 2-core CPU). Each
   arm trains with seeds 1, 2 and 3 (the random arm also draws with that seed);
4. **dev**: each arm's student judges the dev split as the protocol judges it, and is compared on its written
   replies with the start's own dev judgments, which the protocol kept.

Every step keeps its result in the work folder, so a killed loop resumes where it stopped; the pool's scores and
every arm's dev judgments are kept compressed beside the results (`judgments.archive`), so a later session goes on
without scoring the pool again and the report recomputes without a model.
"""

from __future__ import annotations

import gzip
import json
import math
import shutil
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np

from spanjudge.core.configio import configs_dir
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_bytes
from spanjudge.eval.correlation.bootstrap import percentile_interval
from spanjudge.eval.distill.choice import spread
from spanjudge.eval.distill.judgments import STUDENT_READ, archived
from spanjudge.eval.distill.phases import (
    BIN,
    Say,
    held_out_documents,
    import_quintd,
    judge_held_out,
    run_command,
    student_gguf,
    teacher_folder,
    train,
)
from spanjudge.eval.distill.report import AGREEMENT, domain_rows, rounded, seed_stats
from spanjudge.eval.distill.study import StudySettings
from spanjudge.eval.spans.agreement import agreement_resamples
from spanjudge.eval.spans.judging import predictions

BY = {"confidence": "confidence", "random": "random"}  # arm -> `spanjudge select --by`
SHOWN = (*AGREEMENT, "parse_rate", "no_error_outputs")  # what an arm's row reports, pooled over the dev domains


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """The loop (each field is the driver's option of the same name; see its --help)."""

    start: str = "smollm2-mixed-cut-s42"
    protocol_work: Path = Path("runs/bench/distill_quintd")
    work: Path = Path("runs/bench/active_loop")
    pool_tables: tuple[int, int] = (25, 40)
    n: int = 24
    arms: tuple[str, ...] = ("confidence", "random")
    seeds: tuple[int, ...] = (1, 2, 3)
    epochs: float = 2.0
    lr: float = 2e-4
    batch: int = 4
    resamples: int = 1000
    note: str = ""


def start_settings(recorded: dict[str, Any], label: str) -> StudySettings:
    """The start run's settings as the protocol's results recorded them (`run_settings`)."""
    known = {f.name for f in fields(StudySettings)}
    values = {k: v for k, v in recorded.items() if k in known and v is not None}
    values.update(recorded.get("recipe_settings", {}))
    values = {k: tuple(v) if k.endswith("_tables") else v for k, v in values.items() if k in known}
    values["student"] = recorded.get("student_model", "smollm2")
    if "import_config" in values:  # recorded from `configs/` on (`checkout_free`): the same file in this checkout
        parts = Path(values["import_config"]).parts
        values["import_config"] = configs_dir().joinpath(*parts[1:]) if parts[0] == "configs" else Path(*parts)
    return StudySettings(**{**values, "label": label})


def pool_leak(loop: LoopSettings, start: StudySettings) -> str | None:
    """Why the pool would hold an input the start trained on or a held-out split holds (None: it holds none)."""
    first, stop = loop.pool_tables
    if not 0 <= first < stop:
        return f"--pool-tables {first} {stop} is no range of tables"
    taken = {"the start's training tables": start.train_tables, "the dev split": start.dev_tables,
             "the test split": start.test_tables}  # fmt: skip
    if start.extra_domains:
        taken["the start's extra training tables"] = start.extra_tables
    for name, (a, b) in taken.items():
        if a < stop and first < b:
            return f"--pool-tables {first}-{stop - 1} overlap {name} ({a}-{b - 1})"
    return None


def arm_label(arm: str, seed: int) -> str:
    return f"{arm}-s{seed}"


@dataclass(frozen=True)
class Loop:
    """One run of the loop: its settings, the start's, and where everything goes."""

    settings: LoopSettings
    start: StudySettings
    kept: Path  # the arms' judgments, compressed, beside the results
    say: Say

    @property
    def start_dir(self) -> Path:
        return self.settings.protocol_work / self.settings.start

    def check(self) -> None:
        """Everything that stops the loop before any model runs: the start's student, its served LoRA, a leak."""
        if self.start.student != "smollm2":
            raise InputError(f"{self.settings.start}: the loop serves its student on llama.cpp (SmolLM2 runs only)")
        for needed in (self.start_dir / "student" / "adapter" / "spanjudge.json", self.start_dir / "student-lora.gguf"):
            if not needed.is_file():
                raise InputError(
                    f"no {needed}: run the protocol run {self.settings.start} first (bench/distill_protocol.sh)"
                )
        leak = pool_leak(self.settings, self.start)
        if leak:
            raise InputError(leak)

    def pool(self) -> tuple[Path, int]:
        """The pool's records (the humans' spans, unread) and the start's scores of them; how many outputs."""
        work, s = self.settings.work, self.start
        work.mkdir(parents=True, exist_ok=True)
        imported = import_quintd(work, "pool", s.import_config, s.domains, self.settings.pool_tables,
                                 validation_fraction=0, annotator="human", on_mismatch="relocate_or_drop")  # fmt: skip
        scores, kept = work / "pool" / "scores.jsonl", self.kept / "pool" / "scores.jsonl.gz"
        if not scores.is_file() and kept.is_file():  # scored in an earlier session: the results keep the scores
            atomic_write_bytes(scores, gzip.decompress(kept.read_bytes()))
        done = sum(1 for _ in scores.open(encoding="utf-8")) if scores.is_file() else 0
        if done < imported.records:  # `spanjudge score` resumes: it judges only what the file lacks
            self.say(f"pool: the start scores {imported.records} outputs ({done} already)")
            adapter = self.start_dir / "student" / "adapter"
            command = [str(BIN / "spanjudge"), "score", "--model", str(adapter), "--engine", "llamacpp",
                       "--engine-arg", f"gguf={student_gguf(s.student)}",
                       "--engine-arg", f"lora={self.start_dir / 'student-lora.gguf'}",
                       "--probabilities", "--written", "--data", str(work / "pool" / "train.jsonl"),
                       "--max-new-tokens", str(s.max_new_tokens), "--retries", str(s.retries),
                       "--max-context", "4096", "--out", str(scores)]  # fmt: skip
            run_command(command, work / "pool_score.log")
        if not kept.is_file():
            atomic_write_bytes(kept, gzip.compress(scores.read_bytes(), mtime=0))
        return scores, imported.records

    def arm(self, arm: str, seed: int, scores: Path) -> dict[str, Any]:
        """Select, import the humans' spans of the selection, continue the start's training on them."""
        s, label = self.settings, arm_label(arm, seed)
        folder = s.work / label
        folder.mkdir(parents=True, exist_ok=True)
        ids = folder / "ids.txt"
        if not ids.is_file():  # a campaign left by a killed selection is written again
            shutil.rmtree(folder / "campaign", ignore_errors=True)
            command = [str(BIN / "spanjudge"), "select", str(scores), "--n", str(s.n), "--by", BY[arm],
                       "--seed", str(seed), "--out", str(folder / "campaign")]  # fmt: skip
            run_command(command, folder / "select.log", stdout=folder / "ids.partial.txt")
            (folder / "ids.partial.txt").replace(ids)
        imported = import_quintd(folder, "human", self.start.import_config, self.start.domains, s.pool_tables,
                                 validation_fraction=0, ids=ids, annotator="human",
                                 on_mismatch="relocate_or_drop")  # fmt: skip
        steps = math.ceil(s.epochs * imported.records / s.batch)
        sets = {
            "data.train": str(folder / "human"),
            # the start's validation records: every arm's eval loss is measured on the same outputs
            "data.validation": str(teacher_folder(self.start_dir) / "validation.jsonl"),
            "data.max_length": 2048,
            "data.too_long": self.start.too_long,
            "lora.init_from": str(self.start_dir / "student" / "adapter"),
            "lora.r": self.start.rank,
            "lora.alpha": 2 * self.start.rank,
            "training.output_dir": str(folder / "student"),
            "training.max_steps": steps,
            "training.effective_batch_size": s.batch,
            "training.per_device_batch_size": s.batch,
            "training.learning_rate": s.lr,
            "training.warmup_ratio": 0.05,
            "training.save_steps": 20,
            "training.logging_steps": 2,
            "training.seed": seed,
        }
        records = [json.loads(line) for line in (folder / "human" / "train.jsonl").read_text().splitlines()]
        no_error = sum(1 for r in records if not r["evaluation"]["errors"])
        self.say(f"{label}: {len(records)} selected outputs ({imported.spans} human spans), {steps} steps")
        trained = train(folder / "student", sets, folder)
        return {"label": label, "arm": arm, "seed": seed, "selected": selection(ids), "human_spans": imported.spans,
                "human_no_error": no_error, "steps": steps, "train": trained}  # fmt: skip

    def judge_dev(self, label: str) -> tuple[list[Any], dict[str, Any]]:
        """The arm's student's judgments of the dev split (kept compressed under the arm's label)."""
        args = replace(self.start, label=label, split="dev", probabilities=False, samples=0)
        docs, judged, _ = judge_held_out(self.settings.work / label, args, self.say, keep=self.kept)
        return docs, judged

    def rows(self, name: str, docs: list[Any], payload: dict[str, Any]) -> list[dict[str, Any]]:
        return domain_rows(name, docs, predictions(payload), payload, split="dev", resamples=self.settings.resamples,
                           seed=self.start.seed)  # fmt: skip


def selection(ids: Path) -> list[dict[str, Any]]:
    """The chosen ids as `spanjudge select` printed them (with their uncertainty, for the confidence arm)."""
    chosen = []
    for line in ids.read_text(encoding="utf-8").splitlines():
        first, _, rest = line.partition("\t")
        chosen.append({"id": first, "uncertainty": float(rest) if rest else None})
    return chosen


def start_rows(loop: Loop, protocol_kept: Path) -> tuple[list[Any], list[dict[str, Any]]]:
    """The dev split's outputs and the start's rows from its dev judgments kept by the protocol."""
    docs, _ = held_out_documents(loop.start, "dev")
    kept = archived(protocol_kept, loop.settings.start, "dev").get(STUDENT_READ)
    if kept is None:
        raise InputError(f"no kept dev judgments of {loop.settings.start} in {protocol_kept}")
    return docs, loop.rows("start", docs, kept)


def pooled(rows: list[dict[str, Any]]) -> dict[str, Any]:
    row = next(r for r in rows if r["domain"] == "pooled")
    return {key: row.get(key) for key in SHOWN}


def summary(
    start: dict[str, Any], arms: list[dict[str, Any]], paired: dict[str, dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Each arm's pooled dev measures over its seeds (mean, lowest, highest), each seed's change from the start,
    and the difference of the arms' means (confidence − random) per measure, with its interval (`paired`, from
    `arm_difference`) where given."""
    by_arm: dict[str, list[dict[str, Any]]] = {}
    for entry in arms:
        by_arm.setdefault(entry["arm"], []).append(entry)
    out: dict[str, Any] = {"start": start, "arms": {}}
    for arm, entries in by_arm.items():
        out["arms"][arm] = {
            "seeds": [e["seed"] for e in entries],
            **{key: seed_stats([e["dev"][key] for e in entries]) for key in SHOWN},
            "change": {key: seed_stats([_minus(e["dev"][key], start[key]) for e in entries]) for key in AGREEMENT},
        }
    if {"confidence", "random"} <= out["arms"].keys():
        mine, theirs = out["arms"]["confidence"], out["arms"]["random"]
        out["confidence_minus_random"] = {key: _minus(mine[key]["mean"], theirs[key]["mean"]) for key in AGREEMENT}
        if paired is not None:
            out["confidence_minus_random_interval"] = paired
    return out


def arm_difference(
    docs: list[Any], judged: dict[str, list[dict[str, Any]]], *, resamples: int, seed: int, confidence: float = 0.95
) -> dict[str, dict[str, Any]]:
    """Confidence minus random, per measure pooled over `docs`: the arms' means over their seeds (`judged`: arm ->
    each seed's dev judgments) compared on the same input resamples of the dev split, so the interval is the paired
    one. Per measure: the percentile interval, the share of resamples where the confidence arm is not better
    (`not_better`), and the resamples where a mean is undefined. The judges stay fixed: the training seeds' own
    spread is in the arms' [lowest, highest], not in this interval."""
    sampled = {
        arm: [agreement_resamples(docs, predictions(payload), n_resamples=resamples, seed=seed) for payload in runs]
        for arm, runs in judged.items()
    }
    found = {}
    for metric in AGREEMENT:
        # a seed's undefined r leaves its arm's mean undefined in that resample, as in `summary`
        means = {arm: np.mean([one[metric] for one in runs], axis=0) for arm, runs in sampled.items()}
        difference = means["confidence"] - means["random"]
        finite = difference[~np.isnan(difference)]
        interval = percentile_interval(np.nan, difference, confidence)
        found[metric] = {
            "low": None if np.isnan(interval.low) else round(float(interval.low), 4),
            "high": None if np.isnan(interval.high) else round(float(interval.high), 4),
            "not_better": round(float((finite <= 0).mean()), 4) if finite.size else None,
            "undefined": interval.undefined,
            "resamples": resamples,
            "confidence": confidence,
        }
    return found


def verdict(confidence: dict[str, Any], random: dict[str, Any], interval: dict[str, Any]) -> str:
    """Which arm a measure prefers: only where the paired interval excludes 0 and every seed of one arm is above
    every seed of the other; otherwise neither."""
    if confidence["mean"] is None or random["mean"] is None or interval["low"] is None:
        return "undefined"
    if interval["low"] > 0 and confidence["min"] > random["max"]:
        return "confidence"
    if interval["high"] < 0 and random["min"] > confidence["max"]:
        return "random"
    return "neither"


def _minus(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else round(a - b, 4)


def markdown(results: dict[str, Any]) -> str:
    """bench/results/active_loop.md from bench/results/active_loop.json alone."""
    s, done = results["settings"], results["summary"]
    lines = [
        "# The active-learning loop on quintd-1: uncertainty-chosen outputs against randomly chosen ones",
        "",
        f"Machine: {s['machine']}. Start: the student of protocol run `{s['start']}`; pool: quintd-1 tables "
        f"{s['pool_tables'][0]}-{s['pool_tables'][1] - 1} of {', '.join(s['domains'])} ({s['pool_outputs']} outputs, "
        f"scored by the start with its probabilities); each arm: {s['n']} outputs selected (`spanjudge select`), the "
        f"humans' quintd-1 spans of them imported (`spanjudge import --ids`), the start's adapter trained on for "
        f"{s['epochs']:g} epochs (lr {s['lr']:g}, batch {s['batch']}; `lora.init_from`), then the dev split judged "
        f"(tables {s['dev_tables'][0]}-{s['dev_tables'][1] - 1}, written replies). {s['note']}".rstrip(),
        "",
        "Pooled over the dev domains; an arm's cell is its mean over the seeds [lowest, highest]. Produced by "
        "`bench/active_loop.py`; every arm's judgments are in `bench/results/active_loop_judgments/`.",
        "",
        "| judge | seeds | overlap F1 | token F1 | count r | token r | parse rate | 'No Error' outputs |",
        "|---|---|---|---|---|---|---|---|",
        "| start | – | " + " | ".join(rounded(done["start"][k]) for k in SHOWN) + " |",
    ]
    for arm, entry in done["arms"].items():
        seeds = ", ".join(str(seed) for seed in entry["seeds"])
        cells = [spread(entry[k], 1 if k == "no_error_outputs" else 3) for k in SHOWN]  # a count, not a measure
        lines.append(f"| {arm} | {seeds} | " + " | ".join(cells) + " |")
    lines += ["", "Each seed (change from the start in brackets):", "",
              "| arm | seed | selected: human spans, 'No Error' | overlap F1 | token F1 | count r | token r "
              "| train loss | eval loss |",
              "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for entry in results["arms"]:
        dev, start = entry["dev"], done["start"]
        cells = [f"{rounded(dev[k])} ({_signed(_minus(dev[k], start[k]))})" for k in AGREEMENT]
        losses = [rounded(entry["train"].get(k)) for k in ("train_loss", "eval_loss")]
        chosen = f"{entry['human_spans']}, {entry['human_no_error']}"
        lines.append(f"| {entry['arm']} | {entry['seed']} | {chosen} | " + " | ".join(cells + losses) + " |")
    difference = done.get("confidence_minus_random")
    intervals = done.get("confidence_minus_random_interval")
    if difference and intervals:
        first = next(iter(intervals.values()))
        lines += ["", f"Confidence minus random (the arms' means over their seeds), with its {first['confidence']:.0%} "
                  f"interval over {first['resamples']} resamples of the dev inputs that both arms share (the judges "
                  "fixed), the share of resamples where the confidence arm is not better, and which arm the measure "
                  "prefers: one only where the interval excludes 0 and every seed of that arm is above every seed "
                  "of the other.", "", "| measure | confidence − random | interval | not better | prefers |",
                  "|---|---|---|---|---|"]  # fmt: skip
        arms = done["arms"]
        for key, value in difference.items():
            found = intervals[key]
            span = f"[{_signed(found['low'])}, {_signed(found['high'])}]"
            prefers = verdict(arms["confidence"][key], arms["random"][key], found)
            lines.append(f"| {key} | {_signed(value)} | {span} | {rounded(found['not_better'])} | {prefers} |")
    return "\n".join(lines) + "\n"


def _signed(value: float | None) -> str:
    return "–" if value is None else f"{value:+.3f}"


def write(folder: Path, results: dict[str, Any]) -> None:
    (folder / "active_loop.json").write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n")
    (folder / "active_loop.md").write_text(markdown(results))
