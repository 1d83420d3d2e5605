"""Dev's choice of recipe and reading, and the bar the chosen recipe is read against on the test split; with the
numbers over seeds they are stated in (`seed_stats`, `rounded`)."""

from __future__ import annotations

from typing import Any

from spanjudge.eval.spans.decision_fit import AGREEMENT, OBJECTIVE


def seed_stats(values: list[float | None]) -> dict[str, Any]:
    """Mean, lowest and highest over seeds (all None when a seed has none). Kept to 6 places, so that a table's
    3 places round the value once (0.338456 stored as 0.3385 would show as 0.339)."""
    present = [v for v in values if v is not None]
    if not values or len(present) < len(values):
        return {"mean": None, "min": None, "max": None}
    return {"mean": round(sum(present) / len(present), 6), "min": round(min(present), 6), "max": round(max(present), 6)}


def spread(stats: dict[str, Any], digits: int = 3) -> str:
    """A table cell of `seed_stats`: 'mean [lowest, highest]', '–' when a seed has none."""
    if stats["mean"] is None:
        return "–"
    return f"{stats['mean']:.{digits}f} [{stats['min']:.{digits}f}, {stats['max']:.{digits}f}]"


def rounded(value: object) -> str:
    """A table cell: '–' for a missing value, a float to 3 places, a count as it is."""
    if value is None:
        return "–"
    return f"{value:.3f}" if isinstance(value, float) else str(value)


RANKS = 0.70  # the span confidence's dev AUC that issue #67 asks for
CHOICE_SEEDS = 3  # a recipe is one of dev's candidates once this many of its seeds have fitted decisions


def domains_given_up(rows: list[dict[str, Any]]) -> list[str]:
    """The dev domains whose every scored output the decided reading calls "No Error" where the humans mark
    errors in some: the pooled fit can buy its objective so (issue #67: a domain with few errors sorted apart
    raises the pooled count r), and such a reading fails that domain's span measures by construction."""
    return [
        r["domain"] for r in rows
        if (r["judge"], r["split"]) == ("student·decided", "dev") and r["domain"] != "pooled" and r["scored"]
        and r.get("no_error_outputs") == r["scored"] and (r.get("human_no_error_outputs") or 0) < r["scored"]
    ]  # fmt: skip


def dev_choice(runs: dict[str, Any]) -> dict[str, Any]:
    """Dev's choice of recipe and reading (issue #49), made by the decision fit's own objective
    (`decision_fit.OBJECTIVE`, on the pooled dev outputs): among the protocol recipes with at least
    `CHOICE_SEEDS` seeds whose dev judgments have fitted decisions, and none of whose seeds' decided readings
    gives a domain up (`domains_given_up`, issue #67), the highest mean over seeds of the decided objective; read
    `+decided` where that mean is above the written replies'. No choice with fewer than two candidates. `apart`:
    every seed of the chosen recipe lies above every seed of the others (otherwise the choice is within the
    training seeds' spread)."""
    seeds: dict[str, list[dict[str, Any]]] = {}
    for run in runs.values():
        s = run["settings"]
        fit = (s.get("decisions") or {}).get("fitted_on")
        if s.get("protocol") and fit and fit.get("value") is not None:
            rule = s["decisions"]
            seeds.setdefault(s["recipe"], []).append(
                {"seed": s["train_seed"], "decided": fit["value"], "written": fit["written_value"],
                 "no_error_threshold": rule["no_error_threshold"], "min_confidence": rule["min_confidence"],
                 "given_up": domains_given_up(run["rows"])}
            )  # fmt: skip
    candidates: list[dict[str, Any]] = [
        {"recipe": recipe, "seeds": found, **{k: seed_stats([f[k] for f in found]) for k in ("decided", "written")}}
        for recipe, found in seeds.items()
    ]
    candidates.sort(key=lambda c: -c["decided"]["mean"])
    ready = [c for c in candidates
             if len(c["seeds"]) >= CHOICE_SEEDS and not any(f["given_up"] for f in c["seeds"])]  # fmt: skip
    choice: dict[str, Any] = {"objective": OBJECTIVE, "candidates": candidates, "chosen": None}
    if len(ready) >= 2:
        best = ready[0]
        choice["chosen"] = best["recipe"]
        choice["reading"] = "decided" if best["decided"]["mean"] > best["written"]["mean"] else "written"
        choice["apart"] = all(best["decided"]["min"] > other["decided"]["max"] for other in ready[1:])
    return choice


