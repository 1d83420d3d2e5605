"""One run at a time per output folder.

Two `spanjudge annotate` runs on one folder would each ask every model for everything (the
cache is only filled as calls return) and race each other's atomic renames of the output
files (`Directory not empty ... hf_dataset`). The second run is refused at once with one line
naming the holder, rather than left waiting on a run that may take hours.

The lock is `inference.locks.exclusive` on OUT/.spanjudge.lock (an flock the kernel releases
when the holder exits, however it exits); the file keeps the last holder's pid, host and start
time for the message.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ParamSpec, TypeVar

from spanjudge.core.locks import Busy, exclusive

LOCK_FILE = ".spanjudge.lock"

P = ParamSpec("P")
R = TypeVar("R")


class FolderBusy(Busy):
    """Another run holds the output folder."""


@contextlib.contextmanager
def folder_lock(folder: Path, command: str) -> Iterator[None]:
    """Hold `folder` for this process until the block ends; FolderBusy if another run holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive(folder / LOCK_FILE, folder, command, FolderBusy):
        yield


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
