"""One run at a time per output folder.

Two `spanjudge annotate` runs on one folder would each ask every model for everything (the
cache is only filled as calls return) and race each other's atomic renames of the output
files (`Directory not empty ... hf_dataset`). The second run is refused at once with one line
naming the holder, rather than left waiting on a run that may take hours.

The lock is `core.locks.folder_lock` on OUT/.spanjudge.lock (an flock the kernel releases
when the holder exits, however it exits); the file keeps the last holder's pid, host and start
time for the message.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from pathlib import Path
from typing import ParamSpec, TypeVar

from spanjudge.core.locks import Busy, folder_lock

P = ParamSpec("P")
R = TypeVar("R")


class FolderBusy(Busy):
    """Another run holds the output folder."""


def one_run_per_folder(argument: str, command: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Run the decorated function holding its folder argument `argument`, or that argument's attribute
    ("run.out_dir") (`folder_lock`; FolderBusy if another run holds it)."""

    def decorate(run: Callable[P, R]) -> Callable[P, R]:
        signature = inspect.signature(run)

        @functools.wraps(run)
        def locked(*args: P.args, **kwargs: P.kwargs) -> R:
            name, *attributes = argument.split(".")
            folder = signature.bind(*args, **kwargs).arguments[name]
            for attribute in attributes:
                folder = getattr(folder, attribute)
            with folder_lock(Path(folder), command, FolderBusy):
                return run(*args, **kwargs)

        return locked

    return decorate
