"""The perturbation benchmarks as the papers define them (issue #15, item 3), built from the real
source data: 003 injects the MODE of the experts' ratings and its α is labelled for what it is;
000's expert weights are per perturbation and aspect (no uniform default that only shifts D);
001's binary TopicalChat aspects get a 1..2 gold scale. Judge scores are plain numbers given
to the analyses (no model is needed to check the arithmetic and the reports)."""

from __future__ import annotations

import math
import re
from itertools import combinations_with_replacement
from pathlib import Path

import pytest
from support.standin import Reply

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.perturb import statistics as metrics
from spanjudge.eval.perturb.build import Source
from spanjudge.eval.perturb.kind import build_benchmark
from spanjudge.eval.perturb.kinds.dhp import analyze_dhp, parse_weights
from spanjudge.eval.perturb.kinds.dual import analyze_dual
from spanjudge.eval.perturb.kinds.prompt import (
    ALPHA_003,
    ALPHA_MEAN,
    RATING_MEAN,
    RATING_MODE,
    analyze_prompt,
    build_prompt,
    expert_rating,
)
from spanjudge.eval.perturb.llm_perturb import LLMPerturber
from spanjudge.eval.perturb.report import render_markdown
from spanjudge.inference.backends import BackendSpec

SCALE = (1, 2, 3, 4, 5)


# -- 003: the injected rating ------------------------------------------------------------------


def test_expert_rating_is_the_mode_and_the_rounded_mean_is_flagged() -> None:
    flipped = []
    for triple in combinations_with_replacement(SCALE, 3):
        mean = sum(triple) / 3
        _, pr, rule, decided = expert_rating(mean, triple, SCALE)
        assert rule == RATING_MODE and decided and pr == metrics.perturbed_rating(list(triple), SCALE)
        _, by_mean, rule, decided = expert_rating(mean, (), SCALE)
        assert rule == RATING_MEAN
        if by_mean != pr:
            flipped.append(triple)
            assert not decided  # a mean that can mislead is never reported as decided
    # the rounded mean gives the opposite extreme for 5 of the 35 possible triples
    assert flipped == [(1, 2, 3), (1, 2, 4), (1, 3, 3), (2, 2, 4), (2, 2, 5)]
    # (1, 2, 3): all different, so the mode is the highest rating 3 > 5/2 -> PR = 1 (the mean 2 gives 5)
    assert expert_rating(2.0, (1, 2, 3), SCALE)[:2] == (3, 1)
    assert metrics.perturbed_ratings_for_mean(5.0, SCALE) == {1}  # (5, 5, 5) only


def test_build_prompt_injects_the_mode_where_ratings_are_known() -> None:
    task = load_catalog().task("summeval")
    known = Source("a", {"Article": "x"}, "A summary.", {"coherence": 2.0}, {"coherence": (1.0, 2.0, 3.0)})
    mean_only = Source("b", {"Article": "y"}, "A summary.", {"coherence": 2.0})
    collected = build_prompt(task, [known, mean_only], {"coherence": SCALE})
    injected = {i.group: i for i in collected.items if i.perturbation}
    assert injected["a"].meta["injected"] == 1 and injected["a"].meta["rule"] == RATING_MODE
    assert "as 1 on a scale from 1 to 5" in injected["a"].inputs["Human expert rating"]
    assert injected["b"].meta["injected"] == 5 and injected["b"].meta["rule"] == RATING_MEAN
    assert injected["b"].meta["pr_decided"] is False  # mean 2 also fits (1, 2, 3)


