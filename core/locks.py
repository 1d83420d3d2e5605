"""One writer at a time: an output folder (`folder_lock`: annotate's, a training run's) or an append-only store
(`jsonl.JsonlStore`) is held by one run, and a second run is refused at once with one line
naming the holder, rather than left racing the first (or waiting on a run that may take hours).

The lock is an flock(2) on a lock file: the kernel releases it when the holder exits, however
it exits, so a killed run never leaves a stale lock behind. The file holds the holder's command,
pid, host and start time for the refusal message.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

from .errors import SpanjudgeError


class Busy(SpanjudgeError):
    """Another run holds the file or folder this run would write."""


def this_command() -> str:
    """How this process was started, as a refusal message names it (`spanjudge score`)."""
    words = [Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"]
    words += [word for word in sys.argv[1:2] if not word.startswith("-")]
    return " ".join(words)


def _holder(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    text = os.read(fd, 4096).decode("utf-8", errors="replace").strip()
    return text or "a run that is just starting"


def _same_file(fd: int, path: Path) -> bool:
    """Whether `path` still names the file open as `fd` (a releasing holder may have removed it)."""
    try:
        return os.path.samestat(os.fstat(fd), os.lstat(path))
    except FileNotFoundError:
        return False


def _open_lock(lock_file: Path, what: Path | str) -> int:
    """The lock file, opened for reading and writing (created if missing); only ever a regular file of its own.

    A symbolic link planted at the lock path is never followed (O_NOFOLLOW): writing the holder's line
    would truncate whatever it points to. A folder, a FIFO or a device there is refused the same way."""
    refusal = f"{what}: its lock file {lock_file} is not a regular file"
    try:
        # no O_TRUNC: the holder's line stays; O_NONBLOCK: a FIFO there must not hang the open
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SpanjudgeError(
                f"{refusal} but a symbolic link; spanjudge never writes through one: remove it"
            ) from None
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            raise SpanjudgeError(f"{refusal}; remove it (or choose another output)") from None
        raise  # a read-only or full disk: the command's one line names the path
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SpanjudgeError(f"{refusal}; remove it (or choose another output)")
    return fd


def acquire(
    lock_file: Path, what: Path | str, command: str, error: type[Busy] = Busy, elsewhere: str = "choose another --out"
) -> int:
    """Lock `lock_file` for this process and return its descriptor; `error` (one line naming
    the holder, and `elsewhere`: how to write somewhere else) when another holds it. `what` is
    the file or folder the lock guards."""
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    for _ in range(10):  # bounded: only a holder removing the file as we open it makes us retry
        fd = _open_lock(lock_file, what)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise error(f"{what} is in use by {holder}; wait for that run to end or {elsewhere}") from None
        if _same_file(fd, lock_file):
            started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            with contextlib.suppress(OSError):  # who holds it is for messages only: a full disk must not leak the lock
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"`{command}` (pid {os.getpid()} on {socket.gethostname()}, since {started})".encode(), 0)
            return fd
        os.close(fd)  # we locked a file its holder has just removed: lock the new one
    raise error(f"{what}: could not take its lock file {lock_file}")


def release(fd: int, lock_file: Path | None = None) -> None:
    """Release a lock; `lock_file` given: remove it first, so no lock file is left beside the data."""
    if lock_file is not None and _same_file(fd, lock_file):  # never another file put at its path since
        with contextlib.suppress(FileNotFoundError):
            lock_file.unlink()
    os.close(fd)  # closing the descriptor releases the lock


@contextlib.contextmanager
def exclusive(
    lock_file: Path, what: Path | str, command: str, error: type[Busy] = Busy, elsewhere: str = "choose another --out"
) -> Iterator[None]:
    """Hold `lock_file` until the block ends (the file stays, with the last holder's line)."""
    fd = acquire(lock_file, what, command, error, elsewhere)
    try:
        yield
    finally:
        release(fd)


FOLDER_LOCK = ".spanjudge.lock"  # the lock file of an output folder held by one run


@contextlib.contextmanager
def folder_lock(
    folder: Path, command: str, error: type[Busy] = Busy, elsewhere: str = "choose another --out"
) -> Iterator[None]:
    """Hold the output `folder` (created if missing) for this process until the block ends; `error` (one
    line naming the holder, and `elsewhere`) if another run holds it."""
    folder.mkdir(parents=True, exist_ok=True)
    with exclusive(folder / FOLDER_LOCK, folder, command, error, elsewhere):
        yield


# -- shared within a process -----------------------------------------------------------------
#
# A store is refused to a second *process*; inside one process, every opening of one store
# shares the lock (a meta-eval step reopens its judge's store, threads append to one file), so
# the lock is counted and released with the last opening.

_HELD: dict[Path, tuple[int, int]] = {}  # lock file -> (descriptor, openings)
_HELD_LOCK = threading.Lock()


def hold(lock_file: Path, what: Path | str, command: str | None = None) -> None:
    """Take (or share, within this process) the lock on `lock_file`; Busy if another process holds it."""
    key = lock_file.resolve()
    with _HELD_LOCK:
        fd, count = _HELD.get(key) or (acquire(lock_file, what, command or this_command()), 0)
        _HELD[key] = (fd, count + 1)


def unhold(lock_file: Path) -> None:
    """Give back one `hold`; the last one releases the lock and removes the lock file."""
    key = lock_file.resolve()
    with _HELD_LOCK:
        if key not in _HELD:
            return
        fd, count = _HELD.pop(key)
        if count > 1:
            _HELD[key] = (fd, count - 1)
        else:
            release(fd, lock_file)
