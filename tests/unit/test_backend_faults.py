"""Model calls that go wrong where a plain retry does not see it (issue #19, items 3, 13, 14):
a 200 reply with no text, a reply cut off at max_tokens, a 200 that is no completion at
all (an HTML page, no `choices`), and a server that accepts connections but never answers.

The real `openai` / `ollama` clients, the real runner, cache and annotation pipeline run
against servers on 127.0.0.1 that misbehave on purpose: a stdlib `http.server` answering
raw scripted bodies, and a listening socket that never accepts. Each is stopped when its
test ends.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.annotate_runs import good_annotator, read_lines, run_annotation, write_configs
from support.standin import Reply
from typer.testing import CliRunner

from spanjudge.inference.backends import (
    BackendSpec,
    CachedBackend,
    CallFailure,
    ChatRequest,
    Completion,
    LLMCache,
    SamplingParams,
    make_backend,
)
from spanjudge.inference.backends.openai_compat import OpenAIBackend

pytestmark = pytest.mark.timeout(120)


# -- misbehaving servers -------------------------------------------------------------------


@dataclass(frozen=True)
class Raw:
    """One scripted answer: any status, content type and body, valid or not."""

    body: bytes | str | dict[str, Any] | list[Any]
    status: int = 200
    content_type: str = "application/json"

    def data(self) -> bytes:
        if isinstance(self.body, bytes):
            return self.body
        return (self.body if isinstance(self.body, str) else json.dumps(self.body)).encode()


def chat_reply(content: str | None, finish_reason: str = "stop") -> dict[str, Any]:
    choice = {"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": finish_reason}
    return {"id": "c", "object": "chat.completion", "created": 0, "model": "m", "choices": [choice]}


def ollama_reply(content: str | None) -> dict[str, Any]:
    message = {"role": "assistant", "content": content}
    return {"model": "m", "created_at": "2026-01-01T00:00:00Z", "message": message, "done": True, "done_reason": "stop"}


ANSWERS = Callable[[dict[str, Any]], Raw]


@pytest.fixture
def raw_serve() -> Iterator[Callable[..., tuple[list[dict[str, Any]], str]]]:
    """raw_serve(answer, ollama=False, busy_s=0) -> (request bodies seen, base URL). GETs (health
    checks) get a well-formed empty model list, after `busy_s` seconds."""
    servers: list[ThreadingHTTPServer] = []

    def start(answer: ANSWERS, ollama: bool = False, busy_s: float = 0.0) -> tuple[list[dict[str, Any]], str]:
        bodies: list[dict[str, Any]] = []

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                time.sleep(busy_s)
                self._send(Raw({"models": []} if ollama else {"object": "list", "data": []}))

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                bodies.append(body)
                self._send(answer(body))

            def _send(self, raw: Raw) -> None:
                data = raw.data()
                self.send_response(raw.status)
                self.send_header("Content-Type", raw.content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        host, port = server.server_address[:2]
        return bodies, f"http://{host}:{port}" + ("" if ollama else "/v1")

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.fixture
def hung_url() -> Iterator[str]:
    """A server that is listening but never answers: the kernel accepts connections into the
    backlog, nobody reads them (a process stopped or stuck). Closed when the test ends."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def _spec(kind: str, *endpoints: str, **overrides: Any) -> BackendSpec:
    fields: dict[str, Any] = {"kind": kind, "model": "m", "endpoints": endpoints, "backoff_s": 0.01, "retries": 0}
    return BackendSpec(**{**fields, **overrides})


def _requests(count: int, max_tokens: int = 8) -> list[ChatRequest]:
    return [ChatRequest.user(f"question {i}", SamplingParams(max_tokens=max_tokens)) for i in range(count)]


# -- item 3: only complete replies are cached ---------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_a_reply_without_text_is_a_failure_that_a_rerun_asks_again(raw_serve, serve, tmp_path: Path, kind: str) -> None:
    ollama = kind == "ollama"
    _, broken = raw_serve(lambda _: Raw(ollama_reply(None) if ollama else chat_reply(None)), ollama=ollama)
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        [failed] = CachedBackend(make_backend(_spec(kind, broken)), cache).generate(_requests(1))
        assert isinstance(failed, CallFailure) and failed.kind == "server"
        assert "has no text" in failed.reason and "null" in failed.reason
        assert len(cache) == 0  # an empty answer stored here would be served to every re-run

        _, healthy = serve([Reply(text="fixed")], ollama=ollama)
        again = CachedBackend(make_backend(_spec(kind, healthy)), cache)
        [result] = again.generate(_requests(1))
    assert isinstance(result, Completion) and result.text == "fixed"
    assert (again.model_calls, again.cache_hits) == (1, 0)


