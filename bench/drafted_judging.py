"""Drafted decoding against the exact transformers judge, on the protocol's own runs (issue #67, "judging fast
enough to search"): the same student's judgments of one split written by the batched engine (`--student-engine
transformers`) and by drafted decoding (`--student-engine transformers-drafted`), both read with probabilities as
the protocol reads them, compared output by output, with each judging's wall time.

The judgments are the protocol's kept ones (bench/results/distill_judgments/LABEL/SPLIT/student+probabilities.json.gz,
written by `bench/distill_protocol.sh`); no model runs here.

    .venv/bin/python bench/drafted_judging.py --exact gemma3-mixed-cut-s42 --drafted gemma3-mixed-cut-drafted-s42 \\
        --split dev                                  # → bench/results/drafted_judging.{json,md}
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

from report_files import machine, write_report  # noqa: E402

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
    gaps: dict[str, list[float]] = {key: [] for key in (*READ, "span_written")}
    for i in read:
        a, b = exact["rows"][i]["probabilities"], drafted["rows"][i]["probabilities"]
        for key in READ:
            gaps[key].append(abs(a[key] - b[key]))
        gaps["span_written"] += [abs(x - y) for x, y in zip(a["span_written"], b["span_written"], strict=True)]
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
    parser.add_argument("--note", default="", help="what else shared the machine, where each judging ran")
    args = parser.parse_args()
    rows = [{"split": split, **compare(kept(args.exact, split), kept(args.drafted, split))} for split in args.split]
    for row in rows:
        print(row, flush=True)

    def gap(row: dict[str, Any], key: str) -> str:
        g = row["gaps"][key]
        return "–" if g is None else f"{g['median']:.2g} / {g['max']:.2g}"

    lines = [
        "# Drafted decoding against the exact transformers judge (`bench/drafted_judging.py`)",
        "",
        f"Machine: {machine()}. `{args.exact}` (batched engine) against `{args.drafted}` (drafted decoding), the "
        "same student, judging "
        "quintd-1 as the protocol judges (greedy, ≤ 320 new tokens, 1 sampled retry, probabilities read along each "
        "reply). Gaps: |exact − drafted| over the outputs with the same reply, median / max. Wall: the protocol's "
        f"judging wall time, as each run recorded it. {args.note}".rstrip(),
        "",
        "| split | outputs | same reply | read by both | P(no error) gap | expected errors gap | expected score gap "
        "| span confidence gap | exact s/output | drafted s/output | speed-up |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *(
            f"| {r['split']} | {r['outputs']} | {r['same_reply']} | {r['read_both']} | {gap(r, 'p_no_error')} | "
            f"{gap(r, 'expected_errors')} | {gap(r, 'expected_score')} | {gap(r, 'span_written')} | "
            f"{r['exact_s_per_output']} | {r['drafted_s_per_output']} | {r['speedup']}× |"
            for r in rows
        ),
    ]
    write_report(OUT, {"machine": machine(), "exact": args.exact, "drafted": args.drafted, "rows": rows}, lines)


if __name__ == "__main__":
    main()
