"""`meta-eval --spans` with a real trained judge read with its probabilities (issue #49, items 2 and 3): the
calibration of its probabilities against the quintd-1 humans (ECE in spans.json and spans.md, a reliability
diagram), `--fit-decisions` storing thresholds chosen on that set with the judge, and a later evaluation on
the inputs that chose them refused."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.training_runs import TrainedRun

from spanjudge.app.cli import main as cli_main


@pytest.mark.slow
def test_fit_decisions_stores_thresholds_with_the_judge_and_refuses_its_own_dev_set_later(
    trained_judge: TrainedRun, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = tmp_path / "judge"
    shutil.copytree(trained_judge.adapter, judge)
    before = json.loads((judge / "spanjudge.json").read_text())
    # quintd-1's tables are long for a CPU: the judge's context policy cuts them to fit 512 tokens
    args = ["meta-eval", "--spans", "quintd1", "--judge", f"distilled:{judge}", "--max-items", "2",
            "--data-dir", str(shared_data), "--judge-option", "max_new_tokens=48", "--judge-option", "retries=0",
            "--judge-option", "max_context=512"]  # fmt: skip
    out = tmp_path / "dev"
    assert cli_main([*args, "--out", str(out), "--fit-decisions"]) == 0, capsys.readouterr().err
    results = json.loads((out / "spans.json").read_text())
    found = results[f"distilled:{judge.name}"]
    # calibration: every scored output has P(no error) and an expected count; spans only where the reply wrote any.
    # The first output (862 characters) does not fit 512 tokens even with its table cut: unscored, in no measure
    calibration = found["calibration"]
    assert calibration["no_error"]["n"] == calibration["expected_count"]["n"] == found["scored"] == 1
    assert 0 <= calibration["no_error"]["ece"] <= 1
    assert (out / f"calibration-distilled-{judge.name}.png").read_bytes()[:4] == b"\x89PNG"
    report = (out / "spans.md").read_text()
    assert "## Calibration of the judges' probabilities" in report
    assert "## Decision thresholds fitted on this set (its dev split)" in report
    # the thresholds are stored with the judge, with what chose them; the file's other keys are kept
    stored = json.loads((judge / "spanjudge.json").read_text())
    assert {k: v for k, v in stored.items() if k != "decisions"} == before
    fitted = stored["decisions"]["fitted_on"]
    assert fitted["split"] == "dev" and fitted["outputs"] == 1 and len(fitted["sha1"]) == 2
    assert found["decisions"]["stored_in"] == str(judge / "spanjudge.json")

    # the same inputs, reported with thresholds chosen on them, are refused before any judging; here a rule that
    # changes something (the fit on two outputs may keep the written replies, which nothing would refuse)
    stored["decisions"]["no_error_threshold"] = 0.5
    (judge / "spanjudge.json").write_text(json.dumps(stored))
    capsys.readouterr()
    assert cli_main([*args, "--out", str(tmp_path / "again")]) == 2
    error = capsys.readouterr().err
    assert "its decision thresholds were fitted on quintd1 (2 outputs) (dev split)" in error
    assert "shares inputs with 2 of 2 outputs of quintd1" in error and "written=true" in error
    assert not (tmp_path / "again" / "spans.json").exists()
