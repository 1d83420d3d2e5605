"""The precision a training run computes in: the weights' dtype and the trainer's autocast.

`model.dtype: auto` and `training.mixed_precision: auto` (the defaults) choose by the device:

- on a GPU: bfloat16 weights and bf16 autocast (the thesis recipe; on a GPU without bf16, float32 weights
  under fp16 autocast). Full fine-tuning keeps float32 weights under the autocast: its optimizer updates the
  weights themselves, and bf16 weights would round small updates away;
- on a CPU: float32 weights, with bf16 autocast only where the CPU computes bf16 natively
  (AVX512-BF16, AMX-BF16: `inference.cpu_precision`). Where it does not, bf16 is emulated and a
  training step takes several times as long as in float32 (5.9× measured on an AVX2-only host),
  so the run stays in float32 and says so.

A value written out (`bfloat16`, `bf16` ...) is kept as written, with a warning when it is that slow path.
A resumed run goes on in the precision it began in (`resumed`), whatever `auto` would choose on the machine
that resumes it: its checkpoints were made in that precision, and a run that changed it halfway would be neither.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from spanjudge.inference.cpu_precision import CpuBf16

HALF_DTYPES = ("bfloat16", "float16")
HALF_AUTOCAST = ("bf16", "fp16")


@dataclass(frozen=True)
class TrainingPrecision:
    """What a run loads and autocasts to, and one line saying why (`warning`: a setting on the slow path)."""

    dtype: str  # the weights' dtype: float32, bfloat16, float16
    mixed_precision: str  # the trainer's autocast: bf16, fp16 or no
    line: str
    warning: str | None = None

    def record(self) -> dict[str, str]:
        """What metrics.json and spanjudge.json keep of it."""
        return {"dtype": self.dtype, "mixed_precision": self.mixed_precision, "why": self.line}


def training_precision(
    dtype: str,
    mixed_precision: str,
    *,
    on_cpu: bool,
    gpu_bf16: bool,
    cpu_bf16: Callable[[], CpuBf16],
    full: bool = False,
) -> TrainingPrecision:
    """The run's precision from `model.dtype` and `training.mixed_precision` (either may be "auto").

    `gpu_bf16`: the GPU computes bf16 (only read off a GPU run); `cpu_bf16` is asked only on a CPU run
    where the answer matters (an auto setting, or a half-precision one to warn about). `full`: full fine-tuning,
    whose weights `auto` keeps in float32 on a GPU too."""
    if not on_cpu:  # a GPU without bf16 (V100, T4): float32 weights under fp16 autocast, the safe mixed precision
        weights = ("bfloat16" if gpu_bf16 and not full else "float32") if dtype == "auto" else dtype
        autocast = ("bf16" if gpu_bf16 else "fp16") if mixed_precision == "auto" else mixed_precision
        chosen = ""
        if "auto" in (dtype, mixed_precision):
            kept = "; full fine-tuning keeps float32 weights" if full and dtype == "auto" else ""
            chosen = f" (auto on a GPU{kept})"
        return TrainingPrecision(weights, autocast, f"precision: {_words(weights, autocast)}{chosen}")
    asks_half = dtype in HALF_DTYPES or mixed_precision in HALF_AUTOCAST
    if mixed_precision != "auto" and not asks_half:  # float32 throughout, as written: nothing to measure
        weights = "float32" if dtype == "auto" else dtype
        return TrainingPrecision(weights, mixed_precision, f"precision: {_words(weights, mixed_precision)} on CPU")
    cpu = cpu_bf16()
    weights = "float32" if dtype == "auto" else dtype
    autocast = ("bf16" if cpu.native else "no") if mixed_precision == "auto" else mixed_precision
    line = f"precision: {_words(weights, autocast)} on a CPU with {cpu.words}"
    slow = [
        f"{name} {value}"
        for name, value, half in (
            ("model.dtype", dtype, HALF_DTYPES),
            ("training.mixed_precision", mixed_precision, HALF_AUTOCAST),
        )
        if value in half
    ]
    warning = None
    if slow and not cpu.native:
        warning = (
            f"{' and '.join(slow)} on a CPU without native bf16 ({cpu.how}): half precision is emulated here, "
            "several times slower than float32; set them to auto (or float32 / no) unless you mean it"
        )
    return TrainingPrecision(weights, autocast, line, warning)


def resumed(chosen: TrainingPrecision, began: Mapping[str, str] | None) -> TrainingPrecision:
    """The precision a resumed run goes on in: the one it began in (`began`, from its run folder), whose weights and
    optimizer state its checkpoints hold, not the one `auto` chooses on this machine, which may be another (a run
    begun under bf16 autocast on a CPU with native bf16, resumed on one without). One line says so; a warning when
    this machine would not choose the half precision it goes on in (there it may be emulated, several times slower)."""
    if began is None or (began["dtype"], began["mixed_precision"]) == (chosen.dtype, chosen.mixed_precision):
        return chosen
    dtype, autocast = began["dtype"], began["mixed_precision"]
    here = _words(chosen.dtype, chosen.mixed_precision)
    line = f"precision: {_words(dtype, autocast)}, as the run began (auto here: {here})"
    half = dtype in HALF_DTYPES or autocast in HALF_AUTOCAST
    warning = None
    if half and not (chosen.dtype in HALF_DTYPES or chosen.mixed_precision in HALF_AUTOCAST):
        warning = (
            f"the run began in {_words(dtype, autocast)}, which this machine would not choose ({chosen.line}): it goes "
            "on so, maybe several times slower; delete training.output_dir to start again in this machine's precision"
        )
    return TrainingPrecision(dtype, autocast, line, warning)


def _words(dtype: str, autocast: str) -> str:
    if autocast == "no":
        return f"{dtype} weights, no autocast" if dtype != "float32" else "float32 (no autocast)"
    return f"{dtype} weights under {autocast} autocast"
