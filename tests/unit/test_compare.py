"""`spanjudge compare`: systems on the same items, with paired tests on the score and the error profile."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import ttest_rel

from spanjudge.app.cli import main
from spanjudge.core.errors import InputError
from spanjudge.eval.compare import compare_systems, markdown, permutation_p


def _row(item: str, score: float | None, severities: list[int]) -> dict[str, Any]:
    errors = [{"location": "x", "start": 0, "end": 1, "severity": s, "explanation": "e"} for s in severities]
    return {"id": item, "evaluation": {"errors": errors, "score": score}}


def _systems(n: int = 20) -> dict[str, list[dict[str, Any]]]:
    """B is better than A by about 10 points and has fewer major errors; C equals A up to noise."""
    rng = np.random.default_rng(3)
    base = rng.uniform(30, 70, n)
    a = [_row(f"i{k}", float(base[k]), [4, 5, 2]) for k in range(n)]
    b = [_row(f"i{k}", float(base[k] + 10 + rng.normal(0, 3)), [2]) for k in range(n)]
    c = [_row(f"i{k}", float(base[k] + rng.normal(0, 3)), [4, 5, 2]) for k in range(n)]
    return {"A": a, "B": b, "C": c}


def _pair(result: Any, measure: str, a: str, b: str) -> Any:
    return next(p for p in result.pairs if (p.measure, p.a, p.b) == (measure, a, b))


def test_a_clear_difference_names_the_better_system_and_noise_names_none() -> None:
    result = compare_systems(_systems(), resamples=2000)
    assert result.items == 20 and result.systems == ["A", "B", "C"]
    score = _pair(result, "score", "A", "B")
    assert score.winner == "B" and score.difference < 0 and score.high < 0 and score.p_permutation < 0.01
    major = _pair(result, "severity ≥ 4 errors per output", "A", "B")
    assert (major.mean_a, major.mean_b, major.winner) == (2.0, 0.0, "B")  # fewer major errors: B is better
    assert major.p_ttest is None  # every difference equal: no t statistic, never a made-up p
    noise = _pair(result, "score", "A", "C")
    assert noise.winner is None and noise.p_permutation > 0.05


def test_the_p_values_equal_their_definitions() -> None:
    systems = _systems(12)
    result = compare_systems(systems, resamples=500)
    pair = _pair(result, "score", "A", "C")
    a = np.array([r["evaluation"]["score"] for r in systems["A"]])
    c = np.array([r["evaluation"]["score"] for r in systems["C"]])
    assert pair.p_ttest == pytest.approx(ttest_rel(a, c).pvalue)  # comet-compare's t-test, the same call
    d = a - c  # the exact permutation test: every one of the 2^12 sign patterns
    flipped = [abs(np.dot(signs, d)) / len(d) for signs in itertools.product((1, -1), repeat=len(d))]
    assert pair.p_permutation == pytest.approx(np.mean([f >= abs(d.mean()) - 1e-12 for f in flipped]))
    assert permutation_p(np.array([1.0, 2.0, 3.0]), 100, np.random.default_rng(0)) == pytest.approx(2 / 8)


def test_only_items_every_system_scored_are_compared() -> None:
    systems = _systems(6)
    systems["A"][0]["evaluation"]["score"] = None  # unscored: left out of every system's comparison
    systems["B"] = [*systems["B"][1:], _row("other", 50.0, [])]
    result = compare_systems(systems, resamples=200)
    assert result.items == 5 and result.left_out == {"A": 1, "B": 1, "C": 1}
    with pytest.raises(InputError, match="two or more systems"):
        compare_systems({"A": systems["A"]})
    with pytest.raises(InputError, match="share 0 scored item"):
        compare_systems({"A": systems["A"], "X": [_row("z", 1.0, []), _row("y", 2.0, [])]})


def test_errors_that_name_a_category_are_compared_per_category() -> None:
    def row(item: str, categories: list[str | None]) -> dict[str, Any]:
        errors = [{"location": "x", "start": 0, "end": 1, "severity": 2, "explanation": "e", "category": c}
                  for c in categories]  # fmt: skip
        return {"id": item, "evaluation": {"errors": errors, "score": 50.0}}

    a = [row(f"i{k}", ["Incorrect", "Incorrect", "Misleading"]) for k in range(10)]
    b = [row(f"i{k}", ["Misleading", None]) for k in range(10)]  # an error without a category counts in no category
    result = compare_systems({"A": a, "B": b}, resamples=200)
    measures = list(dict.fromkeys(m.measure for m in result.means))
    assert measures[3:] == ["'Incorrect' errors per output", "'Misleading' errors per output"]
    incorrect = _pair(result, "'Incorrect' errors per output", "A", "B")
    assert (incorrect.mean_a, incorrect.mean_b, incorrect.winner) == (2.0, 0.0, "B")
    assert _pair(result, "'Misleading' errors per output", "A", "B").winner is None  # one each: no difference
    plain = compare_systems(_systems(6), resamples=50)  # spanjudge's own errors name no category: no such rows
    assert not [m for m in plain.means if m.measure.startswith("'")]


def test_the_command_prints_the_tables_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for name, rows in _systems().items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
        paths += ["--results", str(path)]
    out = tmp_path / "compare.json"
    assert main(["compare", *paths, "--out", str(out), "--resamples", "200"]) == 0
    printed = capsys.readouterr().out
    assert "| score | A | B |" in printed and "| B |" in printed
    written = json.loads(out.read_text())
    assert written["items"] == 20 and len(written["pairs"]) == 9  # 3 pairs x 3 measures
    assert out.with_suffix(".md").read_text().startswith("20 items scored by every system")
    assert out.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"
    assert main(["compare", "--results", paths[1], "--results", paths[3], "--name", "only-one"]) == 2
    assert "one name per results file" in capsys.readouterr().err
    assert main(["compare", *paths, "--out", str(tmp_path / "compare.md")]) == 2  # the table would overwrite it
    assert "the comparison is JSON" in capsys.readouterr().err


def test_on_summeval_the_comparison_follows_the_human_ratings(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two real SummEval systems as results files, each output scored by the experts' mean coherence
    (1-5 mapped to 0-100): M11 (mean 2.28) against M23 (4.16), and M0 (4.16) against M23, on the same
    100 articles. The clear gap is found with both tests; the tie is not called."""
    rows = [json.loads(line) for line in (shared_data / "meta_eval/summeval/summeval.jsonl").read_text().splitlines()]
    paths = {}
    for system in ("M11", "M23", "M0"):
        mine = [r for r in rows if r["system_id"] == system]
        results = [{"id": r["doc_id"], "evaluation": {"score": (r["scores"]["coherence"] - 1) / 4 * 100, "errors": []}}
                   for r in mine]  # fmt: skip
        paths[system] = tmp_path / f"{system}.jsonl"
        paths[system].write_text("".join(json.dumps(r) + "\n" for r in results))
    out = tmp_path / "compare.json"
    args = ["compare", "--results", str(paths["M11"]), "--results", str(paths["M23"]), "--results", str(paths["M0"])]
    assert main([*args, "--out", str(out), "--resamples", "1000"]) == 0, capsys.readouterr().err
    pairs = {(p["a"], p["b"]): p for p in json.loads(out.read_text())["pairs"] if p["measure"] == "score"}
    gap = pairs[("M11", "M23")]
    assert gap["winner"] == "M23" and gap["p_permutation"] < 0.001 and gap["p_ttest"] < 0.001 and gap["high"] < 0
    assert gap["difference"] == pytest.approx((2.28 - 4.163) / 4 * 100, abs=0.1)
    assert pairs[("M23", "M0")]["winner"] is None and pairs[("M23", "M0")]["p_permutation"] > 0.5


