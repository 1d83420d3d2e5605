"""Recalibrating span confidence (`eval.spans.recalibration`), on hand-made confidences whose answer is known:
a map fitted on one fold of the inputs is read on the other, temperature cannot move the base rate, and no
map adds ranking."""

from __future__ import annotations

import pytest
from support.scripts import REPO, load_script

from spanjudge.eval.spans.recalibration import auc, cross_fitted, fit_scaling, recalibration


def test_platt_scaling_moves_the_base_rate_and_temperature_cannot() -> None:
    # every span said at 0.5, one in five overlaps a human span: the honest confidence is 0.2
    fold = [(0.5, 1.0)] + [(0.5, 0.0)] * 4
    folds = [fold, fold]
    assert fit_scaling(fold * 2, bias=True)[1] == pytest.approx(-1.386, abs=1e-3)  # logit(0.2)
    found = recalibration(folds)
    assert found["ece"] == pytest.approx(0.3)
    assert found["ece_temperature"] == pytest.approx(0.3, abs=1e-6)  # logit(0.5) = 0: any T keeps 0.5
    assert found["ece_platt"] == pytest.approx(0.0, abs=1e-4)
    assert found["ece_constant"] == pytest.approx(0.0) and found["auc"] == 0.5


def test_an_overconfident_confidence_that_ranks_is_fixed_held_out() -> None:
    # spans at 0.99 overlap half the time, spans at 0.6 never: it ranks
    fold = [(0.99, 1.0), (0.99, 0.0), (0.6, 0.0), (0.6, 0.0)]
    found = recalibration([fold, fold])
    # a hit beats the four 0.6 misses and ties the two 0.99 ones: 5 of 6
    assert found["auc"] == pytest.approx(5 / 6)
    assert found["ece"] > 0.4
    assert found["ece_temperature"] < found["ece"] and found["ece_platt"] < 0.05


def test_each_fold_is_predicted_by_the_others_only() -> None:
    # the folds disagree about the base rate: a fold never sees its own outcomes
    folds = [[(0.5, 1.0)] * 4, [(0.5, 0.0)] * 4]
    assert [p for p, _ in cross_fitted(folds, "constant")] == [0.0] * 4 + [1.0] * 4
    platt = cross_fitted(folds, "platt")
    assert platt[0][0] < 0.01 and platt[-1][0] > 0.99


def test_undefined_and_bad_inputs() -> None:
    assert auc([(0.9, 1.0), (0.8, 1.0)]) is None  # no negative: no ranking to measure
    with pytest.raises(ValueError, match="two folds"):
        recalibration([[(0.5, 1.0)], []])


def test_the_committed_results_are_what_the_committed_dev_judgments_give() -> None:
    import json

    bench = load_script("bench/span_confidence_recalibration.py")
    committed = json.loads(bench.RESULTS.with_suffix(".json").read_text())
    runs = json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]
    found = bench.results(runs)  # every run with kept dev judgments, no other
    assert [r["label"] for r in found["runs"]] == [r["label"] for r in committed["runs"]]
    for row, kept in zip(found["runs"], committed["runs"], strict=True):
        # the fit is numerical: L-BFGS-B stops at its tolerance, so another CPU's map differs in the sixth digit
        # (an Intel Xeon with AMX read one ECE 1.3e-6 apart, relatively, from the committed one)
        assert all(row[c] == pytest.approx(kept[c], rel=1e-5) for c in bench.COLUMNS)
    for recipe, kept in zip(found["recipes"], committed["recipes"], strict=True):
        assert recipe["seeds"] == kept["seeds"]
        assert all(recipe[c] == pytest.approx(kept[c], abs=1e-4) for c in bench.COLUMNS[3:])
    assert bench.markdown(committed["runs"], committed["recipes"]) == bench.RESULTS.with_suffix(".md").read_text()
