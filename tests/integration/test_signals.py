"""A signal says what was kept and the rerun finishes; SIGTERM inside an asyncio task leaves without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from support.faults import GOOD, Serve, items, served_score, served_score_args
from support.standin import Reply

SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")], ids=["term", "int"]
)
def test_a_signal_says_what_was_kept_and_the_rerun_finishes(
    serve: Serve, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD, delay=0.3)])
    data, out = items(tmp_path / "items.jsonl", 20), tmp_path / "scores.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(  # SIGINT as a terminal delivers it (a background job's shell ignores it)
        [SPANJUDGE, *served_score_args(url, data, out)], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while (not out.exists() or not out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert "Traceback" not in err and f"interrupted ({said})" in err and "re-run the same command" in err
    kept = len(out.read_text().splitlines())
    assert 1 <= kept < 20
    stand_in.replies = [Reply(text=GOOD)]
    assert served_score(url, data, out) == 0
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted(f"item-{n}" for n in range(20))  # each once: nothing redone


def test_sigterm_inside_an_asyncio_task_leaves_the_loop_without_an_unhandled_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The race behind a flaky run of the test above: SIGTERM that lands while a task runs (a row
    being written from a served judge's callback) became that task's exception, which asyncio.run's
    shutdown logged as a traceback. Sent from inside the task, it lands there every time."""
    import asyncio

    from spanjudge.app.cli import Terminated, _raise_terminated

    finished: list[str] = []

    async def writes_a_row() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs right here, inside this task's step
        finished.append("row")  # the step that was running finishes: the row is written
        await asyncio.sleep(5)

    async def judge() -> None:
        await asyncio.gather(writes_a_row(), asyncio.sleep(5))

    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with pytest.raises(Terminated):
            asyncio.run(judge())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert finished == ["row"]
    assert not [record for record in caplog.records if record.name == "asyncio"], caplog.text
