"""Training checkpoints: a torn one is skipped and set aside on resume, and one is asked for once the minutes
have passed."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace


def test_resume_skips_a_torn_checkpoint_and_sets_it_aside(tmp_path: Path) -> None:
    from spanjudge.training.checkpoints import TRAINER_STATE, resume_point

    for step, complete in ((10, True), (20, True), (30, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / TRAINER_STATE).write_text("{}")
    said: list[str] = []
    assert resume_point(tmp_path, main=False, say=said.append) == str(tmp_path / "checkpoint-20")
    assert said == [] and (tmp_path / "checkpoint-30").is_dir()  # another process only skips it
    assert resume_point(tmp_path, main=True, say=said.append) == str(tmp_path / "checkpoint-20")
    assert not (tmp_path / "checkpoint-30").exists() and (tmp_path / "torn-checkpoint-30").is_dir()
    assert len(said) == 1 and "checkpoint-30 is incomplete" in said[0]
    assert resume_point(tmp_path / "absent", main=True, say=said.append) is None


def test_a_checkpoint_is_asked_for_once_the_minutes_have_passed() -> None:
    from spanjudge.training.checkpoints import TimedSaves

    now = [0.0]
    saves = TimedSaves(minutes=5, clock=lambda: now[0])
    control = SimpleNamespace(should_save=False)
    now[0] = 299.0
    assert not saves.on_step_end(None, None, control).should_save
    now[0] = 301.0
    assert saves.on_step_end(None, None, control).should_save
    saves.on_save(None, None, control)
    control.should_save = False
    now[0] = 400.0
    assert not saves.on_step_end(None, None, control).should_save
