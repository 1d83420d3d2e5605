"""A llama.cpp server or engine whose process dies is reported as a crash: at start, mid-run in every failure, in the
in-process engine's probe, and in the demo step that used it.

Real llama.cpp where the behaviour is llama.cpp's; a scripted server that dies on demand otherwise."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pytest
from support.faults import one_item_score_args

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import SpanjudgeError
from spanjudge.inference.backends import BackendSpec, make_backend
from spanjudge.inference.backends.base import BackendError, CallFailure, ChatRequest
from spanjudge.inference.backends.llamacpp import LlamaCppServer
from spanjudge.inference.judge import Judge
from spanjudge.inference.shipped_models import smollm2_gguf

_FAULTING_SERVER = """
import os, signal, sys, json
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps({"object": "list", "data": []}).encode()
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        print("ggml_backend_amx_mul_mat: about to run ldtilecfg (stand-in)", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGSEGV)
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


class _FaultingServer(LlamaCppServer):
    """A stand-in for a llama.cpp build this CPU cannot run: it loads, answers GET /v1/models, and dies with a
    segmentation fault at its first completion (as an AMX build dies at ldtilecfg in a VM that forbids AMX)."""

    def command(self) -> list[str]:
        return [sys.executable, "-c", _FAULTING_SERVER, str(self.port)]


def test_a_server_that_dies_at_its_first_completion_is_a_crash_at_start(tmp_path: Path) -> None:
    server = _FaultingServer(smollm2_gguf(), alias="judge", log_path=tmp_path / "judge.log")
    with pytest.raises(SpanjudgeError) as raised:
        server.start(timeout=60)
    message = str(raised.value)
    assert "the llama.cpp server 'judge'" in message and "crashed: killed by SIGSEGV" in message
    assert "ldtilecfg (stand-in)" in message  # the end of its log
    assert "run the same command again: finished work is kept" in message and "\n" not in message


def test_a_server_that_crashes_mid_run_is_named_in_every_failure(
    smollm2_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with LlamaCppServer(smollm2_path, alias="judge", n_ctx=2048, n_threads=1, log_path=tmp_path / "j.log") as server:
        assert server.process is not None
        os.kill(server.process.pid, signal.SIGSEGV)  # a real crash of the real server
        server.process.wait(timeout=30)
        spec = BackendSpec(kind="openai", model="judge", endpoints=(server.base_url,), retries=3, backoff_s=0.01)
        first, second = make_backend(spec).generate([ChatRequest.user("hi"), ChatRequest.user("again")])
        for failure in (first, second):  # annotate's backend: no retry of a dead server, the crash said
            assert isinstance(failure, CallFailure) and "crashed: killed by SIGSEGV" in failure.reason
        args, out = one_item_score_args(tmp_path, "judge", "--engine", "openai", "--base-url", server.base_url)
        assert cli_main(args) == 1
        [row] = [json.loads(line) for line in out.read_text().splitlines()]
        assert "the llama.cpp server 'judge'" in row["call_failure"] and "SIGSEGV" in row["call_failure"]


def test_the_in_process_engine_reports_a_crash_of_its_probe(
    smollm2_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanjudge.inference.backends.llamacpp import local as llamacpp_local

    # a stand-in for a build that faults on this CPU: the probe's child dies as such a build dies
    monkeypatch.setattr(llamacpp_local, "_PROBE", "import os, signal\nprint('loading')\nos.kill(os.getpid(), 11)")
    monkeypatch.setattr(llamacpp_local, "_PROBED", set())
    with pytest.raises(BackendError) as raised:
        Judge.from_pretrained(smollm2_folder, engine="llamacpp", engine_options={"gguf": str(smollm2_gguf())})
    message = str(raised.value)
    assert "llama.cpp crashed loading gguf=" in message and "killed by SIGSEGV" in message and "loading" in message


def test_a_demo_step_whose_server_crashed_says_so(smollm2_path: Path, tmp_path: Path) -> None:
    """The demo's annotate step saw only requests that "did not answer"; the demo names the crash instead."""
    from spanjudge.app.demo import run as demo

    server = LlamaCppServer(smollm2_path, alias="smollm2", n_ctx=1024, n_threads=1, log_path=tmp_path / "s.log")
    demo._SERVERS.append(server.start())
    try:

        def annotate(ctx: Any) -> tuple[str, dict[str, Any]]:
            assert server.process is not None
            os.kill(server.process.pid, signal.SIGSEGV)  # the server dies under the step
            server.process.wait(timeout=30)
            raise SpanjudgeError("annotate: 8 requests are incomplete (a model server did not answer)")

        with pytest.raises(SpanjudgeError) as raised:
            demo.run_step(demo.Step("annotate", "annotate", annotate), ctx=None)  # type: ignore[arg-type]
        message = str(raised.value)
        assert message.startswith("annotate: the llama.cpp server 'smollm2'") and "killed by SIGSEGV" in message
        assert "`make demo` again resumes" in message
    finally:
        demo._SERVERS.clear()
        server.stop()
