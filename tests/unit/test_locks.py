"""Lock files are only ever regular files of their own: a symbolic link, a folder or a FIFO planted at a
lock path (an output folder's .spanjudge.lock, a results file's .NAME.lock) is refused in one line, and
nothing it points to is truncated, written or deleted."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.jsonl import JsonlStore, lock_path
from spanjudge.core.locks import FOLDER_LOCK, folder_lock


def _plant_link(at: Path, tmp_path: Path) -> Path:
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    at.parent.mkdir(parents=True, exist_ok=True)
    at.symlink_to(victim)
    return victim


def test_a_link_at_an_output_folders_lock_is_refused_and_its_target_untouched(tmp_path: Path) -> None:
    out = tmp_path / "out"
    victim = _plant_link(out / FOLDER_LOCK, tmp_path)
    with pytest.raises(SpanjudgeError, match="is not a regular file but a symbolic link; spanjudge never writes"):
        folder_lock(out, "spanjudge annotate").__enter__()
    assert victim.read_text() == "precious\n" and (out / FOLDER_LOCK).is_symlink()


def test_a_link_at_a_stores_lock_is_refused_and_neither_it_nor_its_target_is_touched(tmp_path: Path) -> None:
    results = tmp_path / "scores.jsonl"
    victim = _plant_link(lock_path(results), tmp_path)
    with pytest.raises(SpanjudgeError, match=r"\.scores\.jsonl\.lock is not a regular file but a symbolic link"):
        JsonlStore(results, lambda row, where: row)
    assert victim.read_text() == "precious\n" and lock_path(results).is_symlink()


@pytest.mark.parametrize("kind", ["folder", "fifo"])
def test_a_folder_or_fifo_at_a_lock_path_is_one_line(tmp_path: Path, kind: str) -> None:
    out = tmp_path / "out"
    out.mkdir()
    if kind == "folder":
        (out / FOLDER_LOCK).mkdir()
    else:
        os.mkfifo(out / FOLDER_LOCK)
    with pytest.raises(SpanjudgeError, match=r"lock file .*\.spanjudge\.lock is not a regular file; remove it"):
        folder_lock(out, "spanjudge train").__enter__()


def test_a_regular_lock_is_taken_and_left_for_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with folder_lock(out, "spanjudge train"):
        assert "spanjudge train" in (out / FOLDER_LOCK).read_text()
    with folder_lock(out, "spanjudge train"):  # the file a run left behind is taken again
        pass
