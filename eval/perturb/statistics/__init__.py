"""Pure metrics of the perturbation benchmarks (issue #7), one small function per statistic, a module per
benchmark (dhp, dual, attacks, prompt) and the scale helpers (scale); every name is here.

Everything here is numpy/scipy arithmetic over plain sequences: no I/O, no judge, no config,
so every number a report prints can be checked by hand (tests/unit/test_perturb_metrics.py).
Sections follow docs/research/benchmarks.md: §1 DHP (Wilcoxon, harmonic-mean p,
discernment), §2 dual perspective (linear weighted κ, CEM-ORD, adjacent-pair accuracy),
§3 aspect-targeted attacks (expected-effect matrix, Δ summaries), §4 perturbed prompt
(Krippendorff's α, exact match, the perturbed rating), plus the scale helpers.
"""

from __future__ import annotations

from .attacks import (
    ATTACK_ASPECTS,
    ATTACK_PERTURBATIONS,
    DELTA_PASS_F,
    DELTA_PASS_T,
    EXPECTED_EFFECT,
    attack_delta,
    attack_summary,
)
from .dhp import SIGNIFICANCE, DHPSet, dhp_summary, discernment, harmonic_p, level_balanced_mean, wilcoxon_greater
from .dual import adjacent_pair_accuracy, cem_ord, gap_accuracy, gap_pair_counts, linear_weighted_kappa
from .prompt import (
    alpha_ordinal,
    exact_match_rate,
    krippendorff_alpha_ordinal,
    perturbed_rating,
    perturbed_ratings_for_mean,
)
from .scale import EqualWidthBinner, to_likert

__all__ = [
    "ATTACK_ASPECTS",
    "ATTACK_PERTURBATIONS",
    "DELTA_PASS_F",
    "DELTA_PASS_T",
    "EXPECTED_EFFECT",
    "SIGNIFICANCE",
    "DHPSet",
    "EqualWidthBinner",
    "adjacent_pair_accuracy",
    "alpha_ordinal",
    "attack_delta",
    "attack_summary",
    "cem_ord",
    "dhp_summary",
    "discernment",
    "exact_match_rate",
    "gap_accuracy",
    "gap_pair_counts",
    "harmonic_p",
    "krippendorff_alpha_ordinal",
    "level_balanced_mean",
    "linear_weighted_kappa",
    "perturbed_rating",
    "perturbed_ratings_for_mean",
    "to_likert",
    "wilcoxon_greater",
]
