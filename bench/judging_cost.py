"""Where a Gemma 3 student's protocol judging time goes, per engine: generation and the probability reading, each
timed alone (issue #67: fast judging).

    .venv/bin/python bench/judging_cost.py --adapter runs/bench/distill_quintd/LABEL/student/adapter \
        [--engine transformers|llamacpp] [--batch 8] [--kept gemma3-mixed-cut-s42] [--split test] [--tables 80 82]

The work is the protocol's (greedy, at most 320 new tokens, a 4,096-token context, inputs cut to fit), on every
system's output of the given quintd-1 tables of wikidata, ice_hockey and owid, with the replies that run `--kept`
wrote for them (bench/results/distill_judgments/KEPT/SPLIT/student+probabilities.json.gz):
- generation, prompts in the judge's order (shared prefixes adjacent), each reply exactly as long as its kept one
  (its turn's end included, at most 320 tokens): on transformers (the dequantized base, float32, the adapter
  merged) in batches of `--batch`, each batch as long as its longest kept reply, as the student's own greedy batch
  runs before it stops; on llamacpp in process (the Q4_K_M GGUF with the adapter as a GGUF LoRA, every core) one
  reply at a time, its end tokens held off until its length;
- reading: the engine's probabilities read along each kept reply, in the same order (each reading reuses the last
  one's shared prompt prefix, as the judge's does).
The cost of a forward pass does not depend on the adapter's weights, so any Gemma 3 adapter with the protocol's
chat template measures the kept student's cost (`--adapter`; a one-step student of `spanjudge distill --steps 1`
will do). Replies are not compared: bench/gemma_judging_speed.py measures agreement. Loading is excluded. Rows merge
into bench/results/judging_cost.{json,md} under their label (default: the engine and batch size; a rerun replaces
it). Run it alone: two CPU-heavy jobs on 2 cores distort each other. Not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model here is local

from gemma_judging_speed import JUDGING, make_judge  # noqa: E402
from report_files import merge_labelled_row  # noqa: E402

from spanjudge.eval.distill.judgments import archived  # noqa: E402
from spanjudge.eval.spans.judging import QUINTD_ASPECT, QUINTD_TASK  # noqa: E402
from spanjudge.eval.spans.quintd import QUINTD_SPLIT_DOMAINS, quintd_tables  # noqa: E402
from spanjudge.inference.backends.base import ChatRequest, SamplingParams  # noqa: E402
from spanjudge.inference.contract import ParseFailure, parse_judge  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402

KEPT = BENCH / "results" / "distill_judgments"
OUT = BENCH / "results" / "judging_cost"
MAX_NEW_TOKENS = int(JUDGING["max_new_tokens"])  # the protocol's judging


def work_items(judge: Judge, kept: dict[str, Any], tables: tuple[int, int]) -> list[tuple[str, str, int]]:
    """(prompt, kept reply, tokens to generate) per output of `tables`, in the judge's order (by prompt)."""
    header = judge.catalog.task(QUINTD_TASK).inputs[0].header
    tokenizer = judge.backend.tokenizer  # type: ignore[attr-defined]  # the engine's (llama.cpp's GGUF has its words)
    items = []
    for doc in quintd_tables("human", tables, QUINTD_SPLIT_DOMAINS):
        if doc.id not in kept:
            raise SystemExit(f"{doc.id}: not in the kept judgments; give tables of the kept split")
        reply = kept[doc.id]["reply"]
        if reply is None:
            continue  # no reply kept (a failed call): nothing to time
        request = judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(doc.inputs.values()))}, doc.output)
        prepared = judge._prepare(request)  # the prompt exactly as the judge sends it (its context cut)
        written = len(tokenizer(reply, add_special_tokens=False)["input_ids"])
        items.append((prepared.prompt, reply, min(MAX_NEW_TOKENS, written + 1)))  # + the turn's end
    return sorted(items, key=lambda item: item[0])


def time_batched_generation(judge: Judge, items: list[tuple[str, str, int]]) -> tuple[float, list[dict[str, Any]]]:
    """Seconds to generate every item's length in the transformers engine's batches, and each batch's size, steps
    and seconds."""
    backend: Any = judge.backend
    length = {prompt: tokens for prompt, _, tokens in items}
    run_batch, generate, batches = backend._run_batch, backend._generate, []
    steps = {"now": MAX_NEW_TOKENS}

    def forced(params: SamplingParams, encoded: Any, cache: Any) -> Any:
        # exactly the batch's longest kept reply: no end token stops it sooner, none runs longer
        import spanjudge.inference.backends.transformers_local as engine

        decoding = engine._decoding
        engine._decoding = lambda p: {**decoding(p), "min_new_tokens": steps["now"]}
        try:
            return generate(params.model_copy(update={"max_tokens": steps["now"]}), encoded, cache)
        finally:
            engine._decoding = decoding

    def timed(batch: list[ChatRequest], generation: Any) -> Any:
        steps["now"] = max(length[request.messages[-1].content] for request in batch)
        started = time.perf_counter()
        results = run_batch(batch, generation)
        batches.append({"size": len(batch), "steps": steps["now"], "s": round(time.perf_counter() - started, 2)})
        return results

    backend._run_batch, backend._generate = timed, forced
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS)
    started = time.perf_counter()
    generated(backend.generate([ChatRequest.user(prompt, greedy) for prompt, _, _ in items]))
    return time.perf_counter() - started, batches


def generated(results: list[Any]) -> None:
    """Stop at the first failed call: a timing of work not done would be no timing."""
    failed = [r for r in results if not hasattr(r, "text")]
    if failed:
        raise SystemExit(f"generation failed: {failed[0]}")


