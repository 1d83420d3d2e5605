"""Two protocol recipes on one split, paired: recipe A's mean over its seeds minus recipe B's, per agreement
column, for the student's replies as written and as decided, with a 95 % bootstrap interval.

Every seed of both recipes judged the same outputs, so one set of input resamples serves them all
(`agreement_resamples` draws them from the inputs and the seed): on each resample, each recipe's seeds are
averaged and B's mean is taken from A's. The interval is the percentile interval of those differences; an
interval that holds zero says the split cannot tell the recipes apart on that column. The decisions are fitted
on each run's dev judgments (the thresholds its results record), as the protocol reads them. No model runs: the
judgments are the kept ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from spanjudge.core.errors import InputError
from spanjudge.eval.distill.judgments import STUDENT_READ, archived, readings
from spanjudge.eval.distill.phases import held_out_documents
from spanjudge.eval.distill.study import StudySettings
from spanjudge.eval.spans.agreement import agreement_resamples, span_agreement
from spanjudge.eval.spans.decision_fit import AGREEMENT, decided_spans
from spanjudge.eval.spans.judging import predictions
from spanjudge.inference.decisions import DecisionRule

COLUMNS = (*AGREEMENT, "mpp_f1")
READINGS = ("written", "decided")


def recipe_seeds(runs: Mapping[str, Any], recipe: str, split: str, kept: Path) -> list[str]:
    """The protocol runs of `recipe` whose judgments of `split` are kept, by label."""
    labels = [label for label, run in runs.items()
              if run["settings"].get("protocol") and run["settings"].get("recipe") == recipe]  # fmt: skip
    found = [label for label in labels if STUDENT_READ in archived(kept, label, split)]
    if not found:
        raise InputError(f"recipe {recipe!r}: no run of it has kept {split} judgments under {kept}")
    return found


def _seed_predictions(label: str, settings: Mapping[str, Any], split: str, kept: Path) -> tuple[list[Any], dict]:
    """The split's outputs and, per reading, the student's spans on them (None: unscored)."""
    dev_tables, test_tables = settings["dev_tables"], settings["test_tables"]
    args = StudySettings(
        label=label, split=split, eval_domains=settings["eval_domains"],
        dev_tables=(dev_tables[0], dev_tables[1]), test_tables=(test_tables[0], test_tables[1]),
    )  # fmt: skip
    docs, _ = held_out_documents(args)
    payload = archived(kept, label, split)[STUDENT_READ]
    found = {"written": predictions(payload)}
    recorded = settings.get("decisions")
    if recorded is not None:  # the thresholds fitted on the run's dev judgments, as its results record them
        rule = DecisionRule(
            no_error_threshold=recorded["no_error_threshold"], min_confidence=recorded["min_confidence"]
        )
        found["decided"] = decided_spans(readings(payload), rule)
    return docs, found


def paired_recipes(
    runs: Mapping[str, Any], a: str, b: str, split: str, kept: Path, *, resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    """Recipe `a` minus recipe `b` on `split` (`runs`: distill_quintd.json's): per reading and column, each
    recipe's mean over its seeds, their difference and its 95 % interval over the shared input resamples."""
    seeds = {recipe: recipe_seeds(runs, recipe, split, kept) for recipe in (a, b)}
    per_recipe: dict[str, dict[str, Any]] = {}
    ids: set[str] | None = None
    for recipe, labels in seeds.items():
        for label in labels:
            docs, readings_of = _seed_predictions(label, runs[label]["settings"], split, kept)
            if ids is None:
                ids = {d.id for d in docs}
            elif ids != {d.id for d in docs}:
                raise InputError(f"{label}: its {split} outputs are not the other runs' (another split or domains)")
            for reading, spans in readings_of.items():
                entry = per_recipe.setdefault(recipe, {}).setdefault(reading, {"points": [], "resamples": []})
                entry["points"].append(span_agreement(docs, spans, n_resamples=1))
                entry["resamples"].append(agreement_resamples(docs, spans, n_resamples=resamples, seed=seed))
    found: dict[str, Any] = {"a": a, "b": b, "split": split, "seeds": seeds, "resamples": resamples, "seed": seed}
    for reading in READINGS:
        ours, theirs = per_recipe[a].get(reading), per_recipe[b].get(reading)
        if ours is None or theirs is None:
            continue
        found[reading] = {column: _difference(ours, theirs, column) for column in COLUMNS}
    return found


def _mean(values: list[float | None]) -> float | None:
    defined = [v for v in values if v is not None]
    return sum(defined) / len(defined) if defined else None


def _difference(ours: Mapping[str, Any], theirs: Mapping[str, Any], column: str) -> dict[str, float | None]:
    mean_a = _mean([p[column] for p in ours["points"]])
    mean_b = _mean([p[column] for p in theirs["points"]])
    with warnings.catch_warnings():  # a resample where no seed defines a column (all nan) is left out, unwarned
        warnings.simplefilter("ignore", RuntimeWarning)
        resampled_a = np.nanmean(np.stack([r[column] for r in ours["resamples"]]), axis=0)
        resampled_b = np.nanmean(np.stack([r[column] for r in theirs["resamples"]]), axis=0)
    differences = resampled_a - resampled_b
    differences = differences[~np.isnan(differences)]
    low, high = np.percentile(differences, [2.5, 97.5]) if differences.size else (None, None)
    return {
        "a": mean_a,
        "b": mean_b,
        "difference": None if mean_a is None or mean_b is None else mean_a - mean_b,
        "low": None if low is None else float(low),
        "high": None if high is None else float(high),
    }
