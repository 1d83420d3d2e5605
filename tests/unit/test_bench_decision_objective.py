"""bench/decision_objective.py: the decision fit's objective pooled or per domain, held out on dev folds."""

from __future__ import annotations

import json
from types import ModuleType
from typing import Any

import pytest
from support.scripts import REPO, load_script

from spanjudge.eval.spans.decision_fit import objective
from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.inference.decisions import DecisionRule


def _bench() -> ModuleType:
    return load_script("bench/decision_objective.py")


def _doc(domain: str, table: int, erroneous: bool) -> SpanDocument:
    gold = (GoldSpan(13, 14, "error"),) if erroneous else ()
    doc_id = f"{domain}/sys/{table}"
    return SpanDocument(doc_id, "toy", "quintd1", {"Data": f"{domain} table {table}"}, "The team won 3 games in 2020.",
                        gold, input_id=f"{domain}/{table}")  # fmt: skip


# A "clean-looking" reading: P(no error) 0.45 and one confident span; an "erroneous-looking" one: P(no error)
# 0.05 and the right span, 13-14. Where the humans agree with the looks (the clean-looking outputs are clean and
# their span 4-8 is wrong), "No Error" at τ₀ ≤ 0.45 makes the reading perfect; where they do not (every output
# is erroneous and the clean-looking ones found it too), that τ₀ throws right spans away.
LOOKS_WRONG = {"spans": [[13, 14]], "span_written": [0.7], "p_no_error": 0.05, "errors": 1, "expected_errors": 1.0}


def _looks_clean(span: list[int]) -> dict[str, Any]:
    return {"spans": [span], "span_written": [0.8], "p_no_error": 0.45, "errors": 1, "expected_errors": 0.6}


def _domain(name: str, humans_agree: bool, tables: range) -> tuple[list[SpanDocument], dict[str, Any]]:
    """Tables t with t % 4 < 2 look clean; the humans mark 13-14 in the others, and in these unless they agree."""
    docs = [_doc(name, t, erroneous=not (humans_agree and t % 4 < 2)) for t in tables]
    looks_clean = _looks_clean([4, 8] if humans_agree else [13, 14])
    return docs, {d.id: looks_clean if t % 4 < 2 else LOOKS_WRONG for d, t in zip(docs, tables, strict=True)}


def test_per_domain_fits_a_threshold_where_it_helps_and_none_where_it_costs() -> None:
    bench = _bench()
    agree, agree_rows = _domain("a", True, range(8))
    disagree, disagree_rows = _domain("b", False, range(8))
    docs, rows = agree + disagree, agree_rows | disagree_rows
    per_domain = bench.fit("per_domain", docs, rows)
    assert per_domain["a"].no_error_threshold is not None and 0.05 < per_domain["a"].no_error_threshold <= 0.45
    assert per_domain["b"].no_error_threshold is None and per_domain["b"].min_confidence is None
    assert bench.fit("written", docs, rows) == {"a": DecisionRule(), "b": DecisionRule()}
    for variant in ("pooled", "domain_mean"):
        rules = bench.fit(variant, docs, rows)
        assert rules["a"] == rules["b"]  # one pair for every domain
    written = {d.id: [(int(s), int(e)) for s, e in rows[d.id]["spans"]] for d in docs}
    assert bench.domain_mean_objective(docs, written) == pytest.approx(
        (objective(agree, written) + objective(disagree, written)) / 2
    )


def test_each_fold_is_decided_by_thresholds_fitted_on_the_other() -> None:
    bench = _bench()
    # even tables: the humans agree with the looks (τ₀ helps); odd tables: they do not (τ₀ costs)
    helps, helps_rows = _domain("a", True, range(0, 16, 2))
    costs, costs_rows = _domain("a", False, range(1, 16, 2))
    rows = helps_rows | costs_rows
    spans = bench.cross_fitted("pooled", [helps, costs], rows)
    clean_looking = [d for d in helps + costs if rows[d.id]["p_no_error"] == 0.45]
    # the odd tables' clean-looking outputs are read "No Error": their thresholds came from the even tables
    assert [spans[d.id] for d in clean_looking if d in costs] == [[]] * 4
    # the even tables' keep their written span: fitted on the odd tables, τ₀ stays unset
    assert [spans[d.id] for d in clean_looking if d in helps] == [[(4, 8)]] * 4
    assert bench.no_error(helps + costs, spans) == {"a": 4}


def test_the_committed_results_are_what_the_committed_dev_judgments_give() -> None:
    bench = _bench()
    committed = json.loads(bench.RESULTS.with_suffix(".json").read_text())
    runs = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]
    kept = committed["runs"][-1]  # one run recomputed: each takes seconds
    found = bench.run_row(kept["label"], runs[kept["label"]]["settings"])
    assert found is not None and found["humans_no_error"] == kept["humans_no_error"]
    for variant in bench.VARIANTS:
        assert found[variant]["no_error"] == kept[variant]["no_error"]
        for measure in ("pooled", "domain_mean"):
            assert found[variant][measure] == pytest.approx(kept[variant][measure], abs=1e-9)
    assert bench.markdown(committed["runs"], committed["recipes"]) == bench.RESULTS.with_suffix(".md").read_text()