def time_llamacpp_generation(judge: Judge, items: list[tuple[str, str, int]]) -> tuple[float, list[dict[str, Any]]]:
    """Seconds to generate every item's length on the in-process llama.cpp engine (one request at a time, each
    after the shared prefix of the one before), and each item's steps and seconds."""
    backend: Any = judge.backend
    length = {tuple(backend._prompt_ids(ChatRequest.user(prompt))): tokens for prompt, _, tokens in items}
    complete, steps = backend.llm.create_completion, []
    never = {token: -1e9 for token in backend._end_ids}  # no end token stops a reply before its length

    def forced(prompt: list[int], max_tokens: int, **options: Any) -> Any:
        wanted = length[tuple(prompt)]
        started = time.perf_counter()
        output = complete(prompt=prompt, max_tokens=wanted, logit_bias=never, **options)
        steps.append(
            {"size": 1, "steps": output["usage"]["completion_tokens"], "s": round(time.perf_counter() - started, 2)}
        )
        return output

    backend.llm.create_completion = forced
    greedy = SamplingParams(temperature=0.0, max_tokens=MAX_NEW_TOKENS)
    started = time.perf_counter()
    generated(backend.generate([ChatRequest.user(prompt, greedy) for prompt, _, _ in items]))
    return time.perf_counter() - started, steps


def time_reading(judge: Judge, items: list[tuple[str, str, int]]) -> list[float]:
    """Seconds of each item's probability reading along its kept reply (an unparseable reply is not read)."""
    read: Any = judge._probability_reader  # the judge's own reader, as `Judge.score` calls it
    seconds = []
    for prompt, reply, _ in items:
        parsed = parse_judge(judge._reply_text(reply))
        if isinstance(parsed, ParseFailure):
            continue
        started = time.perf_counter()
        read(ChatRequest.user(prompt), parsed)
        seconds.append(time.perf_counter() - started)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--adapter", type=Path, required=True, help="a Gemma 3 student's adapter folder")
    parser.add_argument("--kept", default="gemma3-mixed-cut-s42", help="the protocol run whose replies are timed")
    parser.add_argument("--split", choices=("dev", "test"), default="test")
    parser.add_argument("--tables", type=int, nargs=2, default=(80, 82), metavar=("FIRST", "STOP"))
    parser.add_argument("--engine", choices=("transformers", "llamacpp"), default="transformers")
    parser.add_argument("--batch", type=int, default=8, help="transformers' generation batch size (its default: 8)")
    parser.add_argument("--label", help="the row's label (default: the engine, and transformers' batch size)")
    args = parser.parse_args()
    if not (args.adapter / "adapter_config.json").is_file():
        parser.error(f"--adapter {args.adapter}: no adapter there (adapter_config.json)")
    kept = archived(KEPT, args.kept, args.split).get("student+probabilities")
    if kept is None:
        parser.error(f"no kept {args.split} judgments of {args.kept} under {KEPT}")
    batch = args.batch if args.engine == "transformers" else 1  # llama.cpp runs one request at a time
    with tempfile.TemporaryDirectory() as work:
        judge = make_judge(args.engine, args.adapter, Path(work), os.cpu_count() or 1, batch)
        try:
            items = work_items(judge, kept["rows"], tuple(args.tables))
            timer = time_batched_generation if args.engine == "transformers" else time_llamacpp_generation
            generation_s, batches = timer(judge, items)
            reads = time_reading(judge, items)
        finally:
            judge.close()
    n = len(items)
    row = {
        "label": args.label or (f"batch {batch}" if args.engine == "transformers" else args.engine),
        "engine": args.engine,
        "kept": args.kept,
        "split": args.split,
        "tables": list(args.tables),
        "batch": batch,
        "outputs": n,
        "tokens": sum(tokens for _, _, tokens in items),
        "generation_s": round(generation_s, 1),
        "reading_s": round(sum(reads), 1),
        "read": len(reads),
        "reading_median_s": round(statistics.median(reads), 2) if reads else None,
        "generation_s_per_output": round(generation_s / n, 2),
        "reading_s_per_output": round(sum(reads) / n, 2),
        "s_per_output": round((generation_s + sum(reads)) / n, 2),
        "kept_s_per_output": round(kept["wall_s"] / len(kept["rows"]), 2),
        "batches": batches,
    }
    merge_labelled_row(OUT, row, markdown)


def markdown(where: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "# Where a Gemma 3 student's judging time goes on transformers (`bench/judging_cost.py`)",
        "",
        f"Machine: {where}. The protocol's judging (greedy, ≤ 320 new tokens, 4,096-token context) of every "
        "system's output of the tables named, in wikidata, ice_hockey and owid, with the replies the kept run "
        "wrote: generation forced to each batch's longest kept reply, then the probabilities read along each "
        "kept reply. Kept s/output: the kept run's own wall time per output on its whole split (generation, "
        "retries and reading, on the machine it ran on). One run per row; loading excluded.",
        "",
        "| label | engine | kept run | split | tables | batch | outputs | tokens | generation s/output "
        "| reading s/output | reading median s | s/output | kept s/output |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        tables = f"{r['tables'][0]}–{r['tables'][1] - 1}"
        lines.append(
            f"| {r['label']} | {r.get('engine', 'transformers')} | {r['kept']} | {r['split']} | {tables} | "
            f"{r['batch']} | {r['outputs']} | {r['tokens']} | {r['generation_s_per_output']} | "
            f"{r['reading_s_per_output']} | {r['reading_median_s']} | {r['s_per_output']} | {r['kept_s_per_output']} |"
        )
    return lines


if __name__ == "__main__":
    main()
