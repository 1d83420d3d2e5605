"""The study's judgments as data: each judge's judgments of a run's held-out split, kept compressed beside the
results (`bench/results/distill_judgments/LABEL/SPLIT/JUDGE.json.gz`), so that every table is recomputed
from them without a model (`spanjudge distill --recompute`) on any machine, and the decisions
a run's student makes from its probabilities are fitted on its dev judgments alone.

A judgments file is the payload `eval.spans.judging.judge_span_documents` keeps: per output, the written
spans, the reply, and (read with `probabilities=True`) P(no error), the expected count and each span's
confidence along the reply.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_bytes
from spanjudge.eval.spans.decision_fit import check_held_out, fit_decision_rule
from spanjudge.eval.spans.documents import SpanDocument
from spanjudge.inference.decisions import DecisionRule

STUDENT_READ = "student+probabilities"  # the judgments the decisions and the calibration are read from


def archive_path(root: Path, label: str, split: str, judge: str) -> Path:
    return root / label / split / f"{judge}.json.gz"


def archive(root: Path, label: str, split: str, judge: str, payload: Mapping[str, Any]) -> Path:
    """Keep one judge's judgments of a run's split (gzip, keys sorted, mtime 0: the same judgments, the same
    bytes)."""
    path = archive_path(root, label, split, judge)
    text = json.dumps(payload, sort_keys=True, ensure_ascii=False).encode("utf-8")
    atomic_write_bytes(path, gzip.compress(text, mtime=0))
    return path


def archived(root: Path, label: str, split: str) -> dict[str, dict[str, Any]]:
    """Every judge's kept judgments of a run's split: judge -> payload (empty when none are kept)."""
    folder = root / label / split
    paths = sorted(folder.glob("*.json.gz")) if folder.is_dir() else []
    return {path.name.removesuffix(".json.gz"): _kept(path) for path in paths}


def _kept(path: Path) -> dict[str, Any]:
    try:
        return dict(json.loads(gzip.decompress(path.read_bytes())))
    except (OSError, EOFError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: not a judgments file ({exc.__class__.__name__}: {exc})") from None


def restorable(root: Path, split: str, judge: str, identity: Mapping[str, Any]) -> tuple[Path, dict[str, Any]] | None:
    """Judgments of `split` kept by any run under `root` that the same judge made (the `identity` kept with them:
    its name, engine, model, judging settings and adapter): the file and its payload; None when no run kept them.
    Judgments kept before identities were recorded are never taken for anyone's."""
    for path in sorted(root.glob(f"*/{split}/{judge}.json.gz")):
        payload = _kept(path)
        if payload.get("identity") == dict(identity):
            return path, payload
    return None


def readings(payload: Mapping[str, Any]) -> dict[str, dict[str, Any] | None]:
    """Document id -> what the calibration and the fit read of a judgment made with `probabilities=True` (the
    written reply's spans with their confidences, its number of errors, P(no error), the expected count);
    None: unscored."""
    found: dict[str, dict[str, Any] | None] = {}
    for doc_id, row in payload["rows"].items():
        reading = row.get("probabilities")
        if row["spans"] is None:
            found[doc_id] = None
            continue
        if reading is None:
            raise InputError(f"judgment of {doc_id} has no probabilities: judge again with probabilities=True")
        found[doc_id] = {
            "spans": row["spans"],
            "span_written": reading["span_written"],
            "errors": row["errors"],
            "p_no_error": reading["p_no_error"],
            "expected_errors": reading["expected_errors"],
            # each span's location tokens' log-probabilities; None in judgments made before they were read
            "span_location": reading.get("span_location"),
        }
    return found


def dev_rule(dev_docs: Sequence[SpanDocument], dev_payload: Mapping[str, Any] | None, data: str) -> DecisionRule | None:
    """The student's decision thresholds, fitted on its dev judgments (None: the run has none kept)."""
    if dev_payload is None:
        return None
    return fit_decision_rule(dev_docs, readings(dev_payload), split="dev", data=data).rule


def rule_for_split(rule: DecisionRule | None, docs: Sequence[SpanDocument], split: str, label: str) -> None:
    """A rule reported on `split` must have been fitted on dev and on none of these inputs."""
    if rule is None or rule.fitted_on is None:
        return
    if rule.fitted_on.split != "dev":
        raise InputError(f"{label}: decisions fitted on the {rule.fitted_on.split} split are reported on no split")
    if split != "dev":
        check_held_out(rule, docs, label, f"the {split} split")
