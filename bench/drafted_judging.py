"""Drafted decoding against the exact transformers judge, on the protocol's own runs (issue #67, "judging fast
enough to search"): the same student's judgments of one split written by the batched engine (`--student-engine
transformers`) and by drafted decoding (`--student-engine transformers-drafted`), both read with probabilities as
the protocol reads them, compared output by output, with each judging's wall time.

The judgments are the protocol's kept ones (bench/results/distill_judgments/LABEL/SPLIT/student+probabilities.json.gz,
written by `bench/distill_protocol.sh`); no model runs here.

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
OUT = BENCH / "results" / "drafted_judging"
STUDENT = "student+probabilities.json.gz"
READ = ("p_no_error", "expected_errors", "expected_score")  # the reading's numbers per output


def kept(label: str, split: str) -> dict[str, Any]:
    path = JUDGMENTS / label / split / STUDENT
    if not path.is_file():
        sys.exit(f"drafted_judging: no kept judgments at {path}: run bench/distill_protocol.sh {label} first")
    return dict(json.loads(gzip.decompress(path.read_bytes())))


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
    parser.add_argument("--exact", required=True, help="the run judged by the batched engine")
    parser.add_argument("--drafted", required=True, help="the same student's run judged by drafted decoding")
    parser.add_argument("--split", nargs="+", default=["dev"], help="the splits compared")
    parser.add_argument("--note", default="", help="when each judging ran, and what else shared the machine")
    args = parser.parse_args()
    for split in args.split:
        row = {
            "label": f"{args.exact} / {args.drafted} / {split}",
            "exact": args.exact,
            "drafted": args.drafted,
            "split": split,
            "note": args.note,
            **compare(kept(args.exact, split), kept(args.drafted, split)),
        }
        merge_labelled_row(OUT, row, markdown)


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
        "judging wall time, as each run recorded it; one run each.",
        "",
        "| exact | drafted | split | outputs | same reply | read by both | P(no error) gap | expected errors gap "
        "| expected score gap | span confidence gap | location gap | exact s/output | drafted s/output | speed-up "
        "| when, and what shared the machine |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
        *(
            f"| {r['exact']} | {r['drafted']} | {r['split']} | {r['outputs']} | {r['same_reply']} | {r['read_both']} "
            f"| {_gap(r, 'p_no_error')} | {_gap(r, 'expected_errors')} | {_gap(r, 'expected_score')} "
            f"| {_gap(r, 'span_written')} | {_gap(r, 'span_location')} | {r['exact_s_per_output']} "
            f"| {r['drafted_s_per_output']} | {r['speedup']}× | {r['note']} |"
            for r in rows
        ),
    ]


if __name__ == "__main__":
    main()