def test_prompt_report_labels_alpha_and_leaves_out_tables_it_does_not_match(shared_data: Path) -> None:
    benchmark = build_benchmark("prompt", "summeval", data_root=shared_data, n=12, seed=0)
    assert benchmark.info["rating_rule"]["rules"] == {RATING_MEAN: 12 * 4}
    assert "MODE of the experts' ratings" in benchmark.info["note"]
    # any stable score per text will do: its length
    scores = {(a, i.id): Judgment(float(len(i.output) % 100)) for i in benchmark.items for a in i.aspects}
    result = analyze_prompt(benchmark, scores)
    assert {r["alpha_statistic"] for r in result["aspects"].values()} == {ALPHA_MEAN}
    report = render_markdown(benchmark, "j", {"metrics": result, "spans": None, "missing": 0})
    assert "α (mean, judge) plain" in report and "a different statistic" in report
    assert "| alpha |" not in report  # 003 Table 1 is not printed beside it
    assert "| exact_match |" in report  # Table 3 (exact match) still is, labelled as published
    assert "only their means are in our data" in report

    # with each expert's rating, α is 003's: the experts' rows and the judge's
    for item in benchmark.items:
        if item.perturbation is None:
            item.meta["ratings"] = {a: [1.0, 2.0, 3.0] if len(item.output) % 2 else [4.0, 4.0, 5.0]
                                    for a in item.aspects}  # fmt: skip
    result = analyze_prompt(benchmark, scores)
    coherence = result["aspects"]["coherence"]
    assert coherence["alpha_statistic"] == ALPHA_003
    originals = {i.group: i for i in benchmark.items if i.perturbation is None}
    injected = [i for i in benchmark.items if i.perturbation and "coherence" in i.aspects]
    rows = [[originals[i.group].meta["ratings"]["coherence"][k] for i in injected] for k in range(3)]
    binner = metrics.EqualWidthBinner(0, 100, SCALE)
    judge = [float(binner(scores[("coherence", originals[i.group].id)].score)) for i in injected]
    assert coherence["alpha_plain"] == pytest.approx(metrics.alpha_ordinal([*rows, judge]))


# -- 000: expert weights per perturbation and aspect -------------------------------------------

DHP_SETS = ["dhp.char_deletion.minor", "dhp.reordering.minor"]


def _dhp(shared_data: Path):  # type: ignore[no-untyped-def]
    benchmark = build_benchmark("dhp", "summeval", data_root=shared_data, n=8, seed=0, perturbations=DHP_SETS,
                                aspects=["coherence", "fluency"])  # fmt: skip
    scores = {}
    for number, item in enumerate(benchmark.items):
        for aspect in item.aspects:
            # deleted characters hurt fluency only; reordering hurts both
            hit = item.perturbation == "dhp.reordering.minor" or (item.perturbation and aspect == "fluency")
            drop = (5 + number) * (2 if aspect == "fluency" else 1) if hit else 0
            scores[(aspect, item.id)] = Judgment(80.0 - drop)
    return benchmark, scores


def test_dhp_has_no_uniform_expert_weights(shared_data: Path) -> None:
    benchmark, scores = _dhp(shared_data)
    result = analyze_dhp(benchmark, scores)
    assert result["weights"] is None and set(result["summary"]) == {"D_avg", "D_min"}
    assert all("D_EW" not in s and s["D"] > 1 for s in result["sets"].values())
    report = render_markdown(benchmark, "j", {"metrics": result, "spans": None, "missing": 0})
    assert "| D (EW) |" not in report and "EW" not in report.split("\n| D_avg")[1]
    assert "no expert weights given" in report


def test_dhp_expert_weights_are_per_perturbation_and_aspect(shared_data: Path) -> None:
    benchmark, scores = _dhp(shared_data)
    weights = parse_weights(["dhp.char_deletion.minor:fluency=1", "dhp.reordering.minor:coherence=0.8",
                             "dhp.reordering.minor:fluency=0.2"])  # fmt: skip
    result = analyze_dhp(benchmark, scores, weights)
    for key, per_aspect in weights.items():
        s = result["sets"][key]
        ps = [s["aspects"][a]["p"] for a in ("coherence", "fluency")]
        w = [per_aspect.get(a, 0.0) for a in ("coherence", "fluency")]
        assert s["p_EW"] == pytest.approx(metrics.harmonic_p(ps, weights=w))
        assert s["D_EW"] == pytest.approx(metrics.discernment(s["p_EW"]))
    # each set its own weights: char deletion counts fluency only
    char = result["sets"]["dhp.char_deletion.minor"]
    assert char["p_EW"] == pytest.approx(char["aspects"]["fluency"]["p"])
    assert char["D_EW"] != pytest.approx(char["D"] - math.log(2) / math.log(20))  # not a uniform shift
    report = render_markdown(benchmark, "j", {"metrics": result, "spans": None, "missing": 0})
    assert "D (EW)" in report and "D_avg EW" in report

    with pytest.raises(InputError, match=r"none given for dhp\.reordering\.minor"):
        analyze_dhp(benchmark, scores, {"dhp.char_deletion.minor": {"fluency": 1.0}})
    with pytest.raises(InputError, match="sum to 1"):
        analyze_dhp(benchmark, scores, {k: {"fluency": 0.5} for k in DHP_SETS})
    with pytest.raises(InputError, match="PERTURBATION:ASPECT=NUMBER"):
        parse_weights(["fluency=0.5"])  # the old per-aspect form is refused, not misread


