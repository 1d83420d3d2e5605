"""One judge in two processes (`JudgeWorkers`): the same replies as the judge in this process, each in its
request's place, the outputs of one input judged by one worker; a worker killed mid-scoring stops the scoring
with one line naming its signal and log, and what arrived before stays with the caller; a judge that cannot
load fails at the start; a scoring stopped early (interrupted, or a worker's error) stops the workers at once
and lets the process exit, however much was still queued. On a tiny randomly
initialised Llama with SmolLM2's tokenizer (transformers, drafted decoding as the protocol judges): random
weights make each prompt's reply its own, so a result put in another request's place would show."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from support.tiny_models import tiny_llama

from spanjudge.core.errors import SpanjudgeError
from spanjudge.inference.judge import Judge
from spanjudge.inference.judge_workers import JudgeWorkers, input_groups, longest_first

ARTICLES = ["The council met on Tuesday to discuss the budget for schools and roads. " * 2,
            "A storm closed the harbour for two days; the ferries resumed on Friday. " * 3]  # fmt: skip
OUTPUTS = ["The council met.", "Ferries stopped.", "Nothing happened.", "Roads were approved on Tuesday."]
OPTIONS = {"retries": 0, "max_new_tokens": 12, "decoding": "drafted"}


def test_two_workers_write_the_judges_replies_in_order_and_a_killed_one_is_said(tmp_path: Path) -> None:
    folder = tmp_path / "judge"
    tiny_llama(folder, initializer_range=0.2)
    here = Judge.from_pretrained(folder, **OPTIONS)
    requests = [
        here.request("summeval", "coherence", {"Article": article}, output, id=f"{a}-{n}")
        for n, output in enumerate(OUTPUTS)
        for a, article in enumerate(ARTICLES)
    ]  # the two inputs interleaved: a worker takes each input's four outputs together
    assert input_groups(requests) == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert longest_first(input_groups(requests), requests) == [[1, 3, 5, 7], [0, 2, 4, 6]]  # the most text first
    try:
        expected = [(result.id, result.raw_replies, result.unscored_reason) for result in here.score(requests)]
    finally:
        here.close()
    assert len({replies[0] for _, replies, _ in expected}) > 1  # the prompts' replies differ

    logs = tmp_path / "logs"
    workers = JudgeWorkers(Judge.prepare(folder, **OPTIONS), workers=2, threads=1, log_dir=logs)
    try:
        arrived: list[int] = []
        results = workers.score(requests, progress=lambda n: None, on_result=lambda i, _: arrived.append(i))
        assert [(r.id, r.raw_replies, r.unscored_reason) for r in results] == expected
        assert sorted(arrived) == list(range(len(requests)))
        assert workers.name == str(folder) and workers.request("summeval", "coherence", {"Article": "x"}, "y").output

        def kill_all(index: int, _: object) -> None:  # the first result back: every worker killed
            arrived.append(index)
            for process in workers._processes:
                os.kill(process.pid, signal.SIGKILL)

        arrived.clear()
        with pytest.raises(SpanjudgeError) as failure:
            workers.score(requests, on_result=kill_all)
    finally:
        workers.close()
    said = str(failure.value)
    assert "crashed: killed by SIGKILL" in said and f"its log ({logs}/worker-" in said, said
    assert 1 <= len(arrived) < len(requests)  # what came back first was handed over; the rest was not invented
    assert len(said.splitlines()) == 1

    prepared = Judge.prepare(folder, **OPTIONS)
    (folder / "model.safetensors").unlink()  # gone between the checks and the load
    failing = JudgeWorkers(prepared, workers=1)  # its logs in a temporary folder
    with pytest.raises(SpanjudgeError, match=r"judging worker 0: the judge did not load: .*its log: ") as failed:
        failing.start()
    failing.close()  # as a caller's `finally` does: the log the message names stays
    assert Path(str(failed.value).rsplit("its log: ", 1)[1]).is_file()


# Run in a child process: a scoring stopped early once left this process unable to exit (the groups still queued
# waited to be handed to workers that were gone), which only the process's end shows.
STOPPED_EARLY = """
import sys
from pathlib import Path
from spanjudge.core.errors import SpanjudgeError
from spanjudge.inference.judge import Judge
from spanjudge.inference.judge_workers import JudgeWorkers

folder, template, logs = sys.argv[1:]
prepared = Judge.prepare(folder, prompt_template=template, **OPTIONS)
workers = JudgeWorkers(prepared, workers=2, threads=1, log_dir=Path(logs))
requests = [  # about 150 kB of groups: more than a pipe holds
    workers.request("summeval", "coherence", {"Article": f"Report {n}: " + "the harbour reopened. " * 120},
                    "It reopened.", id=str(n))
    for n in range(60)
]
failing = workers.request("summeval", "coherence", {"Article": "Report: " + "the ferries ran late. " * 200},
                          "FAIL", id="failing")  # the longest input: the first group a worker takes

class Interrupted(Exception):
    pass

def interrupt(index, result):
    raise Interrupted

try:
    workers.score(requests, on_result=interrupt)
except Interrupted:
    stopped = list(workers._processes)
    workers.close()
    print("interrupted:", [process.exitcode for process in stopped])
try:
    workers.score([*requests, failing])
except SpanjudgeError as error:
    print("failed:", error)
workers.close()
"""


def test_a_scoring_stopped_early_stops_its_workers_at_once_and_says_a_workers_error(tmp_path: Path) -> None:
    folder, template = tmp_path / "judge", tmp_path / "prompt.jinja"
    tiny_llama(folder, initializer_range=0.2)
    # a user's template that fails on one item only, where a worker renders it
    template.write_text(
        "{{ inputs.Article }}\n{% if outputs.Summary == 'FAIL' %}{{ inputs.Headline }}{% endif %}{{ outputs.Summary }}"
    )
    code = f"OPTIONS = {OPTIONS!r}\n{STOPPED_EARLY}"
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(template), str(tmp_path / "logs")],
        capture_output=True,
        text=True,
        timeout=300,
    )  # a process that cannot exit fails here, by the timeout
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout.splitlines()
    # interrupted: both workers stopped by SIGTERM, not left to judge the queued groups for no one
    assert said[0] == f"interrupted: [{-signal.SIGTERM}, {-signal.SIGTERM}]", done.stdout
    # the worker's error, said as the judge says it (the template's file and line, the item), in one line
    assert said[1].startswith("failed: judging worker ") and f"{template}:2: " in said[1], done.stdout
    assert "Headline" in said[1] and "(item failing)" in said[1] and len(said) == 2, done.stdout
