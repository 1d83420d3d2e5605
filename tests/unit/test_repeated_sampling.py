"""Repeated sampling (issue #15, item 4): `meta-eval --samples N` judges each item N times with
seeds derived from k, stores every sample apart (sample 0 = today's judgment, its store
untouched), and aggregates as the papers did: the mean on human-correlation sets and DHP, the
mode (global) and the mean (local) on dual. A stand-in model server on 127.0.0.1 answers by the
request's seed, so each sample rates differently and every call is counted."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from support.standin import Reply

from spanjudge.app.cli import main as cli_main
from spanjudge.core.catalog import load_catalog
from spanjudge.eval.correlation.runner import run_meta_eval
from spanjudge.eval.judging.baselines import MetricJudge
from spanjudge.eval.judging.judges import make_judge
from spanjudge.eval.judging.sampling import mode_class, sample_seed
from spanjudge.eval.judging.suite import load_suite
from spanjudge.eval.perturb.benchmark import BenchItem, Benchmark, write_benchmark
from spanjudge.eval.perturb.judgments import score_benchmark
from spanjudge.eval.perturb.kinds.dual import analyze_dual
from spanjudge.eval.perturb.statistics import EqualWidthBinner

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
LABEL = {1: "Unacceptable", 3: "Fair", 5: "Excellent"}


def reply(rating: int) -> Reply:
    return Reply(text=f"No Error\n\nOverall score: {LABEL[rating]}")


def ensemble(tmp_path: Path, url: str) -> Path:
    config: dict[str, Any] = {
        "name": "stand-in",
        "annotators": [{"name": "m", "backend": {"kind": "openai", "model": "m", "endpoints": [url], "retries": 0}}],
        "supervisor": {"name": "sup", "backend": {"kind": "openai", "model": "sup", "endpoints": ["http://x/v1"]}},
        "parse_retry": {"attempts": 1},
    }
    path = tmp_path / "ensemble.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def stores(out: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((out / "judgments").glob("*.jsonl"))}


def test_suite_samples_are_averaged_stored_apart_and_never_asked_twice(
    tmp_path: Path, shared_data: Path, serve
) -> None:
    # sample 0 (the ensemble's seed 0) rates Excellent, sample 1 Fair, sample 2 Unacceptable
    by_seed = {0: 5, sample_seed(1): 3, sample_seed(2): 1}
    server, url = serve(lambda body: reply(by_seed[body["seed"]]))
    suite = load_suite(SUITE)
    suite = suite.model_copy(update={"bootstrap": suite.bootstrap.model_copy(update={"resamples": 0})})
    out = tmp_path / "out"

    def run(samples: int) -> dict[str, Any]:
        judge = make_judge(f"prompted:{ensemble(tmp_path, url)}", out=out)
        try:
            result = run_meta_eval(suite, SUITE, [judge], out, data_root=shared_data, max_items=4,
                                   datasets=["qags_xsum"], samples=samples)  # fmt: skip
        finally:
            judge.close()
        return {"scores": result.scatter[(judge.name, "qags_xsum", "factual consistency")].judge, "result": result}

    today = run(1)
    assert today["scores"] == [100.0] * 4 and server.hits == 4
    [(first_store, first_rows)] = stores(out).items()

    three = run(3)
    assert server.hits == 4 + 2 * 4  # samples 1 and 2 only: sample 0 is already stored
    assert three["scores"] == [50.0] * 4  # (100 + 50 + 0) / 3
    after = stores(out)
    assert len(after) == 3 and after[first_store] == first_rows  # sample 0's store is today's, untouched
    assert sorted({json.loads(line)["score"] for rows in after.values() for line in rows.splitlines()}) == [0, 50, 100]
    assert three["result"].datasets["qags_xsum"]["samples"] == 3

    again = run(3)
    assert server.hits == 12 and again["scores"] == [50.0] * 4  # a re-run is free


def test_a_judge_that_cannot_sample_is_used_once_and_says_so(tmp_path: Path, shared_data: Path) -> None:
    suite = load_suite(SUITE)
    suite = suite.model_copy(update={"bootstrap": suite.bootstrap.model_copy(update={"resamples": 0})})
    result = run_meta_eval(suite, SUITE, [MetricJudge("rouge1")], tmp_path, data_root=shared_data, max_items=4,
                           datasets=["qags_xsum"], samples=5)  # fmt: skip
    assert len(stores(tmp_path)) == 1
    assert result.warnings == ["metric:rouge1 decodes deterministically: --samples 5 uses its one judgment per item"]


def _dual_benchmark() -> Benchmark:
    """Two chains of 0 and 1 injected errors; gold 5 for the clean text, 3 for the worse one."""
    task = load_catalog().task("summeval")
    items = [
        BenchItem(
            f"{chain}-{errors}",
            chain,
            None if errors == 0 else "dual.step",
            ("coherence",),
            {"Article": f"Article {chain}."},
            f"{text} of chain {chain}.",
            meta={"chain": chain, "errors": errors, "gold": gold},
        )
        for chain in ("a", "b")
        for errors, gold, text in ((0, 5, "CLEANTEXT"), (1, 3, "WORSETEXT"))
    ]
    steps = {"dual.step": {"name": "step"}}
    return Benchmark("dual", "dual-tiny", "summeval", task, items, steps, 0, info={"scale": [1, 2, 3, 4, 5]})


def _dual_server(serve):  # type: ignore[no-untyped-def]
    # clean text: 5, 5, 1 (mode 5, mean 66.7 -> class 4); worse: 3, 3, 1 (mode 3, mean 33.3 -> class 2)
    ratings = {"CLEANTEXT": (5, 5, 1), "WORSETEXT": (3, 3, 1)}
    samples = {0: 0, sample_seed(1): 1, sample_seed(2): 2}

    def pick(body: dict[str, Any]) -> Reply:
        text = json.dumps(body)
        marker = "CLEANTEXT" if "CLEANTEXT" in text else "WORSETEXT"
        return reply(ratings[marker][samples[body["seed"]]])

    return serve(pick)


def test_dual_takes_the_mode_for_global_and_the_mean_for_local(tmp_path: Path, serve) -> None:
    server, url = _dual_server(serve)
    benchmark = _dual_benchmark()
    judge = make_judge(f"prompted:{ensemble(tmp_path, url)}", out=tmp_path)
    try:
        scored = score_benchmark(benchmark, judge, tmp_path, samples=3)
        assert server.hits == 12 and len(scored.samples) == 3 and scored.missing == 0
        assert scored.scores[("coherence", "a-0")].score == (100 + 100 + 0) / 3  # local: the mean
        modal = analyze_dual(benchmark, scored.scores, samples=scored.samples)["aspects"]["coherence"]
        # global: the mode of the binned ratings hits gold exactly; binning the mean would not
        assert modal["kappa"] == 1.0 and modal["pair_accuracy"] == 1.0
        assert analyze_dual(benchmark, scored.scores)["aspects"]["coherence"]["kappa"] < 1.0
        assert score_benchmark(benchmark, judge, tmp_path, samples=3).scores == scored.scores
        assert server.hits == 12  # re-scoring is free
    finally:
        judge.close()


def test_meta_eval_samples_option_on_a_benchmark(tmp_path: Path, serve) -> None:
    server, url = _dual_server(serve)
    folder = tmp_path / "bench"
    write_benchmark(_dual_benchmark(), folder)
    args = ["meta-eval", "--benchmark", str(folder), "--judge", f"prompted:{ensemble(tmp_path, url)}",
            "--samples", "3", "--no-plots", "--out", str(tmp_path / "report")]  # fmt: skip
    assert cli_main(args) == 0
    [results] = list((tmp_path / "report").glob("*/results.json"))
    data = json.loads(results.read_text())
    assert data["samples"]["n"] == 3 and "mode" in data["samples"]["aggregation"]
    assert data["metrics"]["aspects"]["coherence"]["kappa"] == 1.0
    assert cli_main(args) == 0 and server.hits == 12


def test_mode_ties_go_to_the_class_nearest_the_mean() -> None:
    binner = EqualWidthBinner(0.0, 100.0, (1, 2, 3, 4, 5))
    assert mode_class([100.0, 100.0, 0.0], binner) == 5
    assert mode_class([0.0, 100.0, 50.0], binner) == 3  # all tied: the middle one
    assert mode_class([0.0, 0.0, 100.0, 100.0, 70.0], binner) == 5  # tie 1 vs 5, mean class 3.4 -> 5
    assert mode_class([None, None], binner) is None
