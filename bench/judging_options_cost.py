"""What probability-aware judging costs: evaluations/s of the same judge with each option.

    .venv/bin/python bench/judging_options_cost.py [--items 8] [--samples 3]

The judge is SmolLM2-135M-Instruct (the PyPI-shipped GGUF, dequantized, on the transformers
engine), held to the contract's grammar so that every reply parses (an untrained model writes
the format only under the grammar, and the options read only parsed replies). The items are
QAGS-XSum article/summary pairs; decoding is greedy with at most 160 new tokens (room for one
error block under the grammar), batch 8. Rows: plain; `probabilities=True` (one teacher-forced
pass over prompt + reply, then every choice's alternatives on a copy of its KV cache); and
`samples=N` (N more sampled generations). Evaluations/s = items / wall time of `judge.score`,
model loading excluded. Results: bench/results/judging_options_cost.{json,md}. Not a test.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from report_files import machine, write_report  # noqa: E402
from score_throughput import measure  # noqa: E402

from spanjudge.core.paths import data_dir  # noqa: E402
from spanjudge.inference.hf_models import convert_gguf  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402
from spanjudge.inference.shipped_models import smollm2_gguf  # noqa: E402
from tests.support.judge_records import qags_xsum_records  # noqa: E402

MAX_NEW_TOKENS = 160


def judge_with(options: dict[str, Any]) -> Judge:
    return Judge.from_pretrained(
        convert_gguf(smollm2_gguf()), constrained=True, max_new_tokens=MAX_NEW_TOKENS, batch_size=8, retries=0,
        **options,
    )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=8)
    parser.add_argument("--samples", type=int, default=3)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "judging_options_cost")
    args = parser.parse_args()
    items = qags_xsum_records(data_dir(), args.items, offset=16)
    variants = [("written (greedy)", {}), ("+ probabilities", {"probabilities": True}),
                (f"+ samples={args.samples}", {"samples": args.samples})]  # fmt: skip
    rows = []
    for name, options in variants:
        rows.append({"option": name, **measure(judge_with(options), items)})  # score_throughput's timing
        print(rows[-1], flush=True)
    plain = rows[0]["evaluations_per_s"]
    for row in rows:
        row["relative"] = round(row["evaluations_per_s"] / plain, 3)
    payload = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct (fp32, dequantized from the PyPI GGUF), transformers engine, contract grammar",
        "items": f"{args.items} QAGS-XSum article/summary pairs, greedy, max {MAX_NEW_TOKENS} new tokens, batch 8",
        "results": rows,
    }
    lines = [
        "# What the judging options cost (`bench/judging_options_cost.py`)",
        "",
        f"Machine: {payload['machine']}. Judge: {payload['model']}. Items: {payload['items']}. "
        "One run per row, all in the same invocation.",
        "",
        "| option | evaluations/s | × written | wall (s) | scored |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['option']} | {row['evaluations_per_s']:.3f} | {row['relative']:.2f} | {row['wall_s']} | "
            f"{row['scored']}/{row['items']} |"
        )
    write_report(args.out, payload, lines)


if __name__ == "__main__":
    main()
