"""Which precision CPU training and judging take: bf16 only where this CPU computes it natively
(inference/cpu_precision.py, training/precision.py), with the detection forced either way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanjudge.core.errors import SpanjudgeError
from spanjudge.inference import cpu_precision
from spanjudge.inference.cpu_precision import CpuBf16, cpu_bf16, cpu_judging_dtype
from spanjudge.training.precision import resumed, training_precision
from spanjudge.training.run_folder import PRECISION_FILE, began_in

NATIVE = CpuBf16(True, "a bf16 matrix product took 0.4× the float32 one; the CPU reports avx512_bf16")
EMULATED = CpuBf16(False, "a bf16 matrix product took 80× the float32 one; the CPU reports no bf16 instructions")


def _never() -> CpuBf16:
    raise AssertionError("the CPU was asked, though nothing depends on its answer")


def test_auto_on_a_cpu_without_native_bf16_trains_in_float32_and_says_why() -> None:
    chosen = training_precision("auto", "auto", on_cpu=True, gpu_bf16=False, cpu_bf16=lambda: EMULATED)
    assert (chosen.dtype, chosen.mixed_precision, chosen.warning) == ("float32", "no", None)
    assert chosen.line == f"precision: float32 (no autocast) on a CPU with {EMULATED.words}"
    assert "80×" in chosen.line and "no native bf16" in chosen.line


def test_auto_on_a_cpu_with_native_bf16_keeps_bf16_autocast_over_float32_weights() -> None:
    chosen = training_precision("auto", "auto", on_cpu=True, gpu_bf16=False, cpu_bf16=lambda: NATIVE)
    assert (chosen.dtype, chosen.mixed_precision, chosen.warning) == ("float32", "bf16", None)
    assert "float32 weights under bf16 autocast" in chosen.line and "native bf16" in chosen.line


@pytest.mark.parametrize(
    ("dtype", "mixed", "named"),
    [
        ("auto", "bf16", "training.mixed_precision bf16"),
        ("bfloat16", "auto", "model.dtype bfloat16"),
        ("bfloat16", "bf16", "model.dtype bfloat16 and training.mixed_precision bf16"),
    ],
)
def test_a_written_half_precision_is_kept_with_a_warning_where_it_is_emulated(
    dtype: str, mixed: str, named: str
) -> None:
    slow = training_precision(dtype, mixed, on_cpu=True, gpu_bf16=False, cpu_bf16=lambda: EMULATED)
    assert slow.warning is not None and slow.warning.startswith(f"{named} on a CPU without native bf16")
    assert slow.mixed_precision == ("no" if mixed == "auto" else mixed)  # auto still chooses; written values stay
    assert slow.dtype == ("float32" if dtype == "auto" else dtype)
    fast = training_precision(dtype, mixed, on_cpu=True, gpu_bf16=False, cpu_bf16=lambda: NATIVE)
    assert fast.warning is None  # the same setting where the CPU does bf16: nothing to warn about


def test_float32_written_out_never_measures_the_cpu() -> None:
    chosen = training_precision("float32", "no", on_cpu=True, gpu_bf16=False, cpu_bf16=_never)
    assert (chosen.dtype, chosen.mixed_precision, chosen.warning) == ("float32", "no", None)


@pytest.mark.parametrize(("gpu_bf16", "weights", "autocast"), [(True, "bfloat16", "bf16"), (False, "float32", "fp16")])
def test_auto_on_a_gpu_is_the_thesis_recipe(gpu_bf16: bool, weights: str, autocast: str) -> None:
    chosen = training_precision("auto", "auto", on_cpu=False, gpu_bf16=gpu_bf16, cpu_bf16=_never)
    assert (chosen.dtype, chosen.mixed_precision) == (weights, autocast)
    assert chosen.line.endswith("(auto on a GPU)")


def test_full_fine_tuning_keeps_float32_weights_on_a_gpu() -> None:
    chosen = training_precision("auto", "auto", on_cpu=False, gpu_bf16=True, cpu_bf16=_never, full=True)
    assert (chosen.dtype, chosen.mixed_precision) == ("float32", "bf16")
    assert chosen.line.endswith("(auto on a GPU; full fine-tuning keeps float32 weights)")
    written = training_precision("bfloat16", "auto", on_cpu=False, gpu_bf16=True, cpu_bf16=_never, full=True)
    assert written.dtype == "bfloat16" and written.line.endswith("(auto on a GPU)")  # as written


@pytest.mark.parametrize(("value", "native"), [("native", True), ("emulated", False), (" Emulated ", False)])
def test_the_detection_can_be_forced(monkeypatch: pytest.MonkeyPatch, value: str, native: bool) -> None:
    monkeypatch.setenv(cpu_precision.FORCE_ENV, value)
    assert cpu_bf16().native is native and cpu_precision.FORCE_ENV in cpu_bf16().how


def test_a_bad_forced_value_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_precision.FORCE_ENV, "yes")
    with pytest.raises(SpanjudgeError, match="SPANJUDGE_CPU_BF16='yes': must be native or emulated"):
        cpu_bf16()


@pytest.mark.parametrize(("ratio", "native"), [(0.3, True), (1.2, True), (12.0, False), (78.0, False)])
def test_a_measured_ratio_decides(ratio: float, native: bool) -> None:
    answer = cpu_precision._decide(ratio, {"avx2", "fma"})
    assert answer.native is native and "the CPU reports no bf16 instructions" in answer.how


def test_the_measurement_is_made_once_per_host_and_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(cpu_precision.FORCE_ENV, raising=False)
    monkeypatch.setenv("SPANJUDGE_CACHE", str(tmp_path))
    measured: list[int] = []
    monkeypatch.setattr(cpu_precision, "measure_ratio", lambda: measured.append(1) or 50.0)
    cpu_precision._measured.cache_clear()
    try:
        assert cpu_bf16().native is False and cpu_bf16().native is False
        cpu_precision._measured.cache_clear()  # a new process: the answer comes from the cache file
        assert cpu_bf16().native is False and len(measured) == 1
        (tmp_path / cpu_precision.CACHE_FILE).write_text("{not json")  # a torn cache is measured again
        cpu_precision._measured.cache_clear()
        assert cpu_bf16().native is False and len(measured) == 2
    finally:
        cpu_precision._measured.cache_clear()


def test_the_measurement_on_this_cpu_is_far_from_the_line() -> None:
    """Whatever this CPU is, a bf16 product is either clearly hardware (≤ 1.5×) or clearly emulated (≥ 4×)."""
    ratio = cpu_precision.measure_ratio()
    assert ratio <= 1.5 or ratio >= 4, ratio


def test_judging_on_a_cpu_loads_float32_unless_bf16_is_native(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu_precision.FORCE_ENV, "emulated")
    dtype, said = cpu_judging_dtype("auto")
    assert dtype == "float32" and said is not None and said.startswith("judging in float32: this CPU has no native")
    dtype, said = cpu_judging_dtype("bfloat16")
    assert dtype == "bfloat16" and said is not None and said.startswith("warning: dtype=bfloat16 on a CPU")
    assert cpu_judging_dtype("float32") == ("float32", None)
    monkeypatch.setenv(cpu_precision.FORCE_ENV, "native")
    assert cpu_judging_dtype("auto") == ("auto", None) and cpu_judging_dtype("bfloat16") == ("bfloat16", None)


def test_a_resumed_run_goes_on_in_the_precision_it_began_in(tmp_path: Path) -> None:
    """A run begun under bf16 autocast on a CPU with native bf16 and resumed on one without goes on under bf16
    autocast, warning that it may be slow there; begun in float32 and resumed where auto chooses bf16, it stays in
    float32 without a warning; the precision is read only when the run resumes from a checkpoint, and a run begun
    before it was recorded goes on in this machine's choice."""
    here_float32 = training_precision("auto", "auto", on_cpu=True, gpu_bf16=False, cpu_bf16=lambda: EMULATED)
    here_bf16 = training_precision("auto", "auto", on_cpu=True, gpu_bf16=False, cpu_bf16=lambda: NATIVE)
    went_on = resumed(here_float32, here_bf16.record())
    assert (went_on.dtype, went_on.mixed_precision) == ("float32", "bf16")
    assert went_on.line == (
        "precision: float32 weights under bf16 autocast, as the run began (auto here: float32 (no autocast))"
    )
    assert went_on.warning is not None and "delete training.output_dir" in went_on.warning
    stayed = resumed(here_bf16, here_float32.record())
    assert (stayed.dtype, stayed.mixed_precision, stayed.warning) == ("float32", "no", None)
    assert resumed(here_bf16, here_bf16.record()) is here_bf16 and resumed(here_bf16, None) is here_bf16

    assert began_in(tmp_path, resuming=True) is None  # a run begun before the precision was recorded
    (tmp_path / PRECISION_FILE).write_text(json.dumps(here_bf16.record()))
    assert began_in(tmp_path, resuming=True) == here_bf16.record()
    assert began_in(tmp_path, resuming=False) is None  # starting afresh: this machine chooses
