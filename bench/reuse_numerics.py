"""Does prefix reuse change a greedy reply? Per dtype, the transformers engine's replies with and
without reuse, beside the same engine's replies at another batch size (the noise floor every
batched run already has).

    .venv/bin/python bench/reuse_numerics.py --adapter runs/.../student/adapter     # a trained judge
    .venv/bin/python bench/reuse_numerics.py --random-tiny                          # Llama 3.1's shape, tiny
    .venv/bin/python bench/reuse_numerics.py --adapter DIR --dtypes --llama-server $(bench/build_llama_server.sh)

Prefix reuse is exact arithmetic: the prefix's keys and values are those a full pass computes.
But the prefix is read in a pass of its own, so its matrix products have other shapes, and in
bfloat16 their rounding differs; where two tokens are nearly tied that flips a greedy choice.
This measures how often it does, for a trained judge and for random weights (the worst case:
every token nearly tied). Workloads are judge_throughput's (SummEval's 16 outputs per article,
quintd-1's 4 per table, one meta-eval step). With `--llama-server`, upstream llama-server too (the
judge's Q4_1 GGUF and GGUF LoRA, one slot, a fresh server per row): its prompt cache (`cache_prompt`,
its default) against `cache_prompt: false`. Results: bench/results/reuse_numerics[_cuda].{json,md}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from judge_throughput import gguf_lora, judged, served_judge, workloads  # noqa: E402
from report_files import machine, write_report  # noqa: E402

from spanjudge.inference.judge import Judge  # noqa: E402

MAX_NEW_TOKENS = 128  # judge_throughput's, whose judges (served_judge) this shares
RUNS = ((16, False), (8, False), (16, True))  # (batch, reuse): the reference, the noise floor, reuse


def random_tiny_judge(folder: Path, device: str) -> Path:
    """A randomly initialised model of Llama 3.1's architecture at the tiny shape (bench/gpu/run.py's)."""
    sys.path.insert(0, str(REPO / "bench" / "gpu"))
    from run import build_model, llama3_tokenizer

    build_model(folder, "tiny", device, llama3_tokenizer())
    return folder


def _common_length(a: str, b: str) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))


def compare(reference: list[str], other: list[str]) -> dict[str, Any]:
    shared = [_common_length(a, b) for a, b in zip(reference, other, strict=True)]
    changed = [length for length, a, b in zip(shared, reference, other, strict=True) if a != b]
    return {
        "identical": sum(a == b for a, b in zip(reference, other, strict=True)),
        "of": len(reference),
        # where a changed reply leaves the reference (characters in): early means a different evaluation
        "changed_after_chars_median": statistics.median(changed) if changed else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--adapter", type=Path, help="a trained judge (a spanjudge adapter folder)")
    source.add_argument("--random-tiny", action="store_true", help="a random model of Llama 3.1's shape, tiny")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtypes", nargs="*", default=["float32", "bfloat16"], help="transformers' (none: skip)")
    parser.add_argument("--llama-server", type=Path, help="upstream llama-server: its rows too (needs --adapter)")
    parser.add_argument("--workloads", nargs="+", default=["summeval16", "quintd4", "metaeval"])
    parser.add_argument("--out", type=Path, help="default: bench/results/reuse_numerics[_cuda]")
    args = parser.parse_args()
    if args.llama_server and not args.adapter:
        parser.error("--llama-server serves a trained judge's GGUF LoRA: give --adapter, not --random-tiny")
    if args.llama_server and not os.access(args.llama_server, os.X_OK):
        parser.error(f"--llama-server {args.llama_server}: not an executable (build one: bench/build_llama_server.sh)")
    if not args.dtypes and not args.llama_server:
        parser.error("nothing to measure: give --dtypes, --llama-server or both")
    out = args.out or REPO / "bench" / "results" / ("reuse_numerics" + ("_cuda" if args.device == "cuda" else ""))
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        judge_path = args.adapter or random_tiny_judge(Path(scratch) / "model", args.device)
        probe = Judge.from_pretrained(judge_path, retries=0)
        work = {name: requests for name, requests in workloads(probe, 2, 4).items() if name in args.workloads}
        probe.close()
        for dtype in args.dtypes:
            for name, requests in work.items():
                got = {
                    (batch, reuse): judged(
                        lambda stack, batch=batch, reuse=reuse, dtype=dtype: Judge.from_pretrained(
                            judge_path, batch_size=batch, reuse_prefix=reuse, retries=0,
                            max_new_tokens=MAX_NEW_TOKENS, dtype=dtype,
                        ),
                        requests,
                    )
                    for batch, reuse in RUNS
                }  # fmt: skip
                reference = got[RUNS[0]][1]
                for (batch, reuse), (wall, written, _) in got.items():
                    rows.append({"dtype": dtype, "workload": name, "batch": batch, "reuse": reuse,
                                 "wall_s": round(wall, 2), **compare(reference, written)})  # fmt: skip
                    print(rows[-1], flush=True)
        if args.llama_server:
            lora = gguf_lora(args.adapter, Path(scratch) / "lora.gguf")
            for name, requests in work.items():
                served = {
                    reuse: judged(
                        lambda stack, reuse=reuse: served_judge(stack, args.llama_server, args.adapter, lora, reuse),
                        requests,
                    )
                    for reuse in (False, True)
                }
                for reuse, (wall, written, _) in served.items():
                    rows.append({"dtype": "Q4_1 GGUF (llama-server)", "workload": name, "batch": 1, "reuse": reuse,
                                 "wall_s": round(wall, 2), **compare(served[False][1], written)})  # fmt: skip
                    print(rows[-1], flush=True)
    payload = {
        "machine": machine() if args.device == "cpu" else args.device,
        "judge": "random-tiny" if args.random_tiny else str(args.adapter),
        "max_new_tokens": MAX_NEW_TOKENS,
        "rows": rows,
    }
    lines = [
        "# Does prefix reuse change a greedy reply? (`bench/reuse_numerics.py`)",
        "",
        f"Machine: {payload['machine']}. Judge: {payload['judge']}. Greedy, at most {MAX_NEW_TOKENS} new tokens. "
        "Transformers rows: each against batch 16 without reuse; llama-server rows: against the same server "
        "without its prompt cache.",
        "",
        "| dtype | workload | batch | reuse | identical replies | a changed reply leaves at (chars, median) |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in rows:
        if not r["reuse"] and r["batch"] in (1, RUNS[0][0]):  # a reference row: identical to itself
            continue
        at = "–" if r["changed_after_chars_median"] is None else f"{r['changed_after_chars_median']:.0f}"
        lines.append(f"| {r['dtype']} | {r['workload']} | {r['batch']} | {'on' if r['reuse'] else 'off'} | "
                     f"{r['identical']}/{r['of']} | {at} |")  # fmt: skip
    write_report(out, payload, lines)


if __name__ == "__main__":
    main()