def test_on_quintd1_the_human_error_profiles_of_two_systems_are_compared(
    shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The crowd's spans on GPT-3.5's and Llama 2's outputs of the same 500 quintd-1 inputs, as results
    without scores (--errors-only), each span with its quintd-1 category: the quintd-1 paper's finding
    that GPT-3.5's outputs hold fewer errors (1.39 against 3.17 an output here) is significant overall
    and for 'Incorrect' spans."""
    from spanjudge.eval.spans.quintd import load_quintd1

    paths = []
    for system in ("gpt-3.5", "llama2"):
        docs = [d for d in load_quintd1(shared_data, annotator="human") if d.id.split("/")[2] == system]
        rows = [{"id": d.input_id, "output": d.output, "evaluation": {"score": None, "errors": [
            {"start": g.start, "end": g.end, "category": g.category} for g in d.gold]}} for d in docs]  # fmt: skip
        paths += ["--results", str(tmp_path / f"{system}.jsonl")]
        (tmp_path / f"{system}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "compare.json"
    assert main(["compare", *paths, "--errors-only", "--out", str(out), "--resamples", "500"]) == 0
    written = json.loads(out.read_text())
    assert written["items"] == 500 and written["errors_only"] is True
    pairs = {p["measure"]: p for p in written["pairs"]}
    assert "score" not in pairs and "'Not checkable' errors per output" in pairs
    for measure in ("errors per output", "'Incorrect' errors per output"):
        assert pairs[measure]["winner"] == "gpt-3.5" and pairs[measure]["p_permutation"] < 0.01
    assert pairs["errors per output"]["mean_a"] == pytest.approx(1.394, abs=0.001)
    assert out.with_suffix(".md").read_text().startswith("500 items annotated by every system")
    # without --errors-only, rows without a score are unscored: nothing to compare
    assert main(["compare", *paths]) == 2 and "share 0 scored item(s)" in capsys.readouterr().err


def test_two_annotations_of_the_same_outputs_get_their_span_agreement(shared_data: Path, tmp_path: Path) -> None:
    """GPT-4's and the crowd's quintd-1 spans on the same wikidata outputs, compared as two systems (--errors-only):
    GPT-4's spans against the humans', read as `meta-eval --spans` reads them (`evaluate_spans`); two systems whose
    outputs differ get none."""
    from spanjudge.eval.spans.metrics import evaluate_spans
    from spanjudge.eval.spans.quintd import load_quintd1

    def documents(annotator: str) -> dict[str, Any]:
        found = load_quintd1(shared_data, annotator=annotator, domains=("wikidata",))
        return {d.id: d for d in found if d.id.split("/")[2] == "gpt-3.5"}

    humans, gpt4 = documents("human"), documents("gpt-4")
    shared = sorted(set(humans) & set(gpt4))[:120]
    paths = []
    for name, docs in (("humans", humans), ("gpt-4", gpt4)):
        rows = [{"id": i, "output": docs[i].output, "evaluation": {"score": None, "errors": [
            {"start": g.start, "end": g.end} for g in docs[i].gold]}} for i in shared]  # fmt: skip
        (tmp_path / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        paths += ["--results", str(tmp_path / f"{name}.jsonl")]
    out = tmp_path / "compare.json"
    assert main(["compare", *paths, "--errors-only", "--out", str(out), "--resamples", "100"]) == 0
    [agreement] = json.loads(out.read_text())["span_agreement"]
    expected = evaluate_spans([humans[i] for i in shared], {i: list(gpt4[i].gold_spans) for i in shared})
    assert (agreement["a"], agreement["b"], agreement["items"]) == ("humans", "gpt-4", len(shared))
    for variant in ("overlap", "token", "mpp"):
        assert agreement[variant] == pytest.approx(expected[variant]), variant
    assert 0 < agreement["mpp"]["f1"] < 1 and agreement["mpp"]["precision"] != agreement["mpp"]["recall"]
    table = out.with_suffix(".md").read_text()
    assert "| humans | gpt-4 |" in table and "mpp: match with partial overlap and partial credit" in table
    # the usual comparison, two systems' own outputs: no span agreement
    assert compare_systems(_systems(), resamples=100).span_agreement is None


def test_a_setting_one_system_records_and_another_does_not_cannot_be_checked() -> None:
    systems = _systems()
    judged = {
        **systems,
        "A": [{**row, "task": "summeval", "aspect": "coherence", "model": "judge"} for row in systems["A"]],
    }
    with pytest.raises(InputError, match=r"different tasks \(A: summeval; B: \(not recorded\)"):
        compare_systems(judged, resamples=100)
    result = compare_systems(systems, resamples=100)  # no system records them: compared, and said so
    assert result.unrecorded == ["task", "aspect", "judge", "decoding", "prompt template"]
    assert markdown(result).rstrip().endswith("the winners above hold only if they were.")
