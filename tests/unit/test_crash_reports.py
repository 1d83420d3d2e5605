"""A crashed child process is said as a crash: its exit signal, and for a killed training the memory and the levers."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from spanjudge.core.crash import crashed, describe_exit
from spanjudge.core.errors import SpanjudgeError


def test_a_crashed_child_is_said_as_a_crash() -> None:
    assert describe_exit(-signal.SIGSEGV).startswith("killed by SIGSEGV (signal 11")
    assert "out-of-memory killer" in describe_exit(-signal.SIGKILL)
    assert "another CPU" in describe_exit(-signal.SIGILL)
    assert describe_exit(3) == "exit code 3"
    assert crashed(-signal.SIGSEGV) and crashed(-signal.SIGKILL)
    assert not crashed(-signal.SIGTERM) and not crashed(0) and not crashed(None)


def test_a_killed_training_in_the_bench_names_the_signal_the_memory_and_the_levers(tmp_path: Path) -> None:
    from spanjudge.eval.distill.phases import run_command

    log = tmp_path / "train.log"
    spanjudge = tmp_path / "spanjudge"  # a stand-in for `spanjudge train` that the kernel kills
    spanjudge.write_text("#!/bin/sh\nkill -KILL $$\n")
    spanjudge.chmod(0o755)
    with pytest.raises(SpanjudgeError) as stopped:
        run_command([str(spanjudge), "train", "--config", "x.yaml"], log)
    message = str(stopped.value)
    assert "killed by SIGKILL" in message and "out-of-memory killer" in message and "peak memory" in message
    assert "--device-batch" in message and "data.max_length" in message and "resumes" in message
    assert "killed by SIGKILL" in log.read_text()  # the log says how it ended too
