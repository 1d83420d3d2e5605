"""Checks before the model loads (issue #15, item 7): `train --check` builds the trainer's
settings without weights, unknown keys get "did you mean", a mistyped local model path is
"no such folder", `score` prints no nan, and progress reaches logs that are not a terminal."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from rich.console import Console
from support.judge_records import write_records
from support.training_runs import smoke_config

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.overlap import input_digest
from spanjudge.core.progress import progress_bars
from spanjudge.data_gen.cli import model_progress
from spanjudge.inference.hf_models import resolve_model_source
from spanjudge.inference.score.cli import _summary
from spanjudge.inference.score.rows import ScoreRow
from spanjudge.training.config import load_train_config
from spanjudge.training.run import TrainingRun

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))

pytestmark = pytest.mark.timeout(300)


@pytest.fixture
def records(tmp_path: Path, shared_data: Path) -> Path:
    return write_records(tmp_path / "annotate", shared_data)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            {"training": {"optimizer": "adamw_torchh"}},
            "training.optimizer: unknown value 'adamw_torchh'; did you mean 'adamw_torch'",
        ),
        (
            {"training": {"lr_scheduler": "cosin"}},
            "training.lr_scheduler: unknown value 'cosin'; did you mean 'cosine'",
        ),
        (
            {"lora": {"target_modules": ["q_proj", "v_projj"]}},
            "lora.target_modules[1]: the base model has no module 'v_projj'; did you mean 'v_proj'",
        ),
        ({"training": {"learning_rat": 0.1}}, "training.learning_rat: unknown key; did you mean 'learning_rate'?"),
        (
            {"training": {"liger_kernel": True}},
            "training.liger_kernel: Liger's kernels are Triton kernels for a CUDA GPU and this run trains on CPU",
        ),
    ],
)
def test_check_stops_a_typo_in_one_line_without_loading_weights(
    tmp_path: Path, records: Path, capsys: pytest.CaptureFixture[str], change: dict, expected: str
) -> None:
    started = time.monotonic()
    code = cli_main(["train", "--config", str(smoke_config(tmp_path, records, **change)), "--check"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert time.monotonic() - started < 120 and not (tmp_path / "run").exists()


def test_check_passes_a_good_config_and_training_records_its_inputs(
    tmp_path: Path, records: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["train", "--config", str(smoke_config(tmp_path, records)), "--check"]) == 0
    assert "config and data are valid" in capsys.readouterr().err
    # the metadata training writes beside the adapter names the inputs it trained on
    run = TrainingRun(load_train_config(smoke_config(tmp_path, records)), say=lambda _: None)
    run.prepare()
    metadata = run._metadata()
    lines = [json.loads(line) for line in (records / "train.jsonl").open()]
    assert metadata["train_inputs"]["sha1"] == sorted({input_digest(r["inputs"]) for r in lines})
    assert "casefolded" in metadata["train_inputs"]["rule"]


def test_a_mistyped_local_model_path_is_no_such_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs" / "judge").mkdir(parents=True)
    for typo in ("runs/judgee", "./judge", "~/no-such-spanjudge-folder"):
        with pytest.raises(SpanjudgeError, match=f"no such folder: {typo}"):
            resolve_model_source(typo)
    assert resolve_model_source("meta-llama/Llama-3.1-8B-Instruct").kind == "hub"  # owner/name stays a hub id


def test_score_summary_says_nothing_scored_instead_of_nan() -> None:
    console = Console(file=io.StringIO(), width=200)
    rows = [ScoreRow.model_validate(
        {"id": "1", "evaluation": {"score": None, "errors": []}, "unscored_reason": "no reply parsed (x)"}
    )]  # fmt: skip
    _summary(console, rows, failed=0)
    text = console.file.getvalue()
    assert "nan" not in text and "mean score - (nothing scored)" in text


def test_progress_writes_lines_when_not_a_terminal() -> None:
    console = Console(file=io.StringIO(), force_terminal=False)
    with progress_bars("{task.description}", console=console) as bars:
        task = bars.add_task("score", total=100)
        for _ in range(100):
            bars.advance(task, 1)
    lines = console.file.getvalue().splitlines()
    assert lines[0].startswith("score: 5/100") and lines[-1].startswith("score: 100/100")
    assert len(lines) == 20  # one per 5 %
    # annotate's per-model rows log the same way, with their cached / failed counts
    log = Console(file=io.StringIO(), force_terminal=False)
    with model_progress(log) as progress:
        advance = progress("gemma3", 3, cached=0, failed=0)
        for done in range(0, 3):
            advance(1, failed=int(done > 0))
    assert log.file.getvalue().splitlines()[-1].startswith("gemma3: 3/3 (0 s, cached 0, failed 2)")


def test_meta_eval_progress_reaches_a_log_file(tmp_path: Path, shared_data: Path) -> None:
    suite = str(REPO / "configs/eval/thesis.yaml")
    command = [SPANJUDGE, "meta-eval", "--suite", suite, "--dataset", "sfres", "--max-items", "8",
               "--resamples", "0", "--judge", "metric:bleu", "--no-plots", "--out", str(tmp_path)]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    assert "sfres/informativeness: " in result.stderr and "/8 (" in result.stderr


def test_perturbation_scoring_progress_reaches_a_log_file(tmp_path: Path, shared_data: Path) -> None:
    benchmark = tmp_path / "dhp"
    build = [SPANJUDGE, "perturb", "--benchmark", "dhp", "--source", "summeval", "--n", "2",
             "--perturbation", "dhp.typos.major", "--data-dir", str(shared_data), "--out", str(benchmark)]  # fmt: skip
    built = subprocess.run(build, capture_output=True, text=True, timeout=240)
    assert built.returncode == 0, built.stderr
    score = [SPANJUDGE, "meta-eval", "--benchmark", str(benchmark), "--judge", "metric:rouge1",
             "--out", str(tmp_path / "report")]  # fmt: skip
    result = subprocess.run(score, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr
    assert re.search(r"\d+/\d+ \(", result.stderr), result.stderr  # a plain progress line, not an empty bar
