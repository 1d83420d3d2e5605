"""The ensemble study's reading (`eval.spans.teachers`): the 'No Error' rate and its interval, whether a merge
beats its best member column by column, and dev's choice, on hand-made rows and documents."""

from __future__ import annotations

from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.eval.spans.teachers import beats_best_member, candidates, dev_choice, no_error_interval, with_derived


def _doc(n: int, gold: bool) -> SpanDocument:
    return SpanDocument(
        id=f"quintd1/wikidata/llama2/{n}", dataset="t", task_id="quintd1", inputs={"Data": "x"}, output="abc def",
        gold=(GoldSpan(0, 3, "Incorrect"),) if gold else (), input_id=f"wikidata/{n}",
    )  # fmt: skip


def test_no_error_rate_counts_scored_outputs_only() -> None:
    docs = [_doc(0, True), _doc(1, False), _doc(2, False), _doc(3, True)]
    spans = {docs[0].id: [], docs[1].id: [], docs[2].id: [(0, 3)]}  # doc 3 unscored
    found = no_error_interval(docs, spans, resamples=200, seed=0)
    assert found["no_error_rate"] == 2 / 3 and found["human_no_error_rate"] == 2 / 3
    assert 0 <= found["no_error_rate_low"] <= 2 / 3 <= found["no_error_rate_high"] <= 1
    assert no_error_interval(docs, {}, 10, 0)["no_error_rate"] is None


def test_a_merge_must_beat_its_best_member_on_every_column() -> None:
    def row(f1: float, r: float, gamma: float, rate: float) -> dict:
        return with_derived({"overlap_f1": f1, "token_f1": f1, "count_pearson": r, "token_pearson": r,
                             "gamma": gamma, "no_error_rate": rate, "human_no_error_rate": 0.25})  # fmt: skip

    a, b = row(0.5, 0.4, 0.4, 0.1), row(0.4, 0.5, 0.3, 0.2)
    verdict = beats_best_member(row(0.55, 0.45, 0.45, 0.24), [a, b])
    assert [verdict[c]["beats"] for c in ("overlap_f1", "count_pearson", "gamma", "no_error_gap")] == [
        True, False, True, True,
    ]  # fmt: skip
    assert verdict["all"] is False and verdict["count_pearson"]["best_member"] == 0.5
    assert beats_best_member(row(0.6, 0.6, 0.5, 0.25), [a, b])["all"] is True
    assert dev_choice({"a": a, "b": b, "m": row(0.6, 0.6, 0.5, 0.25)}) == "m"


def test_the_candidates_are_every_member_and_every_vote() -> None:
    names = [t.name for t in candidates()]
    assert names[:4] == ["gpt-4", "gpt-4-temperature-1", "gpt-3.5", "llama3"]
    assert "vote2-union(gpt4-twice)" in names and "vote4-shortest(all)" in names
    assert len(names) == 4 + 3 * (4 + 3 + 2 + 2) and len(set(names)) == len(names)


def test_the_committed_tables_are_what_their_committed_rows_give() -> None:
    """bench/results/ensemble_quintd.md is the committed JSON's report, dev's choice is the best objective on dev,
    and the test split was read for the members and dev's choice alone."""
    import json

    from support.scripts import REPO, load_script

    bench = load_script("bench/ensemble_quintd.py")
    saved = json.loads((REPO / "bench/results/ensemble_quintd.json").read_text())
    assert bench.markdown(saved) == (REPO / "bench/results/ensemble_quintd.md").read_text()
    pooled = {n: next(r for r in rows if r["domain"] == "pooled") for n, rows in saved["splits"]["dev"]["rows"].items()}
    assert saved["choice"]["teacher"] == dev_choice(pooled)
    members = ["gpt-4", "gpt-4-temperature-1", "gpt-3.5", "llama3"]
    assert list(saved["splits"]["test"]["rows"]) == [*members, saved["choice"]["teacher"]]
