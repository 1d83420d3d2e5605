"""One run at a time per output folder.

Two `spanjudge annotate` runs on one folder would each ask every model for everything (the
cache is only filled as calls return) and race each other's atomic renames of the output
files (`Directory not empty ... hf_dataset`). The second run is refused at once with one line
naming the holder, rather than left waiting on a run that may take hours.

The lock is an flock(2) on OUT/.spanjudge.lock: the kernel releases it when the holder exits,
however it exits, so a killed run never leaves a stale lock behind. The file keeps the last
holder's pid, host and start time for the message.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import inspect
import os
import socket
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import ParamSpec, TypeVar

from spanjudge.inference.errors import SpanjudgeError

LOCK_FILE = ".spanjudge.lock"

P = ParamSpec("P")
R = TypeVar("R")


class FolderBusy(SpanjudgeError):
    """Another run holds the output folder."""


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", errors="replace").strip()
    return text or "a run that is just starting"


@contextlib.contextmanager
def folder_lock(folder: Path, command: str) -> Iterator[None]:
    """Hold `folder` for this process until the block ends; FolderBusy if another run holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)  # no O_TRUNC: the holder's line stays
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise FolderBusy(
                f"{folder} is in use by {_holder(fd)}; wait for that run to end or choose another --out"
            ) from None
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"`{command}` (pid {os.getpid()} on {socket.gethostname()}, since {started})".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def one_run_per_folder(argument: str, command: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function under `folder_lock` on its folder argument `argument`."""

    def decorate(run: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(run)

        @functools.wraps(run)
        def locked(*args: P.args, **kwargs: P.kwargs) -> R:
            with folder_lock(Path(signature.bind(*args, **kwargs).arguments[argument]), command):
                return run(*args, **kwargs)

        return locked

    return decorate