def test_a_cut_off_reply_is_a_failure_for_callers_that_need_whole_replies(raw_serve, tmp_path: Path) -> None:
    bodies, url = raw_serve(lambda _: Raw(chat_reply("Error 1:\nLocation: the", finish_reason="length")))
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        whole = CachedBackend(make_backend(_spec("openai", url)), cache, accept_truncated=False)
        [failed] = whole.generate(_requests(1, max_tokens=8))
        assert isinstance(failed, CallFailure) and failed.kind == "truncated" and failed.cause == "truncated"
        assert "cut off at max_tokens=8" in failed.reason and failed.endpoint == url
        assert len(cache) == 1  # the model's reply, stored: a re-run never asks for it again
        [failed] = whole.generate(_requests(1, max_tokens=8))
        assert isinstance(failed, CallFailure) and failed.kind == "truncated" and len(bodies) == 1
        assert whole.cache_hits == 1

        # callers that take cut-off text as it is (output generation counts it) get the stored reply
        keeps = CachedBackend(make_backend(_spec("openai", url)), cache)
        [kept] = keeps.generate(_requests(1, max_tokens=8))
        assert isinstance(kept, Completion) and kept.finish_reason == "length" and kept.cached and len(bodies) == 1


def test_a_cut_off_annotator_reply_is_asked_again_with_twice_the_room(
    raw_serve, serve, tmp_path: Path, shared_data: Path
) -> None:
    _, url_a = serve(good_annotator("Good"))
    _, url_sup = serve(good_annotator())
    whole = good_annotator("Fair")

    def room_needed(body: dict) -> Raw:  # a model that needs more than 64 tokens and ends within 128
        return Raw(chat_reply(whole(body).text, finish_reason="length" if body["max_tokens"] < 128 else "stop"))

    bodies, url_b = raw_serve(room_needed)
    summary = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (summary.records, summary.partial, summary.failed_calls) == (3, 0, {})
    assert sorted(body["max_tokens"] for body in bodies) == [64] * 3 + [128] * 3
    record = read_lines(tmp_path / "out" / "train.jsonl")[0]
    b = record["provenance"]["annotators"][1]
    assert (b["status"], b["asked_again_with_max_tokens"], b["label"]) == ("answered", 128, "Fair")
    again = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert again.total_model_calls == 0 and len(bodies) == 6  # both replies are stored: a re-run asks nothing


def test_a_member_that_always_runs_past_max_tokens_never_stops_the_run(
    raw_serve, serve, tmp_path: Path, shared_data: Path
) -> None:
    a, url_a = serve(good_annotator("Good"))
    _, url_sup = serve(good_annotator())
    cut_off = good_annotator("Fair")
    bodies, url_b = raw_serve(lambda body: Raw(chat_reply(cut_off(body).text, finish_reason="length")))
    first = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (first.records, first.unscored, first.incomplete, first.partial) == (3, 0, 0, 3)
    assert first.failed_calls == {"b": {"truncated": 3}} and len(bodies) == 6  # each asked once more, with room
    [failure, *_] = read_lines(tmp_path / "out" / "failed_calls.jsonl")
    assert failure["reason"].startswith("truncated: cut off at max_tokens=64, and asked again with 128: cut off again")

    _, healthy_b = serve(good_annotator("Excellent"))
    urls = {"a": url_a, "b": healthy_b, "sup": url_sup}
    again = run_annotation(tmp_path, urls, shared_data)  # the same model, the same request: its stored replies
    assert (again.total_model_calls, again.partial) == (0, 3)
    refreshed = _run_refresh(tmp_path, urls, shared_data)  # a server fixed (a larger context): asked again
    assert (refreshed.records, refreshed.incomplete, refreshed.partial) == (3, 0, 0)
    assert (refreshed.model_calls["a"], refreshed.model_calls["b"], a.hits) == (0, 3, 3)


