"""Drafted decoding against the exact transformers judge, on the protocol's own runs (issue #67, "judging fast
enough to search"): the same student's judgments of one split written by the batched engine (`--student-engine
transformers`) and by drafted decoding (`--student-engine transformers-drafted`), both read with probabilities as
the protocol reads them, compared output by output, with each judging's wall time; or any faster judge of the same
student (bfloat16, replies written together) against the exact one.

A judge that is not the exact one (bfloat16's replies are its own) is held to stated tolerances on dev
(`TOLERANCES`, set on 2026-12-06 before the bfloat16 rows' judge had judged): where the two wrote the same reply,
its probabilities; and over all of dev, the protocol's own readings of the run: the pooled written F1s and
correlations, and the decided objective that the recipe search compares, the latter within half the spread of dev's
choice over its three seeds (0.274-0.335). A row lists what falls outside (`outside`).

The judgments are the protocol's kept ones (bench/results/distill_judgments/LABEL/SPLIT/student+probabilities.json.gz,
written by `bench/distill_protocol.sh`), its readings those of bench/results/distill_quintd.json; no model runs here.

    .venv/bin/python bench/drafted_judging.py --exact gemma3-mixed-cut-retrained-s42 \\
        --drafted gemma3-mixed-cut-drafted-s42 --split dev --note "..."   # a row of bench/results/drafted_judging.*
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import merge_labelled_row  # noqa: E402

JUDGMENTS = BENCH / "results" / "distill_judgments"
RESULTS = BENCH / "results" / "distill_quintd.json"
OUT = BENCH / "results" / "drafted_judging"
STUDENT = "student+probabilities.json.gz"
READ = ("p_no_error", "expected_errors", "expected_score")  # the reading's numbers per output
# the protocol's pooled readings of a run's written spans (bench/results/distill_quintd.json's `student` rows)
WRITTEN = ("overlap_f1", "token_f1", "count_pearson", "token_pearson")
# how far a faster judge may read from the exact one on dev: its probabilities where the replies are the same
# (the largest gap), each pooled written reading, and the decided objective (half of 0.274-0.335, dev's choice
# over its three seeds: an engine may move an arm less than a seed does)
TOLERANCES = {"p_no_error": 0.05, "span_written": 0.05, **dict.fromkeys(WRITTEN, 0.05), "objective": 0.03}


def kept(label: str, split: str) -> dict[str, Any]:
    path = JUDGMENTS / label / split / STUDENT
    if not path.is_file():
        sys.exit(f"drafted_judging: no kept judgments at {path}: run bench/distill_protocol.sh {label} first")
    return dict(json.loads(gzip.decompress(path.read_bytes())))


def readings(label: str, split: str) -> dict[str, float]:
    """The protocol's pooled readings of a run on `split`: its written spans' F1s and correlations (an undefined r
    counts 0, as in the objective) and, on dev, the decided objective of its fitted thresholds."""
    run = json.loads(RESULTS.read_text())["runs"].get(label)
    if run is None:
        sys.exit(f"drafted_judging: no run {label} in {RESULTS}")
    pooled = [r for r in run["rows"] if (r["judge"], r["split"], r["domain"]) == ("student", split, "pooled")]
    found = {key: float(pooled[0][key] or 0.0) for key in WRITTEN} if pooled else {}
    decisions = run["settings"].get("decisions")
    if split == "dev" and decisions:
        found["objective"] = float(decisions["fitted_on"]["value"])
    return found


def outside(row: dict[str, Any]) -> list[str]:
    """What of `row` reads further from the exact judge than `TOLERANCES` allows, one phrase each."""
    found = [
        f"{key} {row['gaps'][key]['max']:.3g} > {TOLERANCES[key]}"
        for key in ("p_no_error", "span_written")
        if row["gaps"].get(key) and row["gaps"][key]["max"] > TOLERANCES[key]
    ]
    found += [
        f"{key} {gap['gap']:.3g} > {TOLERANCES[key]}"
        for key, gap in row.get("readings", {}).items()
        if gap["gap"] > TOLERANCES[key]
    ]
    return found


def compare_readings(exact: dict[str, float], drafted: dict[str, float]) -> dict[str, dict[str, float]]:
    """Each reading both runs have: the exact judge's, the other's, and how far apart."""
    return {
        key: {
            "exact": round(exact[key], 4),
            "drafted": round(drafted[key], 4),
            "gap": round(abs(exact[key] - drafted[key]), 4),
        }
        for key in exact
        if key in drafted
    }


def compare(exact: dict[str, Any], drafted: dict[str, Any]) -> dict[str, Any]:
    """Output by output: the same reply, and where both were read, how far apart the readings are."""
    ids = sorted(set(exact["rows"]) & set(drafted["rows"]))
    same = [i for i in ids if exact["rows"][i].get("reply") == drafted["rows"][i].get("reply")]
    read = [i for i in same if exact["rows"][i].get("probabilities") and drafted["rows"][i].get("probabilities")]
    gaps: dict[str, list[float]] = {key: [] for key in (*READ, "span_written", "span_location")}
    for i in read:
        a, b = exact["rows"][i]["probabilities"], drafted["rows"][i]["probabilities"]
        for key in READ:
            gaps[key].append(abs(a[key] - b[key]))
        gaps["span_written"] += [abs(x - y) for x, y in zip(a["span_written"], b["span_written"], strict=True)]
        if "span_location" in a and "span_location" in b:  # judgments read before the locations have none
            for x, y in zip(a["span_location"], b["span_location"], strict=True):
                gaps["span_location"] += [abs(u - v) for u, v in zip(x, y, strict=True)]
    return {
        "outputs": len(ids),
        "same_reply": len(same),
        "read_both": len(read),
        "gaps": {
            key: {"median": statistics.median(values), "max": max(values)} if values else None
            for key, values in gaps.items()
        },
        "exact_wall_s": exact["wall_s"],
        "drafted_wall_s": drafted["wall_s"],
        "exact_s_per_output": round(exact["wall_s"] / len(exact["rows"]), 2),
        "drafted_s_per_output": round(drafted["wall_s"] / len(drafted["rows"]), 2),
        "speedup": round(exact["wall_s"] / drafted["wall_s"], 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--exact", required=True, help="the run judged by the exact judge")
    parser.add_argument(
        "--drafted", required=True, help="the same student's run judged by drafted decoding or another faster judge"
    )
    parser.add_argument("--split", nargs="+", default=["dev"], help="the splits compared")
    parser.add_argument("--note", default="", help="when each judging ran, and what else shared the machine")
    args = parser.parse_args()
    for split in args.split:
        merge_labelled_row(OUT, row(args.exact, args.drafted, split, args.note), markdown)


def row(exact: str, drafted: str, split: str, note: str) -> dict[str, Any]:
    """One report row: two runs of the same student on `split`, output by output and by the protocol's readings."""
    found = {
        "label": f"{exact} / {drafted} / {split}",
        "exact": exact,
        "drafted": drafted,
        "split": split,
        "note": note,
        **compare(kept(exact, split), kept(drafted, split)),
        "readings": compare_readings(readings(exact, split), readings(drafted, split)),
    }
    return {**found, "outside": outside(found)}


