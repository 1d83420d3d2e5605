"""A child process's end, said as what happened: "killed by SIGSEGV (segmentation fault)", with its likely
cause, rather than "exit -11". Used wherever spanjudge starts a process and reports its death: a llama.cpp
server, the in-process engine's probe, a training run launched by a bench script."""

from __future__ import annotations

import signal
from pathlib import Path

# what usually sends each signal to a model process, and what the user can do
_CAUSES = {
    signal.SIGKILL: "most likely the kernel's out-of-memory killer (`dmesg` names it)",
    signal.SIGSEGV: "a crash in native code (llama.cpp, torch)",
    signal.SIGILL: "an instruction this CPU cannot run: the native code was compiled for another CPU",
    signal.SIGBUS: "a file it had mapped changed or vanished, or the disk is full",
    signal.SIGABRT: "native code aborted (an assertion or an error it could not handle)",
    signal.SIGFPE: "an arithmetic fault in native code",
}


def describe_exit(returncode: int) -> str:
    """`Popen.returncode` in words: "exit code 3", or "killed by SIGSEGV (signal 11: ...)"."""
    if returncode >= 0:
        return f"exit code {returncode}"
    number = -returncode
    try:
        name = signal.Signals(number).name
    except ValueError:
        return f"killed by signal {number}"
    cause = _CAUSES.get(signal.Signals(number))
    return f"killed by {name} (signal {number}{': ' + cause if cause else ''})"


def crashed(returncode: int | None) -> bool:
    """Whether a process ended by a signal it did not ask for (not a clean exit, not Ctrl-C or SIGTERM)."""
    return returncode is not None and returncode < 0 and -returncode not in (signal.SIGINT, signal.SIGTERM)


def log_tail(path: Path | None, lines: int = 8, limit: int = 1200) -> str:
    """The last `lines` lines of a log (at most `limit` characters), joined with " | "; "(no log)" if none."""
    if path is None or not path.exists():
        return "(no log)"
    with path.open("rb") as handle:
        handle.seek(max(0, path.stat().st_size - limit))
        text = handle.read().decode("utf-8", "replace")
    kept = [line.strip() for line in text.splitlines() if line.strip()][-lines:]
    return " | ".join(kept) or "(empty log)"