def test_refresh_unscored_asks_again_for_cached_replies_that_did_not_parse(
    serve, tmp_path: Path, shared_data: Path
) -> None:
    _, ramble_a = serve([Reply(text="This summary is mostly fine.")])
    _, ramble_b = serve([Reply(text="This summary is mostly fine.")])
    _, url_sup = serve(good_annotator())
    first = run_annotation(tmp_path, {"a": ramble_a, "b": ramble_b, "sup": url_sup}, shared_data)
    assert (first.records, first.unscored) == (0, 3)

    a, url_a = serve(good_annotator("Good"))
    b, url_b = serve(good_annotator("Fair"))
    urls = {"a": url_a, "b": url_b, "sup": url_sup}
    plain = run_annotation(tmp_path, urls, shared_data)
    assert (plain.records, plain.unscored, a.hits, b.hits) == (0, 3, 0, 0)  # the cache answers, as designed

    refreshed = _run_refresh(tmp_path, urls, shared_data)
    assert (refreshed.records, refreshed.unscored, refreshed.incomplete) == (3, 0, 0)
    assert (a.hits, b.hits) == (3, 3)  # only the greedy replies: they parse now, no retry needed
    again = run_annotation(tmp_path, urls, shared_data)  # the fresh replies replaced the stored ones
    assert (again.records, again.total_model_calls) == (3, 0)


def _run_refresh(tmp_path: Path, urls: dict[str, str], shared_data: Path) -> Any:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.config import load_ensemble, load_sources
    from spanjudge.data_gen.pipeline import run_pipeline
    from spanjudge.data_gen.source_run import SourceRun

    ensemble, sources = write_configs(tmp_path, urls)
    run = SourceRun(load_sources(sources), sources, tmp_path / "out", load_catalog(), shared_data)
    return run_pipeline(load_ensemble(ensemble), run, refresh_unscored=True)


def test_score_refresh_unscored_scores_unscored_rows_again(serve, tmp_path: Path) -> None:
    from spanjudge.app.cli import main as cli_main

    data = tmp_path / "items.jsonl"
    rows = [{"id": f"r{i}", "article": "The cat sat on the mat.", "summary": f"A cat sat {i}."} for i in range(2)]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "scores.jsonl"

    def score(url: str, *more: str) -> int:
        return cli_main([
            "score", "--model", "stand-in", "--engine", "openai", "--base-url", url, "--served-model", "judge",
            "--data", str(data), "--task", "qags_xsum", "--aspect", "factual consistency",
            "--input", "Article=article", "--output-field", "summary", "--retries", "0", "--out", str(out), *more,
        ])  # fmt: skip

    _, broken = serve([Reply(text="I cannot evaluate this.")])
    assert score(broken) == 0
    assert [row["evaluation"]["score"] for row in read_lines(out)] == [None, None]
    judge, healthy = serve([Reply(text="No Error\n\nOverall score: 100")])
    assert score(healthy) == 0 and judge.hits == 0  # a plain re-run keeps them
    assert score(healthy, "--refresh-unscored") == 0 and judge.hits == 2
    assert sorted((row["id"], row["evaluation"]["score"]) for row in read_lines(out)) == [("r0", 100), ("r1", 100)]


@pytest.mark.parametrize(
    ("app", "command"),
    [("spanjudge.data_gen.cli:annotate", "annotate"), ("spanjudge.inference.score.cli:score", "score")],
)
def test_refresh_unscored_is_in_the_help(app: str, command: str) -> None:
    import importlib

    module, name = app.split(":")
    result = CliRunner().invoke(getattr(importlib.import_module(module), name), ["--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "--refresh-unscored" in result.output, command


# -- item 13: a 200 that is no completion says what the server sent -----------------------


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (Raw("<html><body>Welcome to nginx!</body></html>", content_type="text/html"), "Welcome to nginx!"),
        (Raw({"id": "c", "object": "chat.completion", "model": "m", "choices": []}), '"choices": []'),
        (Raw({"id": "c", "object": "chat.completion", "model": "m"}), '"object": "chat.completion"'),
        (Raw("{oops"), "{oops"),
        (Raw([1, 2]), "[1, 2]"),
    ],
    ids=["html", "empty-choices", "no-choices", "not-json", "json-list"],
)
def test_a_malformed_200_reply_is_reported_with_what_the_server_sent(raw_serve, raw: Raw, says: str) -> None:
    bodies, url = raw_serve(lambda _: raw)
    [result] = OpenAIBackend(_spec("openai", url, retries=1)).generate(_requests(1))
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, len(bodies)) == ("server", 2, 2)  # a server fault: retried
    assert f"HTTP 200, {raw.content_type}" in result.reason and says in result.reason, result.reason
    assert "Error:" not in result.reason and "object has no attribute" not in result.reason


