"""A signal says what was kept and the rerun finishes; SIGTERM inside an asyncio task leaves without a traceback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.standin import Reply, StandIn

from spanjudge.app.cli import main as cli_main

SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))


TASK, ASPECT = "qags_xsum", "factual consistency"


GOOD = "Error 1:\nLocation: on a hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"


Serve = Callable[..., tuple[StandIn, str]]


def _items(path: Path, count: int, first: int = 0) -> Path:
    rows = [
        {"id": f"item-{n}", "article": f"The cat {n} sat on the mat.", "summary": "A cat sat on a hat."}
        for n in range(first, first + count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _score_args(url: str, data: Path, out: Path, *more: str) -> list[str]:
    return [
        "score", "--model", "stand-in-judge", "--engine", "openai", "--base-url", url, "--served-model", "judge",
        "--data", str(data), "--out", str(out), "--task", TASK, "--aspect", ASPECT,
        "--input", "Article=article", "--output-field", "summary", "--max-new-tokens", "96", "--retries", "0", *more,
    ]  # fmt: skip


def _score(url: str, data: Path, out: Path, *more: str) -> int:
    return cli_main(_score_args(url, data, out, *more))


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")], ids=["term", "int"]
)
def test_a_signal_says_what_was_kept_and_the_rerun_finishes(
    serve: Serve, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD, delay=0.3)])
    data, out = _items(tmp_path / "items.jsonl", 20), tmp_path / "scores.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(  # SIGINT as a terminal delivers it (a background job's shell ignores it)
        [SPANJUDGE, *_score_args(url, data, out)], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
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
    assert _score(url, data, out) == 0
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
