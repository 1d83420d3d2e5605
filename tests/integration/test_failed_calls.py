"""Failed model calls: each says why and its rows are written, scored again on the next run, an empty reply is a failed
call and is not cached, and an empty source is an error.

Model servers are the scripted stand-in of tests/support/standin.py on 127.0.0.1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.faults import GOOD, Serve, items, one_line, served_score
from support.standin import Reply

from spanjudge.app.cli import main as cli_main


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server backend's retries without their back-off waits (Retry-After: tests/integration/test_ecosystem.py)."""
    from spanjudge.inference.backends import server

    monkeypatch.setattr(server, "backoff_delay", lambda backoff_s, retry: 0.0)


@pytest.mark.parametrize("server", ["dead port", "content null"])
def test_every_call_failing_shows_why_and_writes_the_rows(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str, no_backoff: None
) -> None:
    if server == "dead port":
        url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
    else:
        _, url = serve([Reply(text=None)])  # type: ignore[arg-type]  # a 200 whose message has no content
    data, out = items(tmp_path / "items.jsonl", 1), tmp_path / "scores.jsonl"  # one: each waits out the retries
    code = served_score(url, data, out)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "file not found" not in err, err
    assert "unscored ×1: model call failed" in err and "re-run the same command" in err.strip().splitlines()[-1]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["evaluation"]["score"] for row in rows] == [None]
    assert all(row["call_failure"] for row in rows)  # the reason, kept with the row


def test_rows_whose_call_failed_are_scored_again(serve: Serve, tmp_path: Path, no_backoff: None) -> None:
    data, out = items(tmp_path / "items.jsonl", 2), tmp_path / "scores.jsonl"
    stand_in, url = serve([Reply(text=GOOD), Reply(text=None)])  # type: ignore[list-item]  # then content: null
    assert served_score(url, data, out) == 1
    assert [json.loads(line).get("call_failure") is None for line in out.read_text().splitlines()] == [True, False]
    stand_in.replies = [Reply(text=GOOD)]
    assert served_score(url, data, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(row["id"], row["evaluation"]["score"]) for row in rows] == [("item-0", 40), ("item-1", 40)]
    assert stand_in.hits == 1 + 4 + 1  # item-0 once; item-1 failed (a call and its 3 retries), then once more


def test_annotate_on_an_empty_source_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    ensemble = {
        "name": "one",
        "annotators": [
            {"name": "a", "backend": {"kind": "openai", "model": "a", "endpoints": ["http://127.0.0.1:9/v1"]}}
        ],
        "supervisor": {
            "name": "s",
            "backend": {"kind": "openai", "model": "s", "endpoints": ["http://127.0.0.1:9/v1"]},
        },
    }
    sources = {"sources": [{"name": "mine", "format": "jsonl", "path": str(empty), "task": "summeval",
                            "fields": {"inputs": {"Article": "article"}, "output": "summary"}}]}  # fmt: skip
    (tmp_path / "ensemble.yaml").write_text(yaml.safe_dump(ensemble))
    (tmp_path / "sources.yaml").write_text(yaml.safe_dump(sources))
    code = cli_main(["annotate", "--ensemble", str(tmp_path / "ensemble.yaml"),
                     "--sources", str(tmp_path / "sources.yaml"), "--out", str(tmp_path / "out")])  # fmt: skip
    line = one_line(capsys)
    assert code == 2 and f"{empty}: source 'mine' has no rows to annotate" in line, line


def test_an_empty_reply_is_a_failed_call_and_is_not_cached(serve: Serve, tmp_path: Path) -> None:
    from spanjudge.inference.backends import BackendSpec, CachedBackend, LLMCache, make_backend
    from spanjudge.inference.backends.base import CallFailure, ChatRequest, Completion

    stand_in, url = serve([Reply(text=""), Reply(text="A real answer.")])
    spec = BackendSpec(kind="openai", model="m", endpoints=(url,), backoff_s=0.01, retries=0)
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        backend = CachedBackend(make_backend(spec), cache)
        request = ChatRequest.user("Say something.")
        [first] = backend.generate([request])
        assert isinstance(first, CallFailure) and "empty content" in first.reason
        assert len(cache) == 0
        [second] = backend.generate([request])  # asked again, not served from the cache
        assert isinstance(second, Completion) and second.text == "A real answer." and stand_in.hits == 2
        backend.close()