def test_a_long_malformed_reply_is_quoted_short(raw_serve) -> None:
    _, url = raw_serve(lambda _: Raw("<html>" + "x" * 5000 + "</html>", content_type="text/html"))
    [result] = OpenAIBackend(_spec("openai", url)).generate(_requests(1))
    assert isinstance(result, CallFailure) and len(result.reason) < 400 and result.reason.endswith("…'")


@pytest.mark.parametrize(
    ("raw", "says"),
    [(Raw("<html>Login required</html>", content_type="text/html"), "Login required"), (Raw({}), "{}")],
    ids=["html", "empty-object"],
)
def test_a_malformed_ollama_reply_is_reported_with_what_the_server_sent(raw_serve, raw: Raw, says: str) -> None:
    _, url = raw_serve(lambda _: raw, ollama=True)
    [result] = make_backend(_spec("ollama", url)).generate(_requests(1))
    assert isinstance(result, CallFailure) and result.kind == "server"
    assert f"HTTP 200, {raw.content_type}" in result.reason and says in result.reason, result.reason


# -- item 14: a server that accepts but never answers -------------------------------------


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_a_server_that_never_answers_is_found_in_seconds(hung_url: str, kind: str) -> None:
    """By the thesis defaults this used to cost timeout_s × (retries + 1) per request."""
    url = hung_url + ("/v1" if kind == "openai" else "")
    spec = _spec(kind, url, timeout_s=5, retries=3, concurrency=2, max_consecutive_failures=10, health_check_s=0.5)
    backend = make_backend(spec)
    started = time.monotonic()
    results = backend.generate(_requests(4))
    assert time.monotonic() - started < 3
    assert all(isinstance(r, CallFailure) and r.kind == "disabled" and r.attempts == 0 for r in results)
    reason = results[0].reason  # type: ignore[union-attr]
    assert f"no answer to a health check (GET {url}/{'models' if kind == 'openai' else 'api/tags'})" in reason
    assert "within 0.5 s" in reason and reason.startswith("openai:m disabled" if kind == "openai" else "ollama:m")
    assert backend.disabled_reason == reason  # type: ignore[attr-defined]


def test_a_pool_leaves_out_the_endpoint_that_never_answers(hung_url: str, serve) -> None:
    live, url = serve([Reply(text="alive")])
    spec = _spec("openai", hung_url + "/v1", url, timeout_s=5, retries=1, health_check_s=0.5)
    started = time.monotonic()
    results = make_backend(spec).generate(_requests(4))
    assert time.monotonic() - started < 3  # no request waited timeout_s on the hung one
    assert all(isinstance(r, Completion) and r.endpoint == url and r.attempts == 1 for r in results)
    assert live.hits == 4


def test_a_busy_server_that_answers_late_is_not_taken_for_a_hung_one(raw_serve) -> None:
    """A one-slot server answers the health check only after the generation it is busy with
    (the one a killed client left behind): slower than connecting, faster than health_check_s."""
    bodies, url = raw_serve(lambda _: Raw(chat_reply("alive")), busy_s=0.6)
    spec = _spec("openai", url, timeout_s=5, connect_timeout_s=0.2, health_check_s=5)
    [result] = make_backend(spec).generate(_requests(1))
    assert isinstance(result, Completion) and len(bodies) == 1


def test_connecting_has_its_own_short_timeout() -> None:
    backend = OpenAIBackend(_spec("openai", "http://127.0.0.1:9/v1", timeout_s=600, connect_timeout_s=7))
    timeout = backend._open_client("http://127.0.0.1:9/v1").timeout
    assert (timeout.connect, timeout.read) == (7, 600)  # type: ignore[union-attr]
