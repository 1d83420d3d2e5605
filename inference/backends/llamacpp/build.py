"""Which CPU instructions the installed llama.cpp was compiled for, and whether this host can run them.

llama-cpp-python has no wheel on PyPI: pip compiles it, by default for the build machine's CPU
(`GGML_NATIVE`, i.e. `-march=native`). On a cloud VM whose CPU reports AMX (amx_tile, amx_int8,
amx_bf16) but whose hypervisor does not let a guest use it, that build compiles ggml's AMX kernels
and the first completion dies with a general protection fault at `ldtilecfg` (exit -11; upstream
llama.cpp PR #26954, ollama #17249, #17006). A wheel built on one machine and reused from pip's cache
on another may carry instructions the other lacks (SIGILL, exit -4).

So the install builds with `GGML_NATIVE=OFF` and names each instruction set this host reports, AMX
never (`cmake_args`), and checks the result (`problems`): every instruction set the build carries
must be one the host reports, and AMX is refused. Stdlib only, and runnable before spanjudge is
installed (the Makefile runs this file):

    CMAKE_ARGS="$(python inference/backends/llamacpp/build.py cmake-args)" pip install llama-cpp-python
    python inference/backends/llamacpp/build.py check    # one line per problem, exit 1 if any
    python inference/backends/llamacpp/build.py ensure   # check; rebuild once without pip's cached wheel if needed
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path

PACKAGE = "llama-cpp-python"
# ggml's name of a compiled-in instruction set (llama_print_system_info) -> the /proc/cpuinfo flags it needs
FEATURE_FLAGS: dict[str, tuple[str, ...]] = {
    "SSE3": ("pni",),
    "SSSE3": ("ssse3",),
    "AVX": ("avx",),
    "AVX_VNNI": ("avx_vnni",),
    "AVX2": ("avx2",),
    "F16C": ("f16c",),
    "FMA": ("fma",),
    "BMI2": ("bmi2",),
    # ggml's GGML_AVX512 compiles with -mavx512f -mavx512cd -mavx512vl -mavx512dq -mavx512bw
    "AVX512": ("avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"),
    "AVX512_VBMI": ("avx512vbmi",),
    "AVX512_VNNI": ("avx512_vnni",),
    "AVX512_BF16": ("avx512_bf16",),
    "AMX_INT8": ("amx_tile", "amx_int8"),
}
# ggml's CMake switch -> the /proc/cpuinfo flags it needs (the AMX switches are always off)
CMAKE_SWITCHES: dict[str, tuple[str, ...]] = {
    "GGML_SSE42": ("sse4_2",),
    "GGML_AVX": ("avx",),
    "GGML_AVX2": ("avx2",),
    "GGML_AVX_VNNI": ("avx_vnni",),
    "GGML_BMI2": ("bmi2",),
    "GGML_FMA": ("fma",),
    "GGML_F16C": ("f16c",),
    "GGML_AVX512": FEATURE_FLAGS["AVX512"],
    "GGML_AVX512_VBMI": FEATURE_FLAGS["AVX512"] + ("avx512vbmi",),
    "GGML_AVX512_VNNI": FEATURE_FLAGS["AVX512"] + ("avx512_vnni",),
    "GGML_AVX512_BF16": FEATURE_FLAGS["AVX512"] + ("avx512_bf16",),
}
AMX_SWITCHES = ("GGML_AMX_TILE", "GGML_AMX_INT8", "GGML_AMX_BF16")
AMX_HINT = (
    "AMX: a CPU that reports it in a VM that forbids it crashes at the first completion (general protection "
    "fault at ldtilecfg)"
)


def is_x86() -> bool:
    return platform.machine().lower() in {"x86_64", "amd64", "i386", "i686"}


def host_flags(cpuinfo: Path = Path("/proc/cpuinfo")) -> frozenset[str] | None:
    """The CPU flags the kernel reports (the first processor's `flags` line); None where unknown."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == "flags":
            return frozenset(value.split())
    return None


def cmake_args(flags: Iterable[str]) -> str:
    """CMAKE_ARGS for a llama.cpp build that runs on a host with these CPU flags: no `-march=native`,
    each instruction set the host reports switched on, AMX always off."""
    have = set(flags)
    switches = ["-DGGML_NATIVE=OFF"]
    switches += [f"-D{name}={'ON' if have.issuperset(needs) else 'OFF'}" for name, needs in CMAKE_SWITCHES.items()]
    switches += [f"-D{name}=OFF" for name in AMX_SWITCHES]
    return " ".join(switches)


def compiled_features(system_info: str) -> frozenset[str]:
    """The instruction sets llama.cpp says it was compiled for (`llama_print_system_info`:
    "CPU : SSE3 = 1 | AVX = 1 | ... |"); only names of `FEATURE_FLAGS` are kept."""
    found = set()
    for part in system_info.replace("\n", "|").split("|"):
        name, _, value = part.rpartition("=")
        name = name.split(":")[-1].strip()
        if name in FEATURE_FLAGS and value.strip() == "1":
            found.add(name)
    return frozenset(found)


def problems(compiled: Iterable[str], flags: frozenset[str] | None) -> list[str]:
    """Why a llama.cpp build carrying `compiled` cannot be trusted on a host with `flags`: one line
    each. AMX is refused whatever the host reports; an unknown host (no flags) is only checked for AMX."""
    found = []
    for feature in sorted(compiled):
        needs = FEATURE_FLAGS.get(feature, ())
        if feature == "AMX_INT8":
            found.append(f"it was compiled with {AMX_HINT}")
        elif flags is not None and not flags.issuperset(needs):
            missing = ", ".join(flag for flag in needs if flag not in flags)
            found.append(f"it was compiled with {feature}, which this CPU lacks ({missing}): it dies with SIGILL")
    return found


def installed_problems() -> list[str]:
    """`problems` of the llama.cpp that `import llama_cpp` loads, on this host; [] off x86."""
    import llama_cpp

    if not is_x86():
        return []
    info = llama_cpp.llama_print_system_info()
    text = info.decode("utf-8", "replace") if isinstance(info, bytes) else str(info)
    return problems(compiled_features(text), host_flags())


def rebuild_hint() -> str:
    """How a user rebuilds llama-cpp-python for this host (the docs say the same)."""
    args = cmake_args(host_flags() or ())
    return (
        f'rebuild it for this CPU: pip cache remove llama_cpp_python && CMAKE_ARGS="{args}" '
        f"pip install --force-reinstall --no-deps {PACKAGE}=={_installed_version()}"
    )


def build_advice() -> str:
    """What is wrong with the installed llama.cpp build for this CPU, with the rebuild command and a
    trailing "; ", or "" when nothing is (or it cannot be told): appended to a crash report."""
    try:
        found = installed_problems()
    except Exception:  # advice only: a broken install says its own error elsewhere
        return ""
    return f"this llama.cpp build cannot run on this CPU ({'; '.join(found)}): {rebuild_hint()}; " if found else ""


def _installed_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(PACKAGE)
    except PackageNotFoundError:
        return "VERSION"


def _check() -> int:
    found = installed_problems()
    for problem in found:
        print(f"llama.cpp ({PACKAGE} {_installed_version()}): {problem}", file=sys.stderr)
    return 1 if found else 0


def _ensure() -> int:
    """Check; if the installed build cannot run here (a wheel from pip's cache, built elsewhere or
    natively), rebuild it once for this host, without the cache, and check again."""
    if _run_check() == 0:
        return 0
    print(f"rebuilding {PACKAGE} for this CPU (about 5 minutes)", file=sys.stderr)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    subprocess.run([*pip, "cache", "remove", "llama_cpp_python*"], check=False)
    environment = {**os.environ, "CMAKE_ARGS": cmake_args(host_flags() or ())}
    subprocess.run(
        [*pip, "install", "--no-cache-dir", "--force-reinstall", "--no-deps", f"{PACKAGE}=={_installed_version()}"],
        check=True,
        env=environment,
    )
    return _run_check()


def _run_check() -> int:
    """`check` in a fresh interpreter: this one may have loaded the library being replaced."""
    return subprocess.run([sys.executable, __file__, "check"], check=False).returncode


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command == "cmake-args":
        flags = host_flags() if is_x86() else None
        print(cmake_args(flags) if flags is not None else "")  # elsewhere: llama.cpp's own defaults
        return 0
    if command == "check":
        return _check()
    if command == "ensure":
        return _ensure()
    print("usage: build.py cmake-args | check | ensure", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
