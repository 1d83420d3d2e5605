"""From a judge's scores on a benchmark to the benchmark's statistics (BENCHMARKS.md §1-4).

Every function is data in, data out: the benchmark, the scores by (aspect, item id) and the
options; the result is a JSON-ready dict with the counts of texts left unscored, so a
report never hides how much of the benchmark a number rests on.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.inference.errors import InputError

from ..judges import Judgment
from ..sampling import mode_class
from . import metrics
from .benchmark import BenchItem, Benchmark, originals_by_group
from .spans import PRF, micro_total, overlap_span_prf, token_prf

Scores = Mapping[tuple[str, str], Judgment]
LEVELS = {"character": "C", "word": "W", "sentence": "S"}


def _score(scores: Scores, aspect: str, item: BenchItem) -> float | None:
    judgment = scores.get((aspect, item.id))
    return None if judgment is None else judgment.score


def _num(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


def _pairs(benchmark: Benchmark, scores: Scores, key: str, aspect: str) -> tuple[list[float], list[float], int]:
    """(original scores, perturbed scores, pairs lost to an unscored text) for one set."""
    originals = originals_by_group(benchmark.items)
    kept_o, kept_p, lost = [], [], 0
    for item in benchmark.items:
        if item.perturbation != key or aspect not in item.aspects:
            continue
        original = originals.get(item.group)
        o = None if original is None else _score(scores, aspect, original)
        p = _score(scores, aspect, item)
        if o is None or p is None:
            lost += 1
        else:
            kept_o.append(o)
            kept_p.append(p)
    return kept_o, kept_p, lost


# -- §1 DHP ------------------------------------------------------------------------------------


ExpertWeights = Mapping[str, Mapping[str, float]]  # perturbation key -> aspect -> w (000's EW^i_mj)


def check_weights(benchmark: Benchmark, weights: ExpertWeights) -> dict[str, list[float]]:
    """Per perturbation, the weight of each benchmark aspect (0 where none is given).

    000 §3.3.2 weighs the metrics PER PERTURBATION (10 experts voted which metric each quality
    issue hits): every perturbation of the benchmark needs its own weights, summing to 1."""
    aspects = list(benchmark.aspects)
    unknown = sorted(set(weights) - set(benchmark.perturbations))
    if unknown:
        raise InputError(f"expert weights for '{unknown[0]}', which is not a perturbation of {benchmark.name}")
    missing = [k for k in benchmark.perturbations if k not in weights]
    if missing:
        raise InputError(
            f"expert weights are per perturbation and aspect: none given for {', '.join(missing)} "
            f"(give PERTURBATION:ASPECT=W for every perturbation, or none for no EW variant)"
        )
    out = {}
    for key, per_aspect in weights.items():
        stray = [a for a in per_aspect if a not in aspects]
        if stray:
            raise InputError(f"expert weight for {key}:{stray[0]}: the benchmark rates {', '.join(aspects)}")
        w = [float(per_aspect.get(a, 0.0)) for a in aspects]
        if any(x < 0 for x in w) or abs(sum(w) - 1.0) > 1e-6:
            raise InputError(f"expert weights of {key} must be non-negative and sum to 1, they sum to {sum(w):g}")
        out[key] = w
    return out


def analyze_dhp(
    benchmark: Benchmark, scores: Scores, weights: ExpertWeights | None = None, normalised: bool = False
) -> dict[str, Any]:
    """Per set: one-sided Wilcoxon p per aspect (the paper's metrics m_j), the harmonic-mean p
    and D; then D_min and the level-balanced D_avg. With expert weights per perturbation and
    aspect, also p^EW, D^EW and their summaries. No uniform default: with w = 1/M, p^EW = M·p and
    D^EW = D − ln M / ln 20 for every set, a constant shift that carries no information."""
    aspects = list(benchmark.aspects)
    w = check_weights(benchmark, weights) if weights else None
    sets: dict[str, Any] = {}
    plain: list[metrics.DHPSet] = []
    weighted: list[metrics.DHPSet] = []
    for key, info in benchmark.perturbations.items():
        per_aspect: dict[str, Any] = {}
        for aspect in aspects:
            original, perturbed, lost = _pairs(benchmark, scores, key, aspect)
            p = metrics.wilcoxon_greater(original, perturbed) if original else None
            per_aspect[aspect] = {"p": p, "pairs": len(original), "unscored_pairs": lost}
        ps = [v["p"] for v in per_aspect.values()]
        entry: dict[str, Any] = {"name": info.get("name"), "level": info.get("level"), "degree": info.get("degree"),
                                 "aspects": per_aspect, "p": None}  # fmt: skip
        sets[key] = entry
        if any(p is None for p in ps):  # an aspect with no scored pair: no honest combined p
            continue
        level = LEVELS.get(str(info.get("level")), str(info.get("level")))
        entry["p"] = metrics.harmonic_p(ps, normalised=normalised)
        entry["D"] = metrics.discernment(entry["p"])
        plain.append(metrics.DHPSet(key, level, entry["p"]))
        if w is not None:
            entry["p_EW"] = metrics.harmonic_p(ps, weights=w[key])
            entry["D_EW"] = metrics.discernment(entry["p_EW"])
            weighted.append(metrics.DHPSet(key, level, entry["p_EW"]))
    summary: dict[str, Any] = {"D_avg": None, "D_min": None}
    if w is not None:
        summary |= {"D_avg_EW": None, "D_min_EW": None}
    if plain:
        s = metrics.dhp_summary(plain)
        summary |= {"D_avg": s["D_avg"], "D_min": s["D_min"]}
    if weighted:
        s_ew = metrics.dhp_summary(weighted)
        summary |= {"D_avg_EW": s_ew["D_avg"], "D_min_EW": s_ew["D_min"]}
    return {
        "sets": sets,
        "summary": summary,
        "sets_without_p": sorted(k for k, v in sets.items() if v["p"] is None),
        "harmonic": "normalised M/sum(1/p)" if normalised else "printed 1/sum(1/p)",
        "weights": {k: dict(zip(aspects, v, strict=True)) for k, v in w.items()} if w is not None else None,
    }


def parse_weights(values: Sequence[str]) -> dict[str, dict[str, float]]:
    """`--dhp-weight` values: PERTURBATION:ASPECT=W, or a YAML/JSON file {perturbation: {aspect: w}}."""
    out: dict[str, dict[str, float]] = {}
    for value in values:
        if value.endswith((".yaml", ".yml", ".json")):
            for key, per_aspect in _weights_file(Path(value)).items():
                out.setdefault(key, {}).update(per_aspect)
            continue
        target, sep, weight = value.partition("=")
        key, colon, aspect = target.rpartition(":")
        try:
            number = float(weight)
        except ValueError:
            sep = ""
        if not sep or not colon or not key or not aspect:
            raise InputError(f"--dhp-weight expects PERTURBATION:ASPECT=NUMBER or a weights file, got {value!r}")
        out.setdefault(key.strip(), {})[aspect.strip()] = number
    return out


def _weights_file(path: Path) -> dict[str, dict[str, float]]:
    from spanjudge.inference.configio import read_yaml

    if not path.is_file():
        raise InputError(f"--dhp-weight: weights file not found: {path}")
    data = read_yaml(path)
    if not isinstance(data, Mapping):
        raise InputError(f"{path}: expected {{perturbation: {{aspect: weight}}}}")
    out: dict[str, dict[str, float]] = {}
    for key, per_aspect in data.items():
        if not isinstance(per_aspect, Mapping) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in per_aspect.values()
        ):
            raise InputError(f"{path}: '{key}' must map each aspect to a number")
        out[str(key)] = {str(a): float(v) for a, v in per_aspect.items()}
    return out


# -- §2 dual perspective ----------------------------------------------------------------------


def analyze_dual(benchmark: Benchmark, scores: Scores, gap: int = 2, samples: Sequence[Scores] = ()) -> dict[str, Any]:
    """Global: the judge's score binned onto the gold scale, linear weighted κ and CEM-ORD per
    aspect. Local: each chain (0, 1, 2 ... injected errors) is a sequence of strictly falling
    quality; adjacent-pair accuracy (ties are errors) and gap-d accuracy.
    With several `samples` (--samples), as 001 §4: the global rating is the mode of the samples'
    binned ratings, the local score their mean (`scores` holds the means)."""
    default = tuple(int(c) for c in benchmark.info.get("scale", (1, 2, 3, 4, 5)))
    scales = benchmark.info.get("scales") or {}
    per_aspect: dict[str, Any] = {}
    binners: dict[str, str] = {}
    for aspect in benchmark.aspects:
        classes = tuple(int(c) for c in scales.get(aspect, default))  # USR's binary aspects: 1..2
        binner = metrics.EqualWidthBinner(0.0, 100.0, classes)
        binners[aspect] = binner.describe()
        items = [i for i in benchmark.items if aspect in i.aspects]
        gold, predicted, unscored = [], [], 0
        chains: dict[str, list[tuple[int, float | None]]] = {}
        for item in items:
            score = _score(scores, aspect, item)
            chains.setdefault(str(item.meta.get("chain", item.group)), []).append((int(item.meta["errors"]), score))
            if score is None:
                unscored += 1
                continue
            gold.append(int(item.meta["gold"]))
            modal = mode_class([_score(one, aspect, item) for one in samples], binner) if len(samples) > 1 else None
            predicted.append(binner(score) if modal is None else modal)
        sequences = [[s for _, s in sorted(chain)] for chain in chains.values()]
        accuracy, pairs = metrics.adjacent_pair_accuracy(sequences)
        gap_acc, gap_pairs = metrics.gap_accuracy(sequences, gap)
        per_aspect[aspect] = {
            "texts": len(items),
            "unscored": unscored,
            "kappa": _num(metrics.linear_weighted_kappa(gold, predicted, classes)) if gold else None,
            "cem_ord": _num(metrics.cem_ord(gold, predicted, classes)) if gold else None,
            "pair_accuracy": _num(accuracy),
            "pairs": pairs,
            f"gap{gap}_accuracy": _num(gap_acc),
            f"gap{gap}_pairs": gap_pairs,
            "chains": len(sequences),
            "scale": list(classes),
        }

    def mean(metric: str) -> float | None:
        values = [v[metric] for v in per_aspect.values() if v[metric] is not None]
        return sum(values) / len(values) if values else None

    return {
        "aspects": per_aspect,
        "average": {m: mean(m) for m in ("kappa", "cem_ord", "pair_accuracy", f"gap{gap}_accuracy")},
        "binner": "; ".join(dict.fromkeys(binners.values())),
        "binners": binners,
    }


# -- §3 aspect-targeted attacks ---------------------------------------------------------------


def analyze_attacks(benchmark: Benchmark, scores: Scores) -> dict[str, Any]:
    """Δ(perturbation, aspect) = mean(original − perturbed) on the 1-5 scale (s' = 1 + 4s/100)."""
    delta: dict[tuple[str, str], float | None] = {}
    cells: list[dict[str, Any]] = []
    for key, info in benchmark.perturbations.items():
        name = str(info.get("name"))
        for aspect in benchmark.aspects:
            original, perturbed, lost = _pairs(benchmark, scores, key, aspect)
            value, used = metrics.attack_delta(
                [metrics.to_likert(s) for s in original], [metrics.to_likert(s) for s in perturbed]
            )
            expected = metrics.EXPECTED_EFFECT.get(name, {}).get(aspect, "?")
            if name in metrics.EXPECTED_EFFECT and aspect in metrics.ATTACK_ASPECTS:
                delta[(name, aspect)] = value
            cells.append(
                {"perturbation": name, "aspect": aspect, "delta": value, "items": used, "unscored": lost,
                 "expected": expected}
            )  # fmt: skip
    return {"cells": cells, "summary": metrics.attack_summary(delta), "scale": "1 + 4*score/100"}


# -- §4 perturbed prompt ----------------------------------------------------------------------


ALPHA_003 = "003's statistic: each expert's rating and the judge as raters"
ALPHA_MEAN = "not 003's statistic: the experts' MEAN as one rater and the judge"


def analyze_prompt(benchmark: Benchmark, scores: Scores) -> dict[str, Any]:
    """Krippendorff's ordinal α of the judge (binned onto the aspect's expert scale) beside the
    experts, with and without the injected rating, and the exact-match rate of the two scores.

    003's α (Table 1) has the three experts and the LLM as four raters. Where only the experts'
    mean is known, α is over two rows (mean, judge): another statistic, labelled as such."""
    scales = benchmark.info.get("scales") or {}
    originals = originals_by_group(benchmark.items)
    per_aspect: dict[str, Any] = {}
    binners: dict[str, str] = {}
    for aspect in benchmark.aspects:
        binner = metrics.EqualWidthBinner(0.0, 100.0, tuple(int(c) for c in scales.get(aspect, (1, 2, 3, 4, 5))))
        binners[aspect] = binner.describe()
        injected = [i for i in benchmark.items if i.perturbation and aspect in i.aspects]
        plain_scores, injected_scores, experts, raters = [], [], [], []
        for item in injected:
            original = originals[item.group]
            experts.append(float(original.meta["experts"][aspect]))
            raters.append([float(r) for r in (original.meta.get("ratings") or {}).get(aspect, [])])
            plain_scores.append(_score(scores, aspect, original))
            injected_scores.append(_score(scores, aspect, item))
        individual = bool(raters) and all(len(r) > 1 for r in raters)  # every item's own experts
        rows = _expert_rows(raters) if individual else [experts]
        rate, pairs = metrics.exact_match_rate(plain_scores, injected_scores)
        per_aspect[aspect] = {
            "items": len(injected),
            "alpha_plain": _alpha(plain_scores, rows, binner),
            "alpha_injected": _alpha(injected_scores, rows, binner),
            "alpha_statistic": ALPHA_003 if individual else ALPHA_MEAN,
            "exact_match": _num(rate),
            "pairs": pairs,
            "unscored_plain": sum(v is None for v in plain_scores),
            "unscored_injected": sum(v is None for v in injected_scores),
        }
    return {"aspects": per_aspect, "binners": binners, "rating_rule": benchmark.info.get("rating_rule")}


def _expert_rows(raters: list[list[float]]) -> list[list[float | None]]:
    """Per-item rating lists as rater rows (raters x items), padded with None."""
    width = max(len(r) for r in raters)
    return [[r[k] if k < len(r) else None for r in raters] for k in range(width)]


def _alpha(
    values: Sequence[float | None], experts: Sequence[Sequence[float | None]], binner: metrics.EqualWidthBinner
) -> float | None:
    judge = [None if v is None else float(binner(v)) for v in values]
    if sum(v is not None for v in judge) < 2:
        return None
    return _num(metrics.krippendorff_alpha_ordinal(judge, experts))


# -- spans ------------------------------------------------------------------------------------


def analyze_spans(benchmark: Benchmark, scores: Scores) -> dict[str, Any] | None:
    """The judge's error spans against the characters each perturbation changed; None when the
    judge gives no spans (a metric or a prompted ensemble)."""
    overlap: list[PRF] = []
    tokens: list[PRF] = []
    unscored = 0
    for item in benchmark.items:
        if item.perturbation is None or not item.spans:
            continue
        for aspect in item.aspects:
            judgment = scores.get((aspect, item.id))
            detail = judgment.detail if judgment is not None else None
            if judgment is None or judgment.score is None or not detail or "spans" not in detail:
                unscored += 1
                continue
            predicted = [(int(s), int(e)) for s, e in detail["spans"]]
            overlap.append(overlap_span_prf(predicted, list(item.spans)))
            tokens.append(token_prf(predicted, list(item.spans), item.output))
    if not overlap:
        return None
    return {"texts": len(overlap), "unscored": unscored, "overlap": micro_total(overlap).as_dict(),
            "token": micro_total(tokens).as_dict()}  # fmt: skip


ANALYSES = {"dhp": analyze_dhp, "dual": analyze_dual, "attacks": analyze_attacks, "prompt": analyze_prompt}
