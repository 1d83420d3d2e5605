"""The summary of a resumed training run (issue #19 item 10): its mean training loss covers
the whole run, read from the log history the checkpoint restores, not only the steps trained
after the resume. The history below has the Trainer's shape (one `loss` per logging step, the
mean since the previous log); no model is needed to check the arithmetic."""

from __future__ import annotations

import pytest

from spanjudge.training.run_folder import checkpoint_step, whole_run_train_loss

LOSSES = [4.0, 3.6, 3.1, 2.9, 2.0, 1.8, 1.5, 1.3]  # steps 1-8


def history(logged_steps: list[int], upto: int) -> list[dict]:
    """Log entries at `logged_steps` (each the mean loss since the previous one), up to `upto`."""
    entries, previous = [], 0
    for step in logged_steps:
        if step > upto:
            break
        window = LOSSES[previous:step]
        entries.append({"loss": sum(window) / len(window), "grad_norm": 1.0, "learning_rate": 1e-4, "step": step})
        previous = step
    return entries


def test_resumed_run_reports_the_mean_over_every_step() -> None:
    # killed after checkpoint-4, resumed: the Trainer reports the mean of steps 5-8 only (1.65)
    since_resume = sum(LOSSES[4:]) / 4
    restored = [*history([1, 2, 3, 4, 5, 6, 7, 8], upto=8), {"eval_loss": 2.5, "step": 8}]
    whole = whole_run_train_loss(restored, checkpoint_step("/runs/x/checkpoint-4"), since_resume, 8)
    assert whole == pytest.approx(sum(LOSSES) / 8)  # 2.525, not 1.65


def test_log_windows_weigh_by_their_steps_and_unlogged_steps_are_not_invented() -> None:
    # logging every 3 steps with the first step logged: windows of 1, 2 and 3 steps; the
    # checkpoint at step 7 came after the last log (6), so step 7's loss was lost with the kill
    since_resume = LOSSES[7]
    restored = history([1, 3, 6, 8], upto=7)
    whole = whole_run_train_loss(restored, 7, since_resume, 8)
    assert whole == pytest.approx((sum(LOSSES[:6]) + LOSSES[7]) / 7)


def test_a_run_that_never_resumed_keeps_the_trainer_figure() -> None:
    assert whole_run_train_loss(history([1, 2], upto=2), 0, 3.8, 2) == 3.8
    assert checkpoint_step(None) == 0
    assert whole_run_train_loss([], 4, None, 8) is None
