"""Self-consistency (issue #29, item 1): N sampled replies of one judge merged into one evaluation,
spans by majority overlap and scores by the thesis's Algorithm 1 (the code the ensemble uses).
The judge is the scripted stand-in server of tests/support/standin.py behind the real `openai` engine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.standin import Reply, StandIn

from spanjudge.app.cli import main as cli_main
from spanjudge.data_gen.aggregate import drop_outliers as ensemble_rule
from spanjudge.inference.consensus import consensus, drop_outliers
from spanjudge.inference.contract import ErrorAnnotation, Evaluation
from spanjudge.inference.judge import Judge

Serve = Callable[..., tuple[StandIn, str]]
OUTPUT = "A cat sat on a hat in Paris yesterday."


def _error(start: int, end: int, severity: int = 3) -> ErrorAnnotation:
    return ErrorAnnotation(location=OUTPUT[start:end], explanation="x", severity=severity, start=start, end=end)


def test_spans_most_replies_mark_are_kept_with_their_share() -> None:
    hat, paris = (OUTPUT.index("a hat"), OUTPUT.index("a hat") + 5), (OUTPUT.index("Paris"), OUTPUT.index("Paris") + 5)
    replies = [
        Evaluation(errors=[_error(*hat, 4), _error(*paris, 2)], score=70),
        Evaluation(errors=[_error(hat[0] + 2, hat[1], 2)], score=72),  # "hat": overlaps "a hat"
        Evaluation(errors=[_error(*hat, 5)], score=71),
        None,  # a reply that did not parse: it marked nothing
    ]
    merged = consensus(replies, samples=4)
    assert merged.parsed == 3 and merged.samples == 4
    [kept] = merged.errors  # "Paris": 1 reply of 4, under half
    assert (kept.start, kept.end, kept.location) == (*hat, "a hat")  # the span the others overlap most
    assert kept.confidence == 0.75 and kept.severity == 4  # median of 4, 2, 5
    assert merged.score == pytest.approx(71.0)


def test_scores_are_aggregated_by_algorithm_1_shared_with_the_ensemble() -> None:
    assert drop_outliers is ensemble_rule  # one implementation of the thesis's rule
    replies = [Evaluation(errors=[], score=s) for s in (70, 70, 72, 71, 10)]
    merged = consensus(replies, samples=5)
    assert drop_outliers([70, 70, 72, 71, 10]) == (True, True, True, True, False)
    assert merged.score == pytest.approx(70.75) and merged.errors == []
    assert consensus([None, None], samples=2).score is None


def _body_text(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"]


def _sampled(seed_replies: dict[int, str], greedy: str) -> Callable[[dict[str, Any]], Reply]:
    def reply(body: dict[str, Any]) -> Reply:
        if body.get("temperature", 0) == 0:
            return Reply(text=greedy)
        return Reply(text=seed_replies[int(body["seed"])])

    return reply


BLOCK = (
    "Error 1:\nLocation: {location}\nExplanation: Not in the article.\nSeverity: {severity}\n\nOverall score: {score}"
)


def test_the_judge_merges_its_sampled_replies(serve: Serve) -> None:
    seeds = {
        1: BLOCK.format(location="on a hat", severity=3, score=40),
        2: BLOCK.format(location="a hat", severity=4, score=50),
        3: "No Error\n\nOverall score: 90",
    }
    stand_in, url = serve(_sampled(seeds, BLOCK.format(location="on a hat", severity=3, score=40)))
    judge = Judge.from_pretrained("judge", engine="openai", base_url=url, samples=3, retries=0)
    try:
        [result] = judge.score([judge.request("qags_xsum", "factual consistency", {"Article": "A mat."}, OUTPUT)])
    finally:
        judge.close()
    assert result.score == 40 and result.consensus is not None  # the written evaluation stays as it was
    merged = result.consensus
    assert merged.samples == 3 and merged.parsed == 3
    [kept] = merged.errors
    assert kept.confidence == pytest.approx(2 / 3) and kept.location == "on a hat"
    assert merged.score == pytest.approx(45.0)  # 90 is an outlier of 40 and 50 under Algorithm 1: dropped
    temperatures = sorted(body.get("temperature", 0) for body in stand_in.bodies)
    assert temperatures == [0, 0.7, 0.7, 0.7] and {b.get("seed") for b in stand_in.bodies if b.get("seed")} == {1, 2, 3}


def test_each_outputs_consensus_is_settled_as_soon_as_its_replies_are_in(serve: Serve) -> None:
    """A killed run keeps every output whose sampled replies were all in: each is handed to `on_result` then,
    not after the last output's replies."""
    stand_in, url = serve(lambda body: Reply(text=BLOCK.format(location="a hat", severity=3, score=40)))
    judge = Judge.from_pretrained("judge", engine="openai", base_url=url, samples=2, retries=0, concurrency=1)
    settled: list[int] = []
    try:
        requests = [
            judge.request("qags_xsum", "factual consistency", {"Article": f"A mat {n}."}, OUTPUT) for n in range(3)
        ]
        results = judge.score(requests, on_result=lambda index, result: settled.append(stand_in.hits))
    finally:
        judge.close()
    assert all(r.consensus is not None and r.consensus.errors for r in results)
    assert settled == [3 + 2, 3 + 4, 3 + 6]  # 3 greedy replies, then 2 samples per output, one output at a time


def test_a_sample_that_cannot_reach_the_model_leaves_the_row_to_a_rerun(serve: Serve) -> None:
    def reply(body: dict[str, Any]) -> Reply:
        return (
            Reply(text=BLOCK.format(location="a hat", severity=3, score=40))
            if body.get("seed") != 2
            else Reply(status=400)
        )

    _, url = serve(reply)
    judge = Judge.from_pretrained("judge", engine="openai", base_url=url, samples=2, retries=0)
    try:
        [result] = judge.score([judge.request("qags_xsum", "factual consistency", {"Article": "A mat."}, OUTPUT)])
    finally:
        judge.close()
    assert result.score is None and result.call_failure and result.consensus is None


def test_score_samples_writes_the_consensus_beside_the_written_evaluation(serve: Serve, tmp_path: Path) -> None:
    seeds = {k: BLOCK.format(location="a hat", severity=3, score=40 + k) for k in (1, 2)}
    _, url = serve(_sampled(seeds, BLOCK.format(location="a hat", severity=3, score=40)))
    data, out = tmp_path / "items.jsonl", tmp_path / "scores.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "A mat.", "summary": OUTPUT}) + "\n")
    code = cli_main(["score", "--model", "judge", "--engine", "openai", "--base-url", url, "--data", str(data),
                     "--out", str(out), "--task", "qags_xsum", "--aspect", "factual consistency", "--input",
                     "Article=article", "--output-field", "summary", "--samples", "2", "--retries", "0"])  # fmt: skip
    assert code == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["evaluation"]["score"] == 40 and row["decoding"]["samples"] == 2
    assert row["consensus"]["score"] == pytest.approx(41.5) and row["consensus"]["errors"][0]["confidence"] == 1.0
