"""How fast a Gemma 3 student of the distillation protocol judges with its probabilities, per engine, and how close
each reading is to the kept judgments of the protocol's transformers reader (issue #67: fast judging).

    .venv/bin/python bench/gemma_judging_speed.py --label NAME --engine transformers|llamacpp \
        [--run runs/bench/distill_quintd/gemma3-vote-cut-s1] [--tables 70 72] [--threads 2]
    .venv/bin/python bench/gemma_judging_speed.py --label NAME --kept LABEL --run RUN  # no model: two kept readings

The judge is the run's trained adapter, judging as the protocol does (greedy, at most 320 new tokens, one retry,
a 4,096-token context, `probabilities=True`):
- `transformers`: the dequantized base with the PEFT adapter in this process (the protocol's engine);
- `llamacpp`: the PyPI Q4_K_M GGUF with the adapter exported as a GGUF LoRA (`adapter_to_gguf`), in process.
The items are every system's output of the given quintd-1 dev tables of wikidata, ice_hockey and owid. The
reference is the same student's dev judgments that the protocol kept (`bench/results/distill_judgments/
LABEL/dev/student+probabilities.json.gz`, the transformers reader at the commit that judged them). Per row: the
wall time of `Judge.score` (loading excluded), seconds per output, the replies identical to the reference's, and
how far the reading is from it: P(no error), each written span's confidence (the probability of writing at least
that many errors), expected errors and expected score (medians and maxima of the absolute differences, over the
outputs whose replies are identical). `--kept LABEL` runs no model: it reads the dev judgments another protocol run
kept (all of dev, 120 outputs) as the row, against --run's, and refuses two readings of different adapters. Rows
merge into bench/results/gemma_judging_speed.{json,md} under --label (a rerun replaces its label). Run it alone:
two CPU-heavy jobs on 2 cores distort each other. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model here is local

from report_files import merge_labelled_row  # noqa: E402

from spanjudge.eval.distill.judgments import archived  # noqa: E402
from spanjudge.eval.spans.judging import judge_span_documents  # noqa: E402
from spanjudge.eval.spans.quintd import QUINTD_SPLIT_DOMAINS, QUINTD_SPLITS, quintd_tables  # noqa: E402
from spanjudge.inference.backends.llamacpp.lora_export import adapter_to_gguf  # noqa: E402
from spanjudge.inference.hf_models import convert_gguf  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402
from spanjudge.inference.shipped_models import gemma3_gguf  # noqa: E402

REPO = BENCH.parent
KEPT = BENCH / "results" / "distill_judgments"
OUT = BENCH / "results" / "gemma_judging_speed"
JUDGING = {"max_new_tokens": 320, "retries": 1, "max_context": 4096, "probabilities": True}  # the protocol's


def make_judge(engine: str, adapter: Path, work: Path, threads: int, batch: int | None = None) -> Judge:
    """The protocol's judge of `adapter` on `engine`: transformers (the dequantized base, float32, the adapter merged;
    `batch`: its generation batch size, else the engine's default) or llamacpp in process (the Q4_K_M GGUF with the
    adapter as a GGUF LoRA, written into `work`)."""
    if engine == "transformers":
        import torch

        torch.set_num_threads(threads)
        options = None if batch is None else {"batch_size": batch}
        return Judge.from_pretrained(adapter, engine="transformers", engine_options=options, **JUDGING)
    base = convert_gguf(gemma3_gguf())
    lora = adapter_to_gguf(adapter, json.loads((base / "config.json").read_text()), work / "student-lora.gguf")
    options = {"gguf": str(gemma3_gguf()), "lora": str(lora), "n_ctx": 4096, "n_threads": threads}
    return Judge.from_pretrained(adapter, engine="llamacpp", engine_options=options, **JUDGING)


def _spread(values: list[float]) -> dict[str, float | None]:
    return {"median": statistics.median(values), "max": max(values)} if values else {"median": None, "max": None}


def compare(rows: dict[str, Any], reference: dict[str, Any]) -> dict[str, Any]:
    """How far `rows` read from `reference` (judgment rows by output id), over the outputs both scored with the
    same reply."""
    same = [
        i
        for i, row in rows.items()
        if row.get("probabilities") and reference[i].get("probabilities") and row["reply"] == reference[i]["reply"]
    ]
    gaps: dict[str, list[float]] = {"p_no_error": [], "span_written": [], "expected_errors": [], "expected_score": []}
    for i in same:
        ours, theirs = rows[i]["probabilities"], reference[i]["probabilities"]
        for key in ("p_no_error", "expected_errors", "expected_score"):
            gaps[key].append(abs(ours[key] - theirs[key]))
        gaps["span_written"] += [abs(a - b) for a, b in zip(ours["span_written"], theirs["span_written"], strict=True)]
    return {"identical_replies": len(same), "outputs": len(rows), **{k: _spread(v) for k, v in gaps.items()}}


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the implementation measured (a row label)")
    parser.add_argument(
        "--engine", choices=("transformers", "llamacpp"), help="the engine to judge on (not with --kept)"
    )
    parser.add_argument("--run", type=Path, default=REPO / "runs/bench/distill_quintd/gemma3-vote-cut-s1")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 72), metavar=("FIRST", "STOP"))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--kept", metavar="LABEL", help="no model: compare this protocol run's kept dev reading")
    args = parser.parse_args()
    if args.kept:
        row = kept_row(args.label, args.kept, args.run.name)
        if isinstance(row, str):
            parser.error(row)
        merge_row(row)
        return
    if args.engine is None:
        parser.error("give --engine (the engine to judge on) or --kept (a kept reading to compare)")
    adapter = args.run / "student" / "adapter"
    if not adapter.is_dir():
        parser.error(f"--run {args.run}: no trained student there (student/adapter); run the protocol first")
    kept = archived(KEPT, args.run.name, "dev").get("student+probabilities")
    if kept is None:
        parser.error(f"no kept dev judgments of {args.run.name} under {KEPT}: nothing to compare with")
    first, stop = args.tables
    docs = quintd_tables("human", (first, stop), QUINTD_SPLIT_DOMAINS)
    if not docs or any(d.id not in kept["rows"] for d in docs):
        parser.error(f"tables {first}-{stop - 1}: not all of their outputs are in the kept dev judgments (70-79)")
    with tempfile.TemporaryDirectory() as work:
        judge = make_judge(args.engine, adapter, Path(work), args.threads)
        try:
            judged = judge_span_documents(judge, docs, Path(work) / "judgments.json")
        finally:
            judge.close()
    row = {
        "label": args.label,
        "engine": args.engine,
        "run": args.run.name,
        "tables": [first, stop],
        "threads": args.threads,
        "wall_s": judged["wall_s"],
        "s_per_output": round(judged["wall_s"] / len(docs), 2),
        **compare(judged["rows"], kept["rows"]),
    }
    merge_row(row)


def kept_row(label: str, kept: str, reference: str) -> dict[str, Any] | str:
    """The row of run `kept`'s kept dev reading against run `reference`'s (the same adapter), or why not."""
    ours = archived(KEPT, kept, "dev").get("student+probabilities")
    theirs = archived(KEPT, reference, "dev").get("student+probabilities")
    if ours is None or theirs is None:
        return f"no kept dev reading of {kept if ours is None else reference} under {KEPT}"
    adapters = {payload["identity"].get("adapter_sha256") for payload in (ours, theirs)}
    if len(adapters) != 1:
        return f"{kept} and {reference} read different adapters: their replies are not comparable"
    outputs = len(ours["rows"])
    return {
        "label": label,
        "engine": ours["identity"]["engine"],
        "run": reference,
        "tables": list(QUINTD_SPLITS["dev"]),
        "threads": None,  # the protocol's: every core
        "wall_s": ours["wall_s"],
        "s_per_output": round(ours["wall_s"] / outputs, 2),
        "reference_s_per_output": round(theirs["wall_s"] / len(theirs["rows"]), 2),
        **compare(ours["rows"], theirs["rows"]),
    }


def merge_row(row: dict[str, Any]) -> None:
    merge_labelled_row(OUT, row, markdown)


def _gap(spread: dict[str, float | None]) -> str:
    return "–" if spread["median"] is None else f"{spread['median']:.4f} / {spread['max']:.4f}"


def markdown(where: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "# A Gemma 3 student judging with its probabilities, per engine (`bench/gemma_judging_speed.py`)",
        "",
        f"Machine: {where}. Judge: a protocol student's adapter (greedy, ≤ 320 new tokens, 1 retry, 4,096-token "
        "context, probabilities). Items: every system's output of the dev tables named, in wikidata, ice_hockey "
        "and owid. Reference: the protocol's kept dev judgments of the same student (the transformers reader). "
        "Differences: median / max of |ours − reference| over the outputs with identical replies; span confidence: "
        "the probability of writing at least that many errors. One run per row.",
        "",
        "| label | engine | run | tables | threads | wall s | s/output | reference s/output | identical replies | "
        "P(no error) | span confidence | expected errors | expected score |",
        "|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        tables, reference = f"{r['tables'][0]}–{r['tables'][1] - 1}", r.get("reference_s_per_output", "–")
        lines.append(
            f"| {r['label']} | {r['engine']} | {r['run']} | {tables} | {r['threads'] or 'all'} | {r['wall_s']} | "
            f"{r['s_per_output']} | {reference} | {r['identical_replies']}/{r['outputs']} | {_gap(r['p_no_error'])} "
            f"| {_gap(r['span_written'])} | {_gap(r['expected_errors'])} | {_gap(r['expected_score'])} |"
        )
    return lines


if __name__ == "__main__":
    main()
