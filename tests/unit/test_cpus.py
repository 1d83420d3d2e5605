"""The default thread count of the CPU engines (`core.cpus.cpu_threads`)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from spanjudge.core.cpus import cpu_threads


def test_omp_num_threads_caps_the_engines(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert cpu_threads() == 1
    monkeypatch.setenv("OMP_NUM_THREADS", " 3 ")
    assert cpu_threads() == 3


@pytest.mark.parametrize("written", ["", "0", "two", "-1"])
def test_without_a_usable_setting_every_core_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch, written: str
) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", written)
    assert cpu_threads() == len(os.sched_getaffinity(0))


def test_a_narrowed_affinity_is_seen_where_cpu_count_is_not() -> None:
    """A child pinned to one core, as `taskset -c 0` pins it, gets one thread on this 2-core machine."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    code = "import os; from spanjudge.core.cpus import cpu_threads; print(cpu_threads(), os.cpu_count())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
        preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
    )  # fmt: skip
    threads, cores = map(int, done.stdout.split())
    assert threads == 1 and cores == os.cpu_count()
