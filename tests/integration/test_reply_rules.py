"""One rule for replies on every path: an empty reply is a failed call, a reply longer than max_tokens allows is refused
and not cached, and the lm-eval and inspect integrations leave a sample they cannot judge unscored.

The scripted stand-in of tests/support/standin.py on 127.0.0.1."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from support.faults import ASPECT, GOOD, TASK, Serve, one_item_score_args
from support.standin import Reply

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.inference.backends import BackendSpec, make_backend
from spanjudge.inference.backends.base import CallFailure, ChatRequest
from spanjudge.inference.judge import Judge


def test_an_empty_reply_is_a_failed_call_for_the_judge_too(
    serve: Serve, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from spanjudge.inference.backends import server

    monkeypatch.setattr(server, "backoff_delay", lambda backoff_s, retry: 0.0)  # its retries, without the waits
    stand_in, url = serve([Reply(text="")])
    args, out = one_item_score_args(tmp_path, "judge", "--engine", "openai", "--base-url", url)
    assert cli_main(args) == 1
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert "empty content" in row["call_failure"]  # a server fault, as annotate counts it: asked again
    stand_in.replies = [Reply(text=GOOD)]
    assert cli_main(args) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["evaluation"]["score"] == 40


def test_a_reply_longer_than_max_tokens_allows_is_refused_and_not_cached(serve: Serve, tmp_path: Path) -> None:
    from spanjudge.inference.backends import CachedBackend, LLMCache
    from spanjudge.inference.backends.base import SamplingParams

    _, url = serve([Reply(text="x" * 10_000_000)])  # a server that ignores max_tokens
    spec = BackendSpec(kind="openai", model="m", endpoints=(url,), retries=0)
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        backend = CachedBackend(make_backend(spec), cache)
        [result] = backend.generate([ChatRequest.user("Say something.", SamplingParams(max_tokens=64))])
        assert isinstance(result, CallFailure) and "the server ignores max_tokens" in result.reason
        assert len(cache) == 0
        backend.close()


def test_lm_eval_and_inspect_leave_an_unjudgeable_sample_unscored(serve: Serve) -> None:
    import asyncio

    from spanjudge.integrations.inspect import spanjudge_scorer
    from spanjudge.integrations.lm_eval import JudgedResults

    _, url = serve([Reply(text=GOOD)])
    judge = Judge.from_pretrained("judge", engine="openai", base_url=url, retries=0)
    process = JudgedResults(judge, task=TASK, aspect=ASPECT, input_field="article")
    assert process({"article": "The cat sat."}, ["A cat sat."])["spanjudge_score"] == 40
    assert process({"article": ""}, ["A cat sat."]) == {"spanjudge_score": None, "spanjudge_errors": None}
    assert process({"article": "The cat sat."}, [None]) == {"spanjudge_score": None, "spanjudge_errors": None}
    with pytest.raises(InputError, match="unknown aspect 'nonsense'"):  # a mistake in the settings still stops it
        JudgedResults(Judge.from_pretrained("judge", engine="openai", base_url=url), task=TASK, aspect="nonsense",
                      input_field="article")({"article": "x"}, ["y"])  # fmt: skip
    score = spanjudge_scorer(judge, task=TASK, aspect=ASPECT)
    state = SimpleNamespace(sample_id=1, input_text="", output=SimpleNamespace(completion="A cat sat."))
    result = asyncio.run(score(state, SimpleNamespace(text="")))
    assert math.isnan(result.value) and result.explanation  # unscored: inspect's metrics skip it, never a 0
