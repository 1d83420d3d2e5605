"""Aspect-targeted perturbation attacks (seed 002, docs/research/benchmarks.md §3): the expected-effect
matrix and the Δ summaries."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

ATTACK_ASPECTS: tuple[str, ...] = (
    "fluency",
    "coherence",
    "grammaticality",
    "simplicity",
    "readability",
    "faithfulness",
    "non-contradiction",
    "non-hallucination",
    "informativeness",
    "adequacy",
    "overall",
)

ATTACK_PERTURBATIONS: tuple[str, ...] = (
    "Repetition",
    "Passive Voice",
    "Inversion",
    "Improper Connective",
    "Sentence Exchange",
    "Incorrect Verb Form",
    "Word Exchange",
    "Spelling Mistake",
    "Uncommon Phrase",
    "Complex Sentence",
    "Abbreviation",
    "Hypernym",
    "Sentence Deletion",
    "Complement",
    "Continuation",
    "Different Entity",
    "Conflicting Fact",
    "Negation",
)

# Rows as printed in docs/research/benchmarks.md §3 (columns Flu Coh Gram Sim Read Fai Cont Hal Inf Ade All);
# the rows marked "same row" there share their named row's string.
_MATRIX_ROWS: dict[str, str] = {
    "Repetition": "x F F F x F F F F F x",
    "Passive Voice": "T F F F T F F F F F x",
    "Inversion": "T F F F T F F F F F T",
    "Improper Connective": "F T F F T F F F F F T",
    "Sentence Exchange": "F T F F T F F F F F T",
    "Incorrect Verb Form": "T F T F T F F F F F T",
    "Word Exchange": "T F T F T F F F F F T",
    "Spelling Mistake": "T F T F x F F F F F T",
    "Uncommon Phrase": "F F F T T F F F F F x",
    "Complex Sentence": "F F F T x F F F F F x",
    "Abbreviation": "F F F F F F F F T T T",
    "Hypernym": "F F F F F F F F T T T",
    "Sentence Deletion": "F F F F F F F F T T T",
    "Complement": "F F F F F T F T F T T",
    "Continuation": "F F F F F T F T F T T",
    "Different Entity": "F F F F F T T x T T T",
    "Conflicting Fact": "F F F F F T T x T T T",
    "Negation": "F F F F F T T x T T T",
}

EXPECTED_EFFECT: dict[str, dict[str, str]] = {
    perturbation: dict(zip(ATTACK_ASPECTS, _MATRIX_ROWS[perturbation].split(), strict=True))
    for perturbation in ATTACK_PERTURBATIONS
}
"""EXPECTED_EFFECT[perturbation][aspect]: "T" a drop is expected, "F" none is, "x" excluded."""

DELTA_PASS_T = 0.5
DELTA_PASS_F = 0.2


def attack_delta(
    original_scores: Sequence[float | None], perturbed_scores: Sequence[float | None]
) -> tuple[float | None, int]:
    """Δ = mean over items of score(original) − score(perturbed), on the scale given (1–5).

    Items with either score missing are left out; returns (Δ, items used), (None, 0) if none.
    """
    if len(original_scores) != len(perturbed_scores):
        raise ValueError(f"{len(original_scores)} original scores but {len(perturbed_scores)} perturbed ones")
    diffs = [
        float(o) - float(p)
        for o, p in zip(original_scores, perturbed_scores, strict=True)
        if o is not None and p is not None
    ]
    if not diffs:
        return None, 0
    return sum(diffs) / len(diffs), len(diffs)


def attack_summary(delta: Mapping[tuple[str, str], float | None]) -> dict[str, float | int | None]:
    """Summarise a Δ heat map keyed by (perturbation, aspect) against EXPECTED_EFFECT.

    T cells: mean Δ (higher is better) and the share with Δ > 0.5; F cells: mean |Δ| (lower
    is better) and the share with |Δ| < 0.2 (002 / docs/research/benchmarks.md §3). "x" cells are ignored.
    A T/F cell absent from `delta`, or None, is counted as missing, not as zero. Means and
    rates over no cell are None.
    """
    unknown = [key for key in delta if key[0] not in EXPECTED_EFFECT or key[1] not in EXPECTED_EFFECT.get(key[0], {})]
    if unknown:
        raise ValueError(f"unknown (perturbation, aspect) cell(s): {unknown[:3]}")
    t_values: list[float] = []
    f_values: list[float] = []
    t_missing = f_missing = 0
    for perturbation, row in EXPECTED_EFFECT.items():
        for aspect, expected in row.items():
            if expected == "x":
                continue
            value = delta.get((perturbation, aspect))
            if expected == "T":
                if value is None:
                    t_missing += 1
                else:
                    t_values.append(float(value))
            elif value is None:
                f_missing += 1
            else:
                f_values.append(abs(float(value)))
    return {
        "mean_delta_T": _mean_or_none(t_values),
        "mean_abs_delta_F": _mean_or_none(f_values),
        "pass_rate_T": _mean_or_none([float(v > DELTA_PASS_T) for v in t_values]),
        "pass_rate_F": _mean_or_none([float(v < DELTA_PASS_F) for v in f_values]),
        "n_T": len(t_values),
        "n_F": len(f_values),
        "missing_T": t_missing,
        "missing_F": f_missing,
    }


def _mean_or_none(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None
