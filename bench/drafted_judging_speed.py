"""Seconds a Gemma 3 student's reply takes to write on this CPU, plain greedy against greedy with its output
layer cut to the judge's vocabulary and with prompt-lookup drafting (issue #67, "judging fast enough to search";
bench/judging_drafts.py and bench/cut_output_layer.py measured each part).

Each reply is the one a protocol student wrote for a dev output (its kept greedy reply), and every pass is the
pass the method would run if the model wrote that reply again: a checking pass feeds the last written token and
the guess, keeps the guess's agreeing prefix (replayed against the kept reply, as `lookup_passes` counts) and rolls
the key-value cache back over the rest. A forward pass costs the same whatever the adapter's weights (merged
into the base, as the transformers engine judges), so Gemma 3 270M's own weights stand in for the student's,
in float32 at batch 1. The times cover the reply's steps after the prompt's pass, which every row shares;
whether the cut layer's argmax is the written token (for a trained student it is, when the token lies in the
vocabulary; bench/judging_drafts.py counts that) is not read here.

    .venv/bin/python bench/drafted_judging_speed.py      # → bench/results/drafted_judging_speed.{json,md}
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from judging_drafts import (  # noqa: E402
    DEV_TABLES,
    DOMAINS,
    JUDGMENTS,
    KEPT,
    agreed_prefix,
    cut_rows,
    format_tokens,
    guess_of,
    judge_prompt,
    training_tokens,
)
from report_files import machine, write_report  # noqa: E402

from spanjudge.eval.spans.quintd import quintd_tables  # noqa: E402
from spanjudge.inference.hf_models import convert_gguf, load_causal_lm, load_tokenizer  # noqa: E402
from spanjudge.inference.shipped_models import gemma3_gguf  # noqa: E402

OUT = BENCH / "results" / "drafted_judging_speed"


def write_reply(
    model: Any, prompt: list[int], reply: list[int], rows: Any, draft: int, ngram: int
) -> tuple[float, int]:
    """Seconds and passes to write `reply` after `prompt` (the prompt's own pass excluded): one token a pass when
    `draft` is 0, else prompt-lookup guesses of `draft` tokens checked a pass at a time; the output layer whole
    when `rows` is None, else cut to those rows."""
    import torch

    weight = model.get_output_embeddings().weight
    layer = weight if rows is None else weight[rows].contiguous()
    cap = getattr(model.config, "final_logit_softcapping", None)
    with torch.inference_mode():
        out = model.model(input_ids=torch.tensor([prompt]), use_cache=True)
        cache = out.past_key_values
        if draft:  # the sliding-window layers keep what a rollback needs (plain decoding keeps only the window)
            cache.activate_past_recording()
        started = time.perf_counter()
        logits = out.last_hidden_state[:, -1] @ layer.T  # the reply's first token
        written, passes = 1, 1
        while written < len(reply):
            guess = guess_of(prompt + reply[:written], ngram, draft) if draft else []
            feed = [reply[written - 1], *guess]
            hidden = model.model(input_ids=torch.tensor([feed]), past_key_values=cache, use_cache=True)
            logits = hidden.last_hidden_state[0] @ layer.T
            if cap:
                logits = torch.tanh(logits / cap) * cap
            logits.argmax(-1)
            agreed = agreed_prefix(guess, reply, written)
            if len(guess) > agreed:
                cache.crop(-(len(guess) - agreed))  # the guessed tokens that disagreed leave the cache
            written += agreed + 1
            passes += 1
        return time.perf_counter() - started, passes


METHODS = {  # label → (draft tokens, output layer cut)
    "greedy": (0, False),
    "greedy, cut output layer": (0, True),
    "prompt lookup, 10-token guesses, cut output layer": (10, True),
    "prompt lookup, 5-token guesses, cut output layer": (5, True),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", default="gemma3-mixed-cut-t50-s42", help="the kept run whose replies are written")
    parser.add_argument("--tables", type=int, nargs=2, default=[70, 71], help="dev tables, FIRST STOP")
    parser.add_argument("--rows", type=int, default=4096, help="the cut output layer's rows")
    args = parser.parse_args()
    import torch

    folder = convert_gguf(gemma3_gguf())
    tokenizer = load_tokenizer(str(folder))
    model = load_causal_lm(str(folder), dtype="float32").eval()
    docs = [
        d
        for d in quintd_tables("human", DEV_TABLES, list(DOMAINS))
        if args.tables[0] <= int(d.input_id.split("/")[1]) < args.tables[1]
    ]
    kept = json.loads(gzip.decompress((JUDGMENTS / args.run / KEPT).read_bytes()))["rows"]
    learned = format_tokens(tokenizer) | training_tokens(tokenizer)
    items = []
    for d in docs:
        if not kept.get(d.id, {}).get("reply"):
            continue
        prompt = judge_prompt(tokenizer, d)
        reply = tokenizer(kept[d.id]["reply"], add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        rows = torch.tensor(cut_rows(tokenizer, set(prompt) | learned, args.rows))
        items.append((d.id, prompt, reply, rows))
    write_reply(model, items[0][1], items[0][2][:8], None, 0, 2)  # warm-up, not timed
    results: list[dict[str, Any]] = []
    for label, (draft, cut) in METHODS.items():
        seconds, passes = [], 0
        for _, prompt, reply, rows in items:
            wall, n = write_reply(model, prompt, reply, rows if cut else None, draft, 2)
            seconds.append(wall)
            passes += n
        tokens = sum(len(reply) for _, _, reply, _ in items)
        results.append({"method": label, "outputs": len(items), "reply_tokens": tokens, "passes": passes,
                        "seconds": round(sum(seconds), 2), "s_per_output": round(statistics.mean(seconds), 3),
                        "median_s_per_output": round(statistics.median(seconds), 3)})  # fmt: skip
        print(results[-1], flush=True)
    base = results[0]["seconds"]
    for row in results:
        row["speedup"] = round(base / row["seconds"], 2)
    lines = [
        "# A student's replies written greedily, with a cut output layer, with prompt lookup "
        "(`bench/drafted_judging_speed.py`)",
        "",
        f"Machine: {machine()}; torch threads {torch.get_num_threads()}. The kept replies of `{args.run}` for quintd-1 "
        f"dev tables {args.tables[0]} to {args.tables[1]} (stop) ({', '.join(DOMAINS)}; {len(items)} outputs), each "
        "written again pass for pass by Gemma 3 270M (float32, batch 1; a forward pass costs the same whatever the "
        "adapter), "
        "the passes replayed against the kept reply. Seconds cover the reply's steps after the prompt's pass. One run "
        "after one warm-up reply.",
        "",
        "| method | outputs | reply tokens | passes | s per output (median) | speed-up |",
        "|---|---:|---:|---:|---:|---:|",
        *(f"| {r['method']} | {r['outputs']} | {r['reply_tokens']:,} | {r['passes']:,} | {r['s_per_output']} "
          f"({r['median_s_per_output']}) | {r['speedup']}× |" for r in results),
    ]  # fmt: skip
    write_report(OUT, {"machine": machine(), "run": args.run, "tables": args.tables, "rows": results}, lines)


if __name__ == "__main__":
    main()
