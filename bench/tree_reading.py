"""What reading the judge's probabilities costs on the transformers engine: the alternatives in one masked row
after the prompt's KV cache (the tree reading, by default where the attention takes a mask) against a batch of
copies of that cache (the batched reading, what a sliding window needs).

    .venv/bin/python bench/tree_reading.py --judge ADAPTER [--tables 70 71] [--domains wikidata ice_hockey owid]

ADAPTER is a transformers judge (a LoRA adapter folder, e.g. the CPU smoke judge of
configs/train/smollm2_cpu_smoke.yaml). The items are every system's output of the given quintd-1 tables
(default: table 70, of the dev split), per domain, judged greedily with the contract's grammar (at most 320 new
tokens, no retry). Each domain is judged once per reading on a fresh judge; each reading's wall time is timed
around the reader alone (its generation excluded), and the first output of each domain is the warm-up, left out
of the median. Results go to bench/results/tree_reading.{json,md}, with each output's expected errors and
expected score under both readings. Run it alone: two CPU-heavy jobs on 2 cores distort each other. Not a test.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model here is local

from report_files import machine, write_report  # noqa: E402

from spanjudge.eval.spans.judging import QUINTD_ASPECT, QUINTD_TASK  # noqa: E402
from spanjudge.eval.spans.quintd import quintd_tables  # noqa: E402
from spanjudge.inference.backends import transformers_reader  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402

READINGS = {"tree": True, "batched": False}


def judge_domain(adapter: Path, docs: list[Any], tree: bool) -> tuple[list[float], list[Any]]:
    """The reader's wall seconds per output, and the results, of one reading over the domain's outputs."""
    spent: list[float] = []
    original = transformers_reader.ProbabilityReader

    class Timed(original):  # type: ignore[misc,valid-type]
        def read(self, prompt_ids: Any, evaluation: Any) -> Any:
            started = time.perf_counter()
            try:
                return super().read(prompt_ids, evaluation)
            finally:
                spent.append(time.perf_counter() - started)

    transformers_reader.ProbabilityReader = functools.partial(Timed, tree=tree)  # type: ignore[misc]
    judge = Judge.from_pretrained(adapter, probabilities=True, constrained=True, max_new_tokens=320, retries=0)
    try:
        header = judge.catalog.task(QUINTD_TASK).inputs[0].header
        requests = [
            judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(d.inputs.values()))}, d.output, id=d.id)
            for d in docs
        ]
        return spent, judge.score(requests)
    finally:
        transformers_reader.ProbabilityReader = original  # type: ignore[misc]
        judge.close()


def report_lines(payload: dict[str, Any]) -> list[str]:
    """The markdown report of a payload."""
    lines = [
        "# Reading the judge's probabilities on transformers: one masked row or a batch of cache copies "
        "(`bench/tree_reading.py`)",
        "",
        f"Machine: {payload['machine']}. Judge: `{payload['judge']}` (transformers, float32). "
        f"Items: {payload['items']}. Seconds of the reader per output, median over each domain's outputs after "
        "the first (the warm-up); gaps: the largest |tree − batched| over the outputs both read.",
        "",
        "| domain | outputs | read (tree / batched) | tree s/output | batched s/output | batched / tree | "
        "expected errors gap | expected score gap |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in payload["results"]:
        median = row["median_s"]
        gaps = [
            f"{gap:.1e}" if gap is not None else "n/a"
            for gap in (row["expected_errors_gap"], row["expected_score_gap"])
        ]
        lines.append(
            f"| {row['domain']} | {row['outputs']} | {row['read']['tree']} / {row['read']['batched']} | "
            f"{median.get('tree', 'n/a')} | {median.get('batched', 'n/a')} | {row['speedup'] or 'n/a'} | "
            f"{gaps[0]} | {gaps[1]} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--judge", type=Path, required=True, help="a transformers judge's adapter folder")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 71), metavar=("FIRST", "STOP"))
    parser.add_argument("--domains", nargs="+", default=["wikidata", "ice_hockey", "owid"])
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "tree_reading")
    args = parser.parse_args()
    if not (args.judge / "adapter_config.json").is_file():
        parser.error(f"--judge {args.judge}: no adapter_config.json there (a LoRA adapter folder)")
    first, stop = args.tables
    tables = f"table {first}" if stop - first == 1 else f"tables {first}-{stop - 1}"
    rows = []
    for domain in args.domains:
        docs = quintd_tables("human", (first, stop), [domain])
        if len(docs) < 2:
            parser.error(f"quintd-1 has fewer than 2 outputs of {tables} in {domain}: nothing left after the warm-up")
        found = {name: judge_domain(args.judge, docs, tree) for name, tree in READINGS.items()}
        readings = {
            name: {
                r.id: [r.probabilities.expected_errors, r.probabilities.expected_score]
                for r in results
                if r.probabilities is not None
            }
            for name, (_, results) in found.items()
        }
        shared = readings["tree"].keys() & readings["batched"].keys()
        gaps = [[abs(a - b) for a, b in zip(readings["tree"][k], readings["batched"][k], strict=True)] for k in shared]
        medians = {name: statistics.median(spent[1:]) for name, (spent, _) in found.items() if len(spent) > 1}
        rows.append({
            "domain": domain, "outputs": len(docs), "read": {name: len(spent) for name, (spent, _) in found.items()},
            "median_s": {name: round(seconds, 3) for name, seconds in medians.items()},
            "speedup": round(medians["batched"] / medians["tree"], 2) if len(medians) == 2 else None,
            "expected_errors_gap": max((g[0] for g in gaps), default=None),
            "expected_score_gap": max((g[1] for g in gaps), default=None),
            "readings": readings,
        })  # fmt: skip
    payload = {
        "machine": machine(),
        "judge": f"{args.judge.parent.name}/{args.judge.name}",
        "items": f"every system's output of quintd-1 {tables}, per domain",
        "results": rows,
    }
    write_report(args.out, payload, report_lines(payload))


if __name__ == "__main__":
    main()