def choice_lines(choice: dict[str, Any]) -> list[str]:
    """The report's account of dev's choice: each candidate's objective over its seeds and its thresholds."""
    if not choice["candidates"]:
        return []
    lines = [
        "",
        "### What dev chose",
        "",
        f"By the decision fit's objective, the {choice['objective']}, on the pooled dev outputs: mean [lowest, "
        f"highest] over seeds. A recipe is a candidate with {CHOICE_SEEDS} seeds, unless a seed's decided reading "
        "gives a domain up: calls every dev output of it 'No Error' where the humans mark errors in some (issue "
        "#67). On dev, the decided reading is the fit's own outputs.",
        "",
        "| recipe | seeds | objective, decided | objective, written | thresholds per seed (τ₀ / τ; – the written "
        "reply's) | domains given up |",
        "|---|---|---:|---:|---|---|",
    ]
    for c in choice["candidates"]:
        stats = [spread(c[k]) for k in ("decided", "written")]
        thresholds = ", ".join(
            f"{f['seed']}: {rounded(f['no_error_threshold'])} / {rounded(f['min_confidence'])}" for f in c["seeds"]
        )
        seeds = ", ".join(str(f["seed"]) for f in c["seeds"])
        given_up = ", ".join(f"{f['seed']}: {', '.join(f['given_up'])}" for f in c["seeds"] if f["given_up"]) or "–"
        lines.append(f"| {c['recipe']} | {seeds} | {' | '.join(stats)} | {thresholds} | {given_up} |")
    chosen = choice["chosen"]
    if chosen is None:
        waiting = ", ".join(f"{c['recipe']} ({len(c['seeds'])})" for c in choice["candidates"])
        return [
            *lines,
            "",
            f"No choice yet: it needs two recipes with {CHOICE_SEEDS} seeds each, none giving a domain "
            f"up; so far {waiting}.",
        ]
    apart = (
        "every seed of it lies above every seed of the others"
        if choice["apart"]
        else "the seeds' ranges overlap, so the choice is within the training seeds' spread"
    )
    return [
        *lines,
        "",
        f"**Dev chooses `{chosen}`, read {choice['reading']}** (each seed with its own thresholds above); {apart}. "
        "The test split is judged with these values only.",
    ]


def _no_error_rate(entry: dict[str, Any]) -> tuple[float, float] | None:
    """The judge's and the humans' share of outputs with no error (per seed: asked / seeds outputs)."""
    if entry["no_error_outputs"] is None or entry["human_no_error_outputs"] is None:
        return None
    outputs = entry["asked"] / len(entry["seeds"])
    return entry["no_error_outputs"] / outputs, entry["human_no_error_outputs"] / outputs


def bar_checks(entries: list[dict[str, Any]], choice: dict[str, Any]) -> dict[str, Any] | None:
    """Issues #49's and #67's bar for the chosen recipe on the test split, mean over its seeds: every agreement column
    at least half of the teacher's and count r at least the number baseline's, pooled and in wikidata; the 'No
    Error' rate within 10 points of the humans'; span-confidence ECE at most 0.05 (#49) and, on dev, its AUC at
    least 0.70 (#67). One check each: what, target, value, met (None where the value is undefined or not yet
    measured), under `checks`, and the seeds judged on test under `seeds`. None until dev has chosen and the test
    split is judged."""
    if choice["chosen"] is None:
        return None
    suffix = "+decided" if choice["reading"] == "decided" else ""

    def entry(recipe: str, domain: str, split: str = "test") -> dict[str, Any] | None:
        return next((e for e in entries if (e["recipe"], e["split"], e["domain"]) == (recipe, split, domain)), None)

    read, written = entry(choice["chosen"] + suffix, "pooled"), entry(choice["chosen"], "pooled")
    if read is None:
        return None
    checks = []
    for domain in ("pooled", "wikidata"):
        found = entry(choice["chosen"] + suffix, domain)
        for column in AGREEMENT:
            value = None if found is None else found["mean"][column]
            teacher = None if found is None else found["teacher"][column]
            half = None if teacher is None else teacher / 2
            met = None if value is None or half is None else value >= half
            checks.append({"what": f"{column} ({domain}) ≥ half the teacher's", "target": half, "value": value,
                           "met": met})  # fmt: skip
        value = None if found is None else found["mean"]["count_pearson"]
        baseline = None if found is None else found["number_baseline"]["count_pearson"]
        met = None if value is None or baseline is None else value >= baseline
        checks.append({"what": f"count_pearson ({domain}) ≥ the number baseline's", "target": baseline,
                       "value": value, "met": met})  # fmt: skip
    rates = _no_error_rate(read)
    checks.append({
        "what": "'No Error' rate within 0.10 of the humans' (pooled)",
        "target": None if rates is None else rates[1],
        "value": None if rates is None else rates[0],
        "met": None if rates is None else abs(rates[0] - rates[1]) <= 0.10 + 1e-9,
    })  # fmt: skip
    ece = None if written is None or "calibration" not in written else written["calibration"]["span_confidence"]
    value = None if ece is None else ece["mean"]
    checks.append({"what": "span-confidence ECE ≤ 0.05 (pooled)", "target": 0.05, "value": value,
                   "met": None if value is None else value <= 0.05})  # fmt: skip
    dev = entry(choice["chosen"], "pooled", "dev") or {}
    value = dev.get("span_confidence_auc", {}).get("mean")
    checks.append({"what": f"span-confidence AUC ≥ {RANKS:.2f} (dev, pooled)", "target": RANKS, "value": value,
                   "met": None if value is None else value >= RANKS})  # fmt: skip
    return {"seeds": read["seeds"], "checks": checks}


def bar_lines(bar: dict[str, Any] | None, choice: dict[str, Any]) -> list[str]:
    if bar is None:
        return []
    checks = bar["checks"]
    met = sum(c["met"] is True for c in checks)
    lines = [
        "",
        f"### The bar on the test split (issues #49 and #67): `{choice['chosen']}`, read {choice['reading']}",
        "",
        f"Mean over seeds {', '.join(map(str, bar['seeds']))}; {met} of {len(checks)} checks met.",
        "",
        "| check | target | measured | met |",
        "|---|---:|---:|---|",
    ]
    for c in checks:
        verdict = "–" if c["met"] is None else "yes" if c["met"] else "no"
        lines.append(f"| {c['what']} | {rounded(c['target'])} | {rounded(c['value'])} | {verdict} |")
    return lines
