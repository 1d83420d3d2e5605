"""training/step_times.py: speed is read from the steps after the warm-up, per step's own tokens."""

from __future__ import annotations

from types import SimpleNamespace

from spanjudge.training.step_times import StepTimes, steady_speed


def test_steady_speed_leaves_out_the_warm_up_steps() -> None:
    # a slow first step (CUDA context, autotuning), then steady ones of 1,000 tokens in 0.5 s
    steps = [{"step": 1, "seconds": 30.0, "tokens_seen": 1000}]
    steps += [{"step": n, "seconds": 0.5, "tokens_seen": 1000 * n} for n in range(2, 11)]
    steady = steady_speed(steps, warmup=3)
    assert steady == {"timed_steps": 7, "warmup_steps": 3, "median_step_s": 0.5, "tokens_per_second": 2000.0}
    whole = sum(s["tokens_seen"] for s in steps[-1:]) / sum(s["seconds"] for s in steps)
    assert whole < 300  # what the whole run's figure would have said
    assert steady_speed(steps[:3], warmup=3) is None  # nothing after the warm-up: no steady figure
    assert steady_speed(steps, warmup=0)["timed_steps"] == 9  # the first step never has a token count of its own


def test_step_times_records_each_optimizer_step() -> None:
    ticks = iter([0.0, 2.0, 10.0, 10.5])
    recorder = StepTimes(clock=lambda: next(ticks))
    state = SimpleNamespace(global_step=0, num_input_tokens_seen=0)
    for step, tokens in ((1, 400), (2, 900)):
        recorder.on_step_begin(None, state, None)
        state.global_step, state.num_input_tokens_seen = step, tokens
        recorder.on_step_end(None, state, None)
    assert recorder.steps == [
        {"step": 1, "seconds": 2.0, "tokens_seen": 400},
        {"step": 2, "seconds": 0.5, "tokens_seen": 900},
    ]
    assert steady_speed(recorder.steps, warmup=1)["tokens_per_second"] == 1000.0
