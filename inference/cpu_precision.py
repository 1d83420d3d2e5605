"""Whether this CPU computes bfloat16 natively, and so which precision CPU training and judging use.

A CPU with AVX512-BF16 or AMX-BF16 multiplies bf16 matrices in hardware, faster than float32. One
without them (AVX2 only: most cloud CPUs) emulates bf16 through float32 conversions: a 512×640 by
640×2048 product took 4,144 ms in bf16 and 46 ms in float32 on such a host, and a bf16-autocast
training step about 6× as long as a float32 one (CPU_RECIPE.md). So "auto" precision is bf16 only
where the hardware does it.

The answer is measured, not read off the instruction-set flags alone: a flag can be present while
oneDNN is held below it (ONEDNN_MAX_CPU_ISA, a hypervisor that hides a feature), and other
architectures name theirs differently. One small product in each precision (about 50 ms on a host
that emulates bf16, well under 1 ms on one that does not) decides; the flags are reported beside it.
The answer is kept per host (CPU model, flags, torch version, the variables that cap oneDNN) in
spanjudge's cache folder, and per process in memory. `SPANJUDGE_CPU_BF16=native|emulated` forces it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

from spanjudge.core.digests import cache_root
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_write_json

FORCE_ENV = "SPANJUDGE_CPU_BF16"  # native | emulated: overrides the measurement
CACHE_FILE = "cpu-bf16.json"
# variables that change what the same CPU does in bf16 (oneDNN's and ATen's instruction-set caps)
CAPPING_ENV = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY")
NATIVE_FLAGS = ("avx512_bf16", "amx_bf16", "bf16")  # x86 (AVX512-BF16, AMX-BF16), aarch64 (FEAT_BF16)
# a bf16 product at most this many times as long as the float32 one is native: hardware bf16 measures
# 0.3-1×, emulation 50-130× (bench/results/cpu_precision.md), so the line sits far from both
NATIVE_MAX_RATIO = 2.0
SHAPE = (128, 256, 256)  # one product: rows × inner × columns


@dataclass(frozen=True)
class CpuBf16:
    """This CPU's bf16: native or emulated, and how that was decided (one phrase, for messages)."""

    native: bool
    how: str

    @property
    def words(self) -> str:
        return f"{'native' if self.native else 'no native'} bf16 ({self.how})"


def _cpuinfo() -> tuple[str, set[str]]:
    """The CPU's model name and feature flags (Linux); empty where /proc/cpuinfo is not."""
    name, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            key, _, value = line.partition(":")
            key = key.strip().lower()
            if key in ("model name", "cpu model") and value.strip():
                name = value.strip()
            elif key in ("flags", "features"):
                flags = set(value.split())
            elif not key and flags:  # the first processor's block is enough
                break
    return name, flags


def host_key() -> str:
    """What identifies this host's bf16 behaviour in the cache."""
    import torch

    name, flags = _cpuinfo()
    blob = "|".join([platform.machine(), name, " ".join(sorted(flags)), torch.__version__, *_caps()])
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def measure_ratio(repeats: int = 5) -> float:
    """How many times as long one bf16 matrix product takes as the same product in float32, on this CPU:
    the fastest of `repeats` each, taken in turn so that a busy machine slows both alike, in one thread: with
    two, a process busy on the other core stalls half of each product and the ratio swings from 1.7 to 46 on
    one emulating host; in one it stays between 19 and 32 there."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _ratio(repeats)
    finally:
        torch.set_num_threads(threads)


def _ratio(repeats: int) -> float:
    import torch

    rows, inner, columns = SHAPE
    generator = torch.Generator().manual_seed(0)
    single = (torch.randn(rows, inner, generator=generator), torch.randn(inner, columns, generator=generator))
    half = (single[0].to(torch.bfloat16), single[1].to(torch.bfloat16))
    best = {torch.float32: float("inf"), torch.bfloat16: float("inf")}
    with torch.inference_mode():
        for left, right in (single, half):  # warm-up: oneDNN picks and builds its kernel on the first call
            left @ right
        for _ in range(repeats):
            for left, right in (single, half):
                started = time.perf_counter()
                left @ right
                best[left.dtype] = min(best[left.dtype], time.perf_counter() - started)
    return best[torch.bfloat16] / max(best[torch.float32], 1e-9)


def _flags_phrase(flags: set[str]) -> str:
    found = [f for f in NATIVE_FLAGS if f in flags]
    if found:
        return f"the CPU reports {', '.join(found)}"
    return "the CPU reports no bf16 instructions" if flags else "the CPU's flags are unknown"


def _caps() -> list[str]:
    """The instruction-set caps set in this environment, as NAME=VALUE."""
    return [f"{name}={os.environ[name]}" for name in CAPPING_ENV if os.environ.get(name)]


def _decide(ratio: float, flags: set[str]) -> CpuBf16:
    capped = _caps()
    how = f"a bf16 matrix product took {ratio:.2g}× the float32 one; {_flags_phrase(flags)}"
    return CpuBf16(ratio <= NATIVE_MAX_RATIO, how + (f", capped by {' '.join(capped)}" if capped else ""))


def _forced() -> CpuBf16 | None:
    value = os.environ.get(FORCE_ENV, "").strip().lower()
    if not value:
        return None
    if value not in ("native", "emulated"):
        raise SpanjudgeError(f"{FORCE_ENV}={os.environ[FORCE_ENV]!r}: must be native or emulated")
    return CpuBf16(value == "native", f"set by {FORCE_ENV}={value}")


@functools.cache
def _measured() -> CpuBf16:
    """The cached or freshly measured answer for this host (measured once per host and setting)."""
    key = host_key()
    cache = cache_root() / CACHE_FILE
    known: dict[str, dict[str, object]] = {}
    with contextlib.suppress(OSError, ValueError):
        loaded = json.loads(cache.read_text(encoding="utf-8"))
        known = loaded if isinstance(loaded, dict) else {}
    entry = known.get(key) or {}
    native, how = entry.get("native"), entry.get("how")
    if isinstance(native, bool) and isinstance(how, str):
        return CpuBf16(native, how)
    answer = _decide(measure_ratio(), _cpuinfo()[1])
    with contextlib.suppress(OSError):  # a cache that cannot be written only costs the measurement again
        atomic_write_json(cache, {**known, key: {"native": answer.native, "how": answer.how}})
    return answer


def cpu_bf16() -> CpuBf16:
    """Whether this CPU computes bf16 natively (forced by SPANJUDGE_CPU_BF16, else measured once per host)."""
    return _forced() or _measured()


def cpu_judging_dtype(requested: object) -> tuple[object, str | None]:
    """The dtype a model judging on this CPU loads with, and a line to say about it (None: nothing to say).

    `auto` (the default: the checkpoint's own dtype) becomes float32 where the CPU has no native bf16, since a
    bfloat16 checkpoint would otherwise run emulated; a half dtype written out is kept, with a warning there."""
    if requested in (None, "auto"):
        cpu = cpu_bf16()
        if cpu.native:
            return "auto", None
        return "float32", f"judging in float32: this CPU has {cpu.words}"
    if requested in ("bfloat16", "float16"):
        cpu = cpu_bf16()
        if not cpu.native:
            return requested, (
                f"warning: dtype={requested} on a CPU with {cpu.words}: half precision is emulated here, several "
                "times slower than float32; dtype=auto (or float32) avoids it"
            )
    return requested, None
