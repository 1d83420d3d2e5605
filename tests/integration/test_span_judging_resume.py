"""Judging a span set survives a kill (nothing lost, nothing trusted twice): every finished
judgment is kept at once in `<name>.partial.jsonl`, a re-run asks only for the rest, a failed
call is never kept, and another judge's partial file is refused in one line. The judge is a
real `Judge` on engine "openai" talking to the scripted stand-in server on 127.0.0.1 (a failed
call on demand is what no real server shows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.standin import Reply

from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.eval.spans.judging import judge_span_documents, partial_path, predictions
from spanjudge.eval.spans.quintd import quintd_tables
from spanjudge.inference.judge import Judge

CLEAN = Reply(text="No Error\n\nOverall score: 90")


def _judge(url: str, name: str = "stand-in") -> Judge:
    return Judge.from_pretrained(name, engine="openai", base_url=url, retries=0)


def test_a_failed_call_is_asked_again_and_nothing_else(tmp_path: Path, shared_data: Path, serve) -> None:
    docs = quintd_tables("human", (80, 81), root=shared_data)
    assert len(docs) == 4
    path = tmp_path / "student.json"
    first, url = serve([CLEAN, Reply(status=400), CLEAN, CLEAN])
    with pytest.raises(SpanjudgeError, match="1 model calls failed"):
        judge_span_documents(_judge(url), docs, path)
    assert not path.exists() and first.hits == 4
    kept = [json.loads(line)["id"] for line in partial_path(path).read_text().splitlines()]
    # the failed call (the second sent: the judge sends in prompt order) is not kept, the other three are
    assert len(kept) == 3 and set(kept) < {d.id for d in docs}

    second, url = serve([CLEAN])
    advanced: list[int] = []
    judged = judge_span_documents(_judge(url), docs, path, advanced.append)
    assert second.hits == 1  # only the failed one is asked again
    assert sum(advanced) == 4  # progress counts what was already done
    assert predictions(judged) == {d.id: [] for d in docs}
    assert judged["wall_s"] >= 0 and judged["retries"] == 0
    assert json.loads(path.read_text()) == judged and not partial_path(path).exists()
    assert judge_span_documents(None, docs, path) == judged  # the finished file is reused, no judge needed


def test_another_judges_partial_file_is_refused(tmp_path: Path, shared_data: Path, serve) -> None:
    docs = quintd_tables("human", (80, 81), root=shared_data)
    path = tmp_path / "student.json"
    _, url = serve([CLEAN, Reply(status=400)])
    with pytest.raises(SpanjudgeError):
        judge_span_documents(_judge(url, "first"), docs, path)
    stand_in, url = serve([CLEAN])
    with pytest.raises(InputError, match=r"student\.partial\.jsonl:1: judged by 'first', not 'second'"):
        judge_span_documents(_judge(url, "second"), docs, path)
    assert stand_in.hits == 0


def test_a_judge_asked_for_sampled_replies_keeps_their_consensus(tmp_path: Path, shared_data: Path, serve) -> None:
    from spanjudge.eval.spans.judging import consensus_predictions
    from spanjudge.inference.contract import ErrorAnnotation, Evaluation
    from spanjudge.inference.contract.render import render_judge

    (doc,) = quintd_tables("human", (80, 81), root=shared_data)[:1]
    quote = doc.output.split()[0]

    def marking(*quotes: str) -> Reply:
        errors = [ErrorAnnotation(location=q, explanation="not in the table", severity=2) for q in quotes]
        return Reply(text=render_judge(Evaluation(errors=errors, score=60)))

    # the greedy reply, then 3 sampled ones: two mark the quote, one marks nothing
    stand_in, url = serve([marking(), marking(quote), CLEAN, marking(quote)])
    judge = Judge.from_pretrained("stand-in", engine="openai", base_url=url, retries=0, samples=3)
    judged = judge_span_documents(judge, [doc], tmp_path / "consensus.json")
    assert stand_in.hits == 4
    start = doc.output.index(quote)
    assert predictions(judged) == {doc.id: []}  # the greedy reply's spans
    assert consensus_predictions(judged) == {doc.id: [(start, start + len(quote))]}
    assert judged["rows"][doc.id]["consensus"]["confidence"] == [pytest.approx(2 / 3)]
