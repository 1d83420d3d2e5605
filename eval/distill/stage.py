"""The distillation study as a stage: `run_study(settings) -> StudyRun` (one training seed of a recipe, judged on one
held-out split) and `recompute_study(labels)` (every table again from the kept judgments, no model).

The phases (`phases.py`): import the teacher's records, train the student, judge the held-out split, and the
result rows; each keeps its result in the run's work folder, so a killed run resumes where it stopped, and a
finished phase is reused only for the same settings. A protocol rule broken, or a phase asked to reuse another
setting's work, is one `InputError` before anything runs.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.inference.backends.registry import engine as engine_declaration

from .phases import TeacherRecords, another_student, import_teacher, judge_held_out, run_settings, train_student
from .recompute import diagram, from_judgments, rows_and_decisions
from .report import write_results
from .study import (
    ENGINE_LABELS,
    STUDENTS,
    StudySettings,
    engine_and_decoding,
    leak,
    recipe_conflict,
    recipe_settings,
    student_engine,
)

Say = Callable[[str], None]
RESULTS = Path("bench/results/distill_quintd")  # the protocol's results (.json, .md), from the checkout
KEPT = Path("bench/results/distill_judgments")  # every run's judgments, compressed (eval.distill.judgments)
WORK = Path("runs/bench/distill_quintd")  # each run's work folder: WORK/LABEL
CHOICES = {
    "split": ("dev", "test"),
    "student": tuple(STUDENTS),
    "train_source": ("gpt-4", "human", "config"),
    "example_weights": ("none", "agreement"),
    "too_long": ("cut", "skip"),
    "student_engine": ("default", *ENGINE_LABELS),
    "finetuning": ("lora", "full"),
}


@dataclass(frozen=True)
class StudyRun:
    """A finished run: its teacher's records, its student's training, its rows and where the report is."""

    label: str
    teacher: TeacherRecords
    train: dict[str, Any]  # as the results record it: steps, settings, wall time, losses, the adapter's sha256
    rows: list[dict[str, Any]]
    report: Path


def check_study(settings: StudySettings, results: Path = RESULTS) -> None:
    """One InputError for settings the protocol refuses, before anything runs: a value outside its choices, a
    missing label, splits that share an input, or a recipe whose recorded seeds differ in more than the seed."""
    s = settings
    if not s.label:
        raise InputError("give --label: the name of this run's rows (or --recompute, to run no model)")
    for name, allowed in CHOICES.items():
        if getattr(s, name) not in allowed:
            raise InputError(f"--{name.replace('_', '-')} is one of {', '.join(allowed)}, not {getattr(s, name)!r}")
    runs = recorded_runs(results)
    judged_dev_on = runs.get(s.label, {}).get("settings", {}).get("student_engine") or "default"
    if s.split == "test" and s.label in runs and judged_dev_on != s.student_engine:
        raise InputError(
            f"{s.label}: its dev split was judged with --student-engine {judged_dev_on}, not {s.student_engine}; "
            "the test split is judged by the judge whose dev judgments fitted its thresholds"
        )
    if s.finetuning == "full" and engine_declaration(engine_and_decoding(student_engine(s))[0]).reads_gguf:
        raise InputError(
            f"--finetuning full: the student is a whole model, and --student-engine {student_engine(s)} judges a GGUF "
            "with a GGUF LoRA; choose a transformers engine (e.g. transformers-drafted-rows-stop)"
        )
    problem = leak(s) or recipe_conflict(s.recipe or s.label, s.label, recipe_settings(s), runs)
    if problem:
        raise InputError(problem)


def recorded_runs(results: Path = RESULTS) -> dict[str, Any]:
    previous = results.with_suffix(".json")
    return dict(json.loads(previous.read_text()).get("runs", {})) if previous.is_file() else {}


def run_study(
    settings: StudySettings, *, results: Path = RESULTS, kept: Path = KEPT, say: Say | None = None
) -> StudyRun:
    """One run of the study (see the module docstring): its rows join `results` (.json and .md), its judgments
    `kept`, its reliability diagrams `results`' folder."""
    check_study(settings, results)
    s = replace(settings, work=(settings.work or WORK / settings.label).resolve())
    assert s.work is not None
    s.work.mkdir(parents=True, exist_ok=True)
    say = say or _said

    teacher = import_teacher(s.work, s)
    say(f"teacher records: {teacher.train} train / {teacher.validation} validation")
    train = train_student(s.work, s)
    changed = another_student(s.label, train, s.split, recorded_runs(results))
    if changed and s.split == "test":  # its thresholds were fitted on another student's dev judgments
        raise InputError(changed)
    say(f"student trained: {train}" + (f"; {changed}" if changed else ""))
    docs, judged, spans = judge_held_out(s.work, s, say, keep=kept)
    rows, rule = rows_and_decisions(s, docs, judged, spans, kept, say)
    diagram(s, docs, judged, results.parent / "distill_calibration")
    write_results(results, rows, {**run_settings(s, teacher, train, judged), "decisions": rule})
    return StudyRun(s.label, teacher, train, rows, results.with_suffix(".md"))


def recompute_study(
    labels: list[str], *, results: Path = RESULTS, kept: Path = KEPT, say: Say | None = None
) -> list[str]:
    """No model: the rows of these protocol runs (all, when none are named) recomputed from their kept judgments,
    with the decisions fitted on each run's dev judgments; the labels recomputed."""
    return list(from_judgments(results, kept, WORK, labels, say or _said))


def _said(message: str) -> None:
    print(f"[distill {time.strftime('%H:%M:%S')}] {message}", flush=True)
