"""The CPU recipe's precision on real training runs (the smoke config on a 2-layer Llama with SmolLM2's
tokenizer: seconds), with the CPU's bf16 detection forced either way (SPANJUDGE_CPU_BF16): on a CPU
without native bf16 the defaults train in float32, with exactly the losses of a run set to float32; on
one with it, they keep bf16 autocast; a bf16 written out is kept, with a warning where it is emulated."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
from support.judge_records import write_records
from support.tiny_models import tiny_llama
from support.training_runs import smoke_config

from spanjudge.app.cli import main as cli_main
from spanjudge.core.fileio import current_umask
from spanjudge.inference.cpu_precision import FORCE_ENV

pytestmark = pytest.mark.timeout(600)
STEPS = ("--set", "training.max_steps=2", "--set", "training.save_steps=100", "--set", "data.max_length=1024")


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> tuple[Path, Path]:
    """The records and the model folder."""
    root = tmp_path_factory.mktemp("precision")
    tiny_llama(root / "model")
    return write_records(root / "annotate", shared_data), root / "model"


def _train(tmp_path: Path, setup: tuple[Path, Path], name: str, *more: str, check: bool = False) -> tuple[int, Path]:
    records, model = setup
    out = tmp_path / name
    config = smoke_config(tmp_path, records, model={"base": str(model)}, training={"output_dir": str(out)})
    code = cli_main(["train", "--config", str(config), *STEPS, *more, *(["--check"] if check else [])])
    return code, out


def _losses(out: Path) -> list[float]:
    return [entry["loss"] for entry in map(json.loads, (out / "log_history.jsonl").open()) if "loss" in entry]


def test_without_native_bf16_the_defaults_train_exactly_as_float32(
    tmp_path: Path, setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FORCE_ENV, "emulated")
    code, auto = _train(tmp_path, setup, "auto", "--set", "training.save_steps=2")
    err = capsys.readouterr().err
    assert code == 0, err[-3000:]
    # every file of the adapter and of a checkpoint has the umask's mode (safetensors 0.8 writes its own 0600)
    mode = 0o666 & ~current_umask()
    for folder in (auto / "adapter", auto / "checkpoint-2"):
        assert {stat.S_IMODE(p.stat().st_mode) for p in folder.rglob("*") if p.is_file()} == {mode}, folder
    assert "precision: float32 (no autocast) on a CPU with no native bf16 (set by SPANJUDGE_CPU_BF16=emulated)" in err
    metrics = json.loads((auto / "metrics.json").read_text())
    assert metrics["precision"]["mixed_precision"] == "no" and metrics["precision"]["dtype"] == "float32"
    assert json.loads((auto / "adapter" / "spanjudge.json").read_text())["precision"] == metrics["precision"]

    code, written = _train(tmp_path, setup, "float32", "--set", "training.mixed_precision=no")
    assert code == 0, capsys.readouterr().err[-3000:]
    assert _losses(auto) == _losses(written) and len(_losses(auto)) == 2  # the same arithmetic, step for step


def test_with_native_bf16_the_defaults_keep_bf16_autocast(
    tmp_path: Path, setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FORCE_ENV, "native")
    code, _ = _train(tmp_path, setup, "native", check=True)
    err = capsys.readouterr().err
    assert code == 0 and "precision: float32 weights under bf16 autocast on a CPU with native bf16" in err, err
    assert "warning" not in err


def test_bf16_written_out_on_a_cpu_that_emulates_it_is_kept_with_a_warning(
    tmp_path: Path, setup: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(FORCE_ENV, "emulated")
    code, _ = _train(tmp_path, setup, "slow", "--set", "training.mixed_precision=bf16", check=True)
    err = capsys.readouterr().err
    assert code == 0, err
    assert "float32 weights under bf16 autocast" in err
    assert "warning: training.mixed_precision bf16 on a CPU without native bf16" in err and "set them to auto" in err
