"""The llama.cpp build check (inference/backends/llamacpp/build.py): the build flags name the host's instruction
sets and never AMX, a build with what the CPU lacks is a problem, and the installed build runs on this CPU."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from spanjudge.inference.backends.llamacpp import build as llamacpp_build

REPO = Path(__file__).resolve().parents[2]


HASWELL = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})


AVX512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16"}


SAPPHIRE_RAPIDS = HASWELL | AVX512 | {"avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}


def test_the_build_flags_name_the_hosts_instruction_sets_and_never_amx() -> None:
    args = llamacpp_build.cmake_args(SAPPHIRE_RAPIDS).split()
    assert "-DGGML_NATIVE=OFF" in args  # never -march=native, which compiles ggml's AMX path on such a host
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(args)
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX2=ON"} <= set(args)
    older = llamacpp_build.cmake_args(HASWELL).split()
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AVX_VNNI=OFF"} <= set(older)


def test_a_build_with_amx_or_with_what_the_cpu_lacks_is_a_problem() -> None:
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 |"
    compiled = llamacpp_build.compiled_features(info)
    assert compiled == {"SSE3", "AVX", "AVX2", "AVX512", "AMX_INT8"}
    on_amx_host = llamacpp_build.problems(compiled, SAPPHIRE_RAPIDS | {"pni"})
    assert len(on_amx_host) == 1 and "AMX" in on_amx_host[0] and "ldtilecfg" in on_amx_host[0]
    on_haswell = llamacpp_build.problems(compiled, HASWELL | {"pni"})
    assert any("AVX512" in p and "SIGILL" in p and "avx512f" in p for p in on_haswell)
    assert llamacpp_build.problems({"SSE3", "AVX", "AVX2"}, HASWELL | {"pni"}) == []


def test_the_installed_llamacpp_runs_on_this_cpu() -> None:
    """What `make install` built (or took from pip's cache) carries no AMX code path and no instruction
    set this host lacks; a native build on an AMX host fails here."""
    assert llamacpp_build.installed_problems() == []
    assert subprocess.run([sys.executable, str(REPO / "inference/backends/llamacpp/build.py"), "check"]).returncode == 0