def test_dhp_weights_file(tmp_path: Path) -> None:
    path = tmp_path / "weights.yaml"
    path.write_text("dhp.typos.minor: {fluency: 0.6, coherence: 0.4}\n")
    assert parse_weights([str(path)]) == {"dhp.typos.minor": {"fluency": 0.6, "coherence": 0.4}}
    path.write_text("dhp.typos.minor: [0.5, 0.5]\n")
    with pytest.raises(InputError, match="must map each aspect to a number"):
        parse_weights([str(path)])


# -- 001: TopicalChat's binary aspects ---------------------------------------------------------


def _inject_one_error(body: dict) -> Reply:
    """A stand-in perturber: the text it was given, with one sentence added."""
    prompt = body["messages"][-1]["content"]
    match = re.search(r"Text:\n(`{3,})\n(.*?)\n\1", prompt, re.DOTALL)
    assert match, prompt[-300:]
    return Reply(text=match.group(2) + " Also, bananas are a kind of weather.")


def test_dual_topical_chat_binary_aspects_get_a_two_point_gold_scale(serve, shared_data: Path, tmp_path: Path) -> None:
    _, url = serve(_inject_one_error)
    spec = BackendSpec(kind="openai", model="stand-in", endpoints=(url,), backoff_s=0.01, retries=0)
    with LLMPerturber(spec, tmp_path / "frozen.jsonl") as llm:
        benchmark = build_benchmark("dual", "topical_chat", data_root=shared_data, n=2, seed=0, steps=2, llm=llm)
    by_aspect: dict[str, set[tuple[int, int]]] = {}
    for item in benchmark.items:
        by_aspect.setdefault(item.meta["aspect"], set()).add((item.meta["errors"], item.meta["gold"]))
    assert by_aspect["understandability"] == {(0, 2), (1, 1)}
    assert by_aspect["knowledge use"] == {(0, 2), (1, 1)}
    assert by_aspect["naturalness"] == {(0, 3), (1, 2), (2, 1)}
    assert benchmark.info["scales"]["understandability"] == [1, 2]
    assert "one error at most" in benchmark.info["note"]
    scores = {(a, i.id): Judgment(90.0 - 45 * i.meta["errors"]) for i in benchmark.items for a in i.aspects}
    result = analyze_dual(benchmark, scores)
    assert result["aspects"]["understandability"]["scale"] == [1, 2]
    assert result["aspects"]["understandability"]["kappa"] == pytest.approx(1.0)  # 90 -> 2, 45 -> 1 on 1..2
    assert result["aspects"]["naturalness"]["scale"] == [1, 2, 3]
    report = render_markdown(benchmark, "j", {"metrics": result, "spans": None, "missing": 0})
    assert "understandability: equal-width bins on [0, 100]: [0, 50)→1, [50, 100]→2" in report


def test_undefined_cells_of_a_benchmark_report_are_counted_with_their_reason(shared_data: Path) -> None:
    benchmark = build_benchmark("prompt", "summeval", data_root=shared_data, n=12, seed=0)
    # a judge that scored nothing: every α and exact match is undefined
    result = analyze_prompt(benchmark, {})
    report = render_markdown(benchmark, "j", {"metrics": result, "spans": None, "missing": 0})
    rows = [line for line in report.splitlines() if line.startswith("| ") and "–" in line]
    counted = sum(c.strip() == "–" for line in rows for c in line.strip("|").split("|"))
    assert counted > 0 and f"{counted} cells are – (undefined): α needs two scored items" in report
    scores = {(a, i.id): Judgment(float(len(i.output) % 100)) for i in benchmark.items for a in i.aspects}
    full = render_markdown(benchmark, "j", {"metrics": analyze_prompt(benchmark, scores), "spans": None, "missing": 0})
    assert "cells are – (undefined)" not in full  # nothing undefined, nothing said
