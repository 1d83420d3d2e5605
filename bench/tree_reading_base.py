"""The tree reading against the batched one on a base model, reading a fixed reply: what the reading costs per
architecture, with no judge to train (Gemma 3 270M's sliding window reads a masked row per choice, SmolLM2 one
row for every choice).

    .venv/bin/python bench/tree_reading_base.py [--model @gemma3] [--tables 70 71] [--domains wikidata owid]

The prompt is each quintd-1 output of the tables with its data, as plain text; the reply read after it is a fixed
two-error evaluation (its spans need not be in the output: only the cost and the agreement are read). Each reading
is timed alone; the first output of each domain is the warm-up, left out of the median. Results go to
bench/results/tree_reading_base.{json,md} under the model's name (a rerun replaces its rows). Run it alone: two
CPU-heavy jobs on 2 cores distort each other. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model here is local

from report_files import machine, write_report  # noqa: E402

from spanjudge.core.errors import SpanjudgeError  # noqa: E402
from spanjudge.eval.spans.quintd import quintd_tables  # noqa: E402
from spanjudge.inference.backends.transformers_reader import ProbabilityReader  # noqa: E402
from spanjudge.inference.contract import Evaluation, parse_judge  # noqa: E402
from spanjudge.inference.hf_models import local_folder, resolve_model_source  # noqa: E402

REPLY = (
    "Error 1:\nLocation: the first value\nExplanation: The data gives another value.\nSeverity: 3\n\n"
    "Error 2:\nLocation: the name\nExplanation: Not in the data.\nSeverity: 1\n\nOverall score: 40"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="@gemma3", help="a model: @gemma3, @smollm2, a folder or a GGUF file")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 71), metavar=("FIRST", "STOP"))
    parser.add_argument("--domains", nargs="+", default=["wikidata", "ice_hockey", "owid"])
    parser.add_argument("--out", type=Path, default=BENCH / "results" / "tree_reading_base")
    args = parser.parse_args()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        folder = local_folder(resolve_model_source(args.model))
    except SpanjudgeError as error:
        parser.error(f"--model {args.model}: {error}")
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    end = {tokenizer.eos_token_id}
    evaluation = parse_judge(REPLY)
    assert isinstance(evaluation, Evaluation)
    rows = []
    for domain in args.domains:
        docs = quintd_tables("human", tuple(args.tables), [domain])
        if len(docs) < 2:
            parser.error(f"quintd-1 has fewer than 2 outputs of those tables in {domain}")
        spent: dict[str, list[float]] = {"tree": [], "batched": []}
        readings: dict[str, list[list[float]]] = {"tree": [], "batched": []}
        lengths = []
        for doc in docs:
            prompt = tokenizer(f"Data:\n{next(iter(doc.inputs.values()))}\n\nOutput:\n{doc.output}\n\n")["input_ids"]
            lengths.append(len(prompt))
            for name, tree in (("tree", True), ("batched", False)):
                reader = ProbabilityReader(model, tokenizer, end, tree=tree)
                started = time.perf_counter()
                read = reader.read(prompt, evaluation)
                spent[name].append(time.perf_counter() - started)
                readings[name].append([read.expected_errors, read.expected_score])
        gaps = [
            abs(a - b)
            for t, b_ in zip(readings["tree"], readings["batched"], strict=True)
            for a, b in zip(t, b_, strict=True)
        ]
        rows.append({
            "domain": domain, "outputs": len(docs), "median_prompt_tokens": statistics.median(lengths),
            "median_s": {name: round(statistics.median(times[1:]), 3) for name, times in spent.items()},
            "largest_gap": max(gaps),
        })  # fmt: skip
        rows[-1]["speedup"] = round(rows[-1]["median_s"]["batched"] / rows[-1]["median_s"]["tree"], 2)
        print(json.dumps(rows[-1]), flush=True)
    old = json.loads(args.out.with_suffix(".json").read_text()) if args.out.with_suffix(".json").is_file() else {}
    kept = [row for row in old.get("results", []) if row["model"] != args.model]
    payload = {"machine": machine(), "reply": REPLY, "results": kept + [{"model": args.model, **r} for r in rows]}
    lines = [
        "# The tree reading against the batched one on base models (`bench/tree_reading_base.py`)",
        "",
        f"Machine: {payload['machine']}. Float32. Items: every system's output of quintd-1 tables "
        f"{args.tables[0]}–{args.tables[1] - 1}, per domain, as plain-text prompts; the reply read: a fixed two-error "
        "evaluation. Seconds per reading, median over each domain's outputs after the first (the warm-up); gap: the "
        "largest |tree − batched| of expected errors and expected score.",
        "",
        "| model | domain | outputs | prompt tokens (median) | tree s | batched s | batched / tree | gap |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in payload["results"]:
        lines.append(
            f"| {row['model']} | {row['domain']} | {row['outputs']} | {row['median_prompt_tokens']:.0f} | "
            f"{row['median_s']['tree']} | {row['median_s']['batched']} | {row['speedup']} | {row['largest_gap']:.1e} |"
        )
    write_report(args.out, payload, lines)


if __name__ == "__main__":
    main()
