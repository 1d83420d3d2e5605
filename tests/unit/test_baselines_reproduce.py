"""Reference-based baselines run wherever the published tables have them (issue #15, item 5):
QAGS scores summaries against the article, SummEval against its 11 references (mean), the
perturbation benchmarks against the original text; ROUGE-Lsum and stemming reproduce the
thesis's copied ROUGE rows on the real data within 0.02 (Tables 5.1 and 5.2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.eval.correlation.reference import load_reference_tables
from spanjudge.eval.correlation.runner import reference_path, run_meta_eval
from spanjudge.eval.judging.baselines import MetricJudge, metric_scorer, parse_metric, sentence_lines
from spanjudge.eval.judging.judges import make_judge
from spanjudge.eval.judging.suite import load_suite
from spanjudge.eval.perturb.benchmark import BenchItem, Benchmark
from spanjudge.eval.perturb.judgments import score_benchmark

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
TOLERANCE = 0.02


def _measure(dataset: str, shared_data: Path, tmp_path: Path) -> dict[tuple[str, str, str], float | None]:
    """The suite's baseline judges on one whole set, as `meta-eval` computes them (no bootstrap)."""
    suite = load_suite(SUITE)
    suite = suite.model_copy(update={"bootstrap": suite.bootstrap.model_copy(update={"resamples": 0})})
    judges = [MetricJudge(spec.removeprefix("metric:")) for spec in suite.dataset(dataset).baselines.values()]
    result = run_meta_eval(suite, SUITE, judges, tmp_path, data_root=shared_data, datasets=[dataset])
    return {(c.judge, c.aspect, c.coefficient): c.value for c in result.cells}


def _compare(dataset: str, rows: list[str], measured: dict[tuple[str, str, str], float | None]) -> list[str]:
    """Every published cell of `rows` on `dataset` beside our value; returns the misses."""
    suite = load_suite(SUITE)
    tables = load_reference_tables(reference_path(suite, SUITE))
    spec = suite.dataset(dataset)
    misses, compared = [], 0
    for row in rows:
        judge = spec.baselines[row]
        for aspect in [a.name for a in spec.aspects]:
            for coefficient in spec.coefficients:
                published = tables.same_metric(judge, dataset, aspect, coefficient)
                assert published is not None and published.row == row, (row, aspect, coefficient)
                ours = measured[(judge, aspect, coefficient)]
                compared += 1
                if ours is None or abs(ours - published.value) > TOLERANCE:
                    misses.append(f"{row} {aspect} {coefficient}: ours {ours}, published {published.value}")
    assert compared == len(rows) * len(spec.aspects) * len(spec.coefficients)
    return misses


def test_qags_cnn_rouge_rows_reproduce_table_5_1(shared_data: Path, tmp_path: Path) -> None:
    # ROUGE F1 against the article, stemmed, ROUGE-L summary-level; Pearson/Spearman/Kendall, all 235
    measured = _measure("qags_cnndm", shared_data, tmp_path)
    assert _compare("qags_cnndm", ["ROUGE-1", "ROUGE-2", "ROUGE-L"], measured) == []


def test_qags_xsum_rouge_rows_reproduce_table_5_1(shared_data: Path, tmp_path: Path) -> None:
    measured = _measure("qags_xsum", shared_data, tmp_path)
    assert _compare("qags_xsum", ["ROUGE-1", "ROUGE-2", "ROUGE-L"], measured) == []


def test_summeval_rouge1_row_reproduces_table_5_2(shared_data: Path, tmp_path: Path) -> None:
    # the mean over the 11 references, stemmed; per article, averaged (~15 s for the 17,600 pairs)
    suite = load_suite(SUITE)
    suite = suite.model_copy(update={"bootstrap": suite.bootstrap.model_copy(update={"resamples": 0})})
    judge = MetricJudge(suite.dataset("summeval").baselines["ROUGE-1"].removeprefix("metric:"))
    result = run_meta_eval(suite, SUITE, [judge], tmp_path, data_root=shared_data, datasets=["summeval"])
    measured = {(c.judge, c.aspect, c.coefficient): c.value for c in result.cells}
    assert _compare("summeval", ["ROUGE-1"], measured) == []


def test_rouge_variants_and_options() -> None:
    two_sentences = "the cat sat on the mat. the dog ran off."
    output = "the dog ran off. the cat sat on the mat."
    # rougeL is one LCS over the whole text; rougeLsum the union LCS per reference sentence
    assert metric_scorer("rougeL")(output, [two_sentences]) < metric_scorer("rougeLsum")(output, [two_sentences]) == 1
    assert sentence_lines('He said "no." Then left.\nNext') == 'He said "no."\nThen left.\nNext'
    # stemming: "cats"/"cat", "running"/"run"
    assert metric_scorer("rouge1")("cats running", ["cat run"]) == 0.0
    assert metric_scorer("rouge1+stem")("cats running", ["cat run"]) == 1.0
    # several references: the best by default, the mean with +refs=mean
    assert metric_scorer("rouge1")("a b", ["a b", "c d"]) == 1.0
    assert metric_scorer("rouge1+refs=mean")("a b", ["a b", "c d"]) == 0.5
    assert parse_metric("rougeLsum-recall+stem").part == "recall"
    assert MetricJudge("rouge1+stem").name == "metric:rouge1+stem"


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("rouge1+stemm", "unknown option '+stemm'"),
        ("rouge1+refs=median", "options are +stem and +refs=max|mean"),
        ("bleu+stem", "+stem applies to ROUGE only"),
        ("rougeLsum-f1", "unknown metric 'rougeLsum-f1'"),
        ("bertscore+stem", "needs model weights"),
    ],
)
def test_a_wrong_metric_spec_says_what_is_wrong(name: str, message: str, tmp_path: Path) -> None:
    with pytest.raises(InputError, match=message.replace("+", r"\+").replace("|", r"\|")):
        make_judge(f"metric:{name}", out=tmp_path)


def test_benchmark_metrics_use_the_original_text_as_reference(tmp_path: Path) -> None:
    task = load_catalog().task("summeval")
    original = "The council approved the new budget on Monday after a long debate."
    perturbed = "The council rejected a budget on Friday."
    items = [
        BenchItem("d-0", "d-0", None, ("coherence",), {"Article": "A long article."}, original),
        BenchItem("d-0:x", "d-0", "x", ("coherence",), {"Article": "A long article."}, perturbed),
    ]
    benchmark = Benchmark("dhp", "tiny", "summeval", task, items, {"x": {"name": "x"}}, 0)
    scored = score_benchmark(benchmark, MetricJudge("rouge1"), tmp_path)
    scores = {item_id: j.score for (_, item_id), j in scored.scores.items()}
    # before, benchmark items carried no references and every metric judgment was "no reference"
    assert scores["d-0"] == 1.0 and scores["d-0:x"] is not None and 0 < scores["d-0:x"] < 1
    assert scored.missing == 0