def _gap(row: dict[str, Any], key: str) -> str:
    g = row["gaps"].get(key)
    return "–" if g is None else f"{g['median']:.2g} / {g['max']:.2g}"


def markdown(where: str, rows: list[dict[str, Any]]) -> list[str]:
    return [
        "# Drafted decoding against the exact transformers judge (`bench/drafted_judging.py`)",
        "",
        f"Machine: {where}. A student's protocol judgments written by the batched engine (exact) and by drafted "
        "decoding, judging quintd-1 as the protocol judges (greedy, ≤ 320 new tokens, 1 sampled retry, probabilities "
        "read along each reply). Gaps: |exact − drafted| over the outputs with the same reply, median / max (location: "
        "the log-probabilities of each span's location tokens, where both runs read them). Wall: the protocol's "
        "judging wall time, as each run recorded it; one run each. Readings: the protocol's pooled readings of each "
        "run (bench/results/distill_quintd.json), the exact judge's / the other's: overlap F1, token F1, count r, "
        "token r of the written spans, and on dev the decided objective. Outside: what reads further apart than the "
        f"stated tolerances (largest gap where the replies are the same; readings' gaps): {_tolerances()}.",
        "",
        "| exact | drafted | split | outputs | same reply | read by both | P(no error) gap | expected errors gap "
        "| expected score gap | span confidence gap | location gap | exact s/output | drafted s/output | speed-up "
        "| readings | outside the tolerances | when, and what shared the machine |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|",
        *(
            f"| {r['exact']} | {r['drafted']} | {r['split']} | {r['outputs']} | {r['same_reply']} | {r['read_both']} "
            f"| {_gap(r, 'p_no_error')} | {_gap(r, 'expected_errors')} | {_gap(r, 'expected_score')} "
            f"| {_gap(r, 'span_written')} | {_gap(r, 'span_location')} | {r['exact_s_per_output']} "
            f"| {r['drafted_s_per_output']} | {r['speedup']}× | {_readings(r)} | {_outside(r)} "
            f"| {r['note']} |"
            for r in rows
        ),
    ]


def _tolerances() -> str:
    return ", ".join(f"{key} {value}" for key, value in TOLERANCES.items())


def _readings(row: dict[str, Any]) -> str:
    """The readings compared; '–' for a row recorded before they were (a run's kept judgments may have been judged
    again since, so an old row is left as recorded)."""
    return ", ".join(f"{g['exact']:.3f} / {g['drafted']:.3f}" for g in row.get("readings", {}).values()) or "–"


def _outside(row: dict[str, Any]) -> str:
    return "–" if "outside" not in row else "; ".join(row["outside"]) or "none"


if __name__ == "__main__":
    main()
