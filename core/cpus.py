"""How many threads a CPU engine should compute with here, when nobody said.

`OMP_NUM_THREADS` when set (the variable torch, oneDNN and OpenMP builds of llama.cpp already read, so one
setting caps them all), else the cores this process may run on: its CPU affinity, which `taskset`, cgroups'
cpusets and container runtimes narrow, and `os.cpu_count()` does not see.
"""

from __future__ import annotations

import os


def cpu_threads() -> int:
    """The default thread count of a CPU engine (llama.cpp's `n_threads`): see the module's docstring."""
    written = os.environ.get("OMP_NUM_THREADS", "").strip()
    if written.isdigit() and int(written) > 0:
        return int(written)
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # macOS and Windows have no affinity call
        return max(1, os.cpu_count() or 1)
