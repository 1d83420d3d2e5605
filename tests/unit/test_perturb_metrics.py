"""Hand-worked checks of the perturbation-benchmark metrics (eval/perturb/statistics/)."""

from __future__ import annotations

import math

import pytest

from spanjudge.eval.perturb.statistics import (
    ATTACK_ASPECTS,
    ATTACK_PERTURBATIONS,
    EXPECTED_EFFECT,
    DHPSet,
    EqualWidthBinner,
    adjacent_pair_accuracy,
    alpha_ordinal,
    attack_delta,
    attack_summary,
    cem_ord,
    dhp_summary,
    discernment,
    exact_match_rate,
    gap_accuracy,
    gap_pair_counts,
    harmonic_p,
    krippendorff_alpha_ordinal,
    level_balanced_mean,
    linear_weighted_kappa,
    perturbed_rating,
    to_likert,
    wilcoxon_greater,
)

# --- §1 DHP ------------------------------------------------------------------------------------


def test_wilcoxon_all_ties_and_no_pairs_give_one() -> None:
    assert wilcoxon_greater([3, 4, 5], [3, 4, 5]) == 1.0
    assert wilcoxon_greater([], []) == 1.0


def test_wilcoxon_exact_small_samples() -> None:
    # n = 5 distinct |d| = 1..5, all positive: W+ = 15, the largest of 2^5 equally likely sign
    # patterns under H0, so the exact one-sided p = 1/32.
    assert wilcoxon_greater([5, 6, 7, 8, 9], [4, 4, 4, 4, 4]) == pytest.approx(1 / 32)
    # d = 1, 2, 3, 4, -5: W+ = 10. P(W+ >= 10) = P(the negative ranks sum to <= 5); the subsets
    # of {1..5} with sum <= 5 are {}, 1, 2, 3, 4, 5, 12, 13, 14, 23: 10 of 32 -> p = 0.3125.
    assert wilcoxon_greater([1, 2, 3, 4, 0], [0, 0, 0, 0, 5]) == pytest.approx(10 / 32)
    # the other direction: perturbed texts scoring higher is no evidence (p = 31/32 + 1/32 = 1)
    assert wilcoxon_greater([4, 4, 4, 4, 4], [5, 6, 7, 8, 9]) == pytest.approx(1.0)


def test_wilcoxon_rejects_unpaired_input() -> None:
    with pytest.raises(ValueError, match="differ in length"):
        wilcoxon_greater([1, 2], [1])


def test_harmonic_p_printed_normalised_and_expert_weighted() -> None:
    ps = [0.1, 0.2, 0.5]  # 1/p = 10, 5, 2 -> sum 17
    assert harmonic_p(ps) == pytest.approx(1 / 17)
    assert harmonic_p(ps, normalised=True) == pytest.approx(3 / 17)
    # w/p = 0.5/0.1 + 0.25/0.2 + 0.25/0.5 = 5 + 1.25 + 0.5 = 6.75
    assert harmonic_p(ps, weights=[0.5, 0.25, 0.25]) == pytest.approx(1 / 6.75)
    # uniform weights give the normalised harmonic mean
    assert harmonic_p(ps, weights=[1 / 3] * 3) == pytest.approx(3 / 17)
    assert harmonic_p([0.0, 0.3]) == 0.0
    # a zero p that carries no expert weight does not count
    assert harmonic_p([0.0, 0.5], weights=[0.0, 1.0]) == pytest.approx(0.5)


