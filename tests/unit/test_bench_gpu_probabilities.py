"""bench/gpu/probabilities.py without a GPU or a model: its evaluations are what the contract parses,
its comparison of two readings is by kind, and the committed report is the one its JSON renders."""

from __future__ import annotations

import json
from types import ModuleType, SimpleNamespace

import pytest
from support.scripts import REPO, load_script

from spanjudge.inference.contract import Evaluation, parse_judge


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_script("bench/gpu/probabilities.py")


@pytest.mark.parametrize("errors", [0, 2, 8])
def test_the_given_evaluations_are_the_contracts(bench: ModuleType, errors: int) -> None:
    evaluation = parse_judge(bench.reply(errors))
    assert isinstance(evaluation, Evaluation) and len(evaluation.errors) == errors
    assert evaluation.score == max(0, 100 - 12 * errors)


def test_two_readings_differ_by_kind(bench: ModuleType) -> None:
    def reading(p: float, score: float, severity: float) -> SimpleNamespace:
        error = SimpleNamespace(confidence=p, expected_severity=severity, severity_distribution={1: p, 2: 1 - p})
        return SimpleNamespace(p_no_error=1 - p, expected_errors=p, expected_score=score,
                               score_distribution={0: p, 100: 1 - p}, errors=[error])  # fmt: skip

    a, b = bench.values(reading(0.25, 40.0, 1.5)), bench.values(reading(0.5, 43.0, 1.0))
    assert bench.largest_differences(a, b) == pytest.approx(
        {"probability": 0.25, "expected_errors": 0.25, "expected_score": 3.0, "expected_severity": 0.5}
    )


def test_the_committed_report_is_what_its_json_renders(bench: ModuleType) -> None:
    results = REPO / "bench/results/gpu_probabilities"
    payload = json.loads(results.with_suffix(".json").read_text())
    report = results.with_suffix(".md").read_text()
    assert report.startswith("\n".join(bench.report_lines(payload)) + "\n")  # the notes on the run follow
    assert "H100" in payload["device"] and payload["shape"] == "8b"  # measured on a GPU, not at the CPU's tiny shape
