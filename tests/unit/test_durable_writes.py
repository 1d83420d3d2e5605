"""Writes leave nothing behind when they fail, and written files and folders follow the umask."""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

import pytest

from spanjudge.core.fileio import atomic_directory, atomic_write_text


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(tmp_path / "results.json", "x" * 1000)
    assert list(tmp_path.iterdir()) == []


def test_written_files_and_folders_follow_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "shared.json", "{}")
        with atomic_directory(tmp_path / "dataset", "test output") as scratch:
            (scratch / "part.txt").write_text("x")
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.json", "{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "dataset").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600