@pytest.mark.parametrize(
    ("weights", "message"),
    [([0.5, 0.4, 0.0], "sum to 1"), ([0.5, 0.5], "one weight per metric"), ([1.5, -0.5, 0.0], "non-negative")],
)
def test_harmonic_p_validates_weights(weights: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        harmonic_p([0.1, 0.2, 0.5], weights=weights)


def test_discernment_threshold_and_extremes() -> None:
    assert discernment(0.05) == pytest.approx(1.0)
    assert discernment(0.05**2) == pytest.approx(2.0)
    assert discernment(1.0) == 0.0
    assert discernment(0.0) == math.inf


def test_d_avg_balances_levels_not_sets() -> None:
    sets = [
        DHPSet("C-deletions", "C", 0.05),  # D = 1
        DHPSet("C-typos", "C", 0.05**2),  # D = 2
        DHPSet("W-entities", "W", 1.0),  # D = 0
        DHPSet("S-reorder", "S", 0.05**4),  # D = 4
    ]
    summary = dhp_summary(sets)
    assert summary["D"] == pytest.approx({"C-deletions": 1, "C-typos": 2, "W-entities": 0, "S-reorder": 4})
    assert summary["D_min"] == pytest.approx(0.0)
    # levels: C = (1 + 2)/2 = 1.5, W = 0, S = 4 -> (1.5 + 0 + 4)/3 = 11/6 (the plain mean would be 7/4)
    assert summary["D_avg"] == pytest.approx(11 / 6)
    assert summary["levels"] == {"C": ["C-deletions", "C-typos"], "W": ["W-entities"], "S": ["S-reorder"]}
    level_of = {s.key: s.level for s in sets}
    assert level_balanced_mean({"C-typos": 2.0, "S-reorder": 4.0}, level_of) == pytest.approx(3.0)
    with pytest.raises(ValueError, match="repeat"):
        dhp_summary([DHPSet("a", "C", 0.1), DHPSet("a", "W", 0.1)])


# --- §2 dual perspective -------------------------------------------------------------------------


def test_linear_weighted_kappa_hand_computed() -> None:
    gold = [1, 1, 1, 2, 2, 2, 3, 3, 3, 3]
    pred = [1, 1, 2, 2, 2, 3, 3, 3, 3, 1]
    # confusion c[pred][gold]: p1 = (2, 0, 1), p2 = (1, 2, 0), p3 = (0, 1, 3); rows 3, 3, 4; cols 3, 3, 4
    # sum w*c = 2*1 (p1,g3) + 1*1 (p2,g1) + 1*1 (p3,g2) = 4
    # e = row*col/10: w=1 cells e12 + e21 + e23 + e32 = .9 + .9 + 1.2 + 1.2 = 4.2; w=2 cells 2*(1.2 + 1.2) = 4.8
    # kappa = 1 - 4/9 = 5/9 (sklearn's cohen_kappa_score(weights="linear") gives the same)
    assert linear_weighted_kappa(gold, pred, [1, 2, 3]) == pytest.approx(5 / 9)
    assert linear_weighted_kappa(gold, gold, [1, 2, 3]) == pytest.approx(1.0)
    # classes are ordinal positions: relabelling them keeps kappa
    assert linear_weighted_kappa([10 * g for g in gold], [10 * p for p in pred], [10, 20, 30]) == pytest.approx(5 / 9)
    # one class only: sum w*e = 0, kappa undefined
    assert math.isnan(linear_weighted_kappa([2, 2], [2, 2], [1, 2, 3]))
    with pytest.raises(ValueError, match="outside the classes"):
        linear_weighted_kappa([1, 4], [1, 1], [1, 2, 3])


def test_cem_ord_hand_computed() -> None:
    gold = [1, 1, 2, 3]
    pred = [1, 2, 2, 1]
    # gold counts n1 = 2, n2 = 1, n3 = 1, N = 4
    # denominator: prox(g, g) = -log2(n_g / 2 / 4): 2, 2, 3, 3 -> 10
    # numerator: prox(1,1) = 2; prox(2,1) = -log2((1/2 + n1)/4) = -log2(0.625);
    #            prox(2,2) = 3; prox(1,3) = -log2((2/2 + n2 + n3)/4) = -log2(0.75)
    expected = (2 - math.log2(0.625) + 3 - math.log2(0.75)) / 10
    assert cem_ord(gold, pred, [1, 2, 3]) == pytest.approx(expected)
    assert expected == pytest.approx(0.60931, abs=1e-5)
    assert cem_ord(gold, gold, [1, 2, 3]) == pytest.approx(1.0)


def test_adjacent_pair_accuracy_ties_are_errors_and_missing_skipped() -> None:
    sequences = [[5, 4, 4, 1], [3, None, 2], [2, 3]]
    # seq 1: 5>4 ok, 4>4 tie = error, 4>1 ok; seq 2: both pairs have a None (skipped); seq 3: 2>3 wrong
    assert adjacent_pair_accuracy(sequences) == (pytest.approx(2 / 4), 4)
    assert gap_pair_counts(sequences, 1) == (2, 4, 2)
    # d = 2: (5,4) ok, (4,1) ok, (3,2) ok
    assert gap_accuracy(sequences, 2) == (pytest.approx(1.0), 3)
    accuracy, used = adjacent_pair_accuracy([[None, 1.0]])
    assert math.isnan(accuracy) and used == 0


# --- §4 perturbed prompt ------------------------------------------------------------------------

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 observers x 12 units
# example with missing values; published alpha: nominal 0.743, ordinal 0.815, interval 0.849.
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


def test_alpha_ordinal_matches_the_published_example() -> None:
    assert alpha_ordinal(KRIPPENDORFF_2011) == pytest.approx(0.815, abs=5e-4)
    # the judge is one more rater beside the experts
    judge, *experts = KRIPPENDORFF_2011
    assert krippendorff_alpha_ordinal(judge, experts) == pytest.approx(0.815, abs=5e-4)
    with pytest.raises(ValueError, match="units"):
        krippendorff_alpha_ordinal([1, 2], experts)


def test_exact_match_rate_over_pairs_present() -> None:
    assert exact_match_rate([1, 2, None, 4, 5], [1, 3, 3, None, 5]) == (pytest.approx(2 / 3), 3)
    rate, n = exact_match_rate([None], [1])
    assert math.isnan(rate) and n == 0


@pytest.mark.parametrize(
    ("ratings", "scale", "expected"),
    [
        ([1, 1, 4], [1, 2, 3, 4, 5], 5),  # mode 1 <= 2.5 -> max
        ([2, 2, 5], [1, 2, 3, 4, 5], 5),  # mode 2 <= 2.5 -> max
        ([3, 3, 5], [1, 2, 3, 4, 5], 1),  # mode 3 > 2.5 -> min
        ([1, 2, 4], [1, 2, 3, 4, 5], 1),  # all differ -> r = max = 4 > 2.5 -> min
        ([1, 2, 2], [1, 2, 3, 4, 5], 5),
        ([1, 1, 3], [1, 2, 3], 3),  # mode 1 <= 1.5 -> max
        ([2, 2, 1], [1, 2, 3], 1),  # mode 2 > 1.5 -> min
        ([1, 2, 3], [1, 2, 3], 1),  # all differ -> 3 -> min
        ([0, 0, 1], [0, 1], 1),  # USR 0-1: mode 0 <= 0.5 -> max
    ],
)
def test_perturbed_rating_rule(ratings: list[int], scale: list[int], expected: int) -> None:
    assert perturbed_rating(ratings, scale) == expected


# --- scale helpers -------------------------------------------------------------------------------


def test_to_likert_and_equal_width_binner() -> None:
    assert [to_likert(s) for s in (0, 50, 100)] == [1.0, 3.0, 5.0]
    binner = EqualWidthBinner(0, 100, (1, 2, 3, 4, 5))
    assert [binner(s) for s in (0, 19.99, 20, 59.9, 80, 100)] == [1, 1, 2, 3, 5, 5]
    assert binner.describe() == (
        "equal-width bins on [0, 100]: [0, 20)→1, [20, 40)→2, [40, 60)→3, [60, 80)→4, [80, 100]→5"
    )
    with pytest.raises(ValueError, match="outside"):
        binner(101)
    with pytest.raises(ValueError, match="outside"):
        binner(100.001)
    # sacrebleu's BLEU of an unchanged text is 100.00000000000004: round-off, not a scale mix-up
    assert binner(100.00000000000004) == 5 and binner(-1e-12) == 1
    assert EqualWidthBinner(0, 100, (1, 2, 3))(50) == 2


# --- §3 aspect attacks ---------------------------------------------------------------------------


def test_expected_effect_matrix_shape_and_cells() -> None:
    assert len(ATTACK_PERTURBATIONS) == 18 and len(ATTACK_ASPECTS) == 11
    assert list(EXPECTED_EFFECT) == list(ATTACK_PERTURBATIONS)
    assert all(list(row) == list(ATTACK_ASPECTS) for row in EXPECTED_EFFECT.values())
    assert EXPECTED_EFFECT["Repetition"]["fluency"] == "x"
    assert EXPECTED_EFFECT["Passive Voice"]["overall"] == "x"
    assert EXPECTED_EFFECT["Spelling Mistake"]["readability"] == "x"
    assert EXPECTED_EFFECT["Spelling Mistake"]["grammaticality"] == "T"
    assert EXPECTED_EFFECT["Hypernym"] == EXPECTED_EFFECT["Abbreviation"]
    assert EXPECTED_EFFECT["Sentence Deletion"]["informativeness"] == "T"
    assert EXPECTED_EFFECT["Continuation"]["non-hallucination"] == "T"
    assert EXPECTED_EFFECT["Negation"]["non-hallucination"] == "x"
    assert EXPECTED_EFFECT["Conflicting Fact"]["non-contradiction"] == "T"
    assert EXPECTED_EFFECT["Complex Sentence"]["simplicity"] == "T"
    cells = [v for row in EXPECTED_EFFECT.values() for v in row.values()]
    # counted by hand from the docs/research/benchmarks.md matrix
    assert (cells.count("T"), cells.count("F"), cells.count("x")) == (57, 130, 11)


def test_attack_delta_and_summary() -> None:
    assert attack_delta([5, 4, None, 3], [4, 4, 2, 1]) == (pytest.approx(1.0), 3)
    assert attack_delta([None], [3]) == (None, 0)
    delta = {
        ("Inversion", "fluency"): 1.0,  # T, passes (> 0.5)
        ("Inversion", "readability"): 0.3,  # T, fails
        ("Inversion", "overall"): None,  # T, missing
        ("Inversion", "coherence"): -0.1,  # F, passes (|d| < 0.2)
        ("Inversion", "grammaticality"): 0.5,  # F, fails
        ("Repetition", "fluency"): 9.0,  # x: ignored
    }
    summary = attack_summary(delta)
    assert summary == {
        "mean_delta_T": pytest.approx(0.65),
        "mean_abs_delta_F": pytest.approx(0.3),
        "pass_rate_T": pytest.approx(0.5),
        "pass_rate_F": pytest.approx(0.5),
        "n_T": 2,
        "n_F": 2,
        "missing_T": 55,
        "missing_F": 128,
    }
    empty = attack_summary({})
    assert empty["mean_delta_T"] is None and empty["missing_T"] == 57
    with pytest.raises(ValueError, match="unknown"):
        attack_summary({("Inversion", "relevance"): 1.0})
