"""What one decoder pass of Gemma 3 270M costs on this CPU by the tokens it reads: rows of a batch and tokens of a
row (issue #67, "judging fast enough to search": why drafted decoding, 3.7 reply tokens a pass, did not beat the
batched engine's 8 rows a step, and what checking several outputs' guesses in one pass would gain).

A pass reads `tokens` new tokens in each of `batch` rows after a key-value cache of `--context` tokens (a quintd-1
judge prompt's length), with every layer's cache whole and an attention mask of ours, as drafted decoding's passes
and a batch of several outputs' guesses would run (the decoder only: the output layer is cut, or read once per
reply, bench/results/cut_output_layer.md). The model's weights do not change the cost (no adapter needed); float32,
as the protocol's transformers judge runs on CPU, and bfloat16 for comparison (its numbers differ: not the
protocol's). Medians over `--passes` timed passes after one untimed; each pass
is cut from the cache after it. One run.

    .venv/bin/python bench/decoder_pass_cost.py      # → bench/results/decoder_pass_cost.{json,md}
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402

from spanjudge.inference.hf_models import convert_gguf, load_causal_lm  # noqa: E402
from spanjudge.inference.shipped_models import gemma3_gguf  # noqa: E402

OUT = BENCH / "results" / "decoder_pass_cost"
SHAPES = ((1, 1), (1, 9), (1, 33), (4, 1), (4, 9), (8, 1), (8, 9))  # (rows, tokens a row)


def pass_ms(model: Any, batch: int, tokens: int, context: int, passes: int) -> float:
    """Median milliseconds of a decoder pass over `tokens` new tokens in each of `batch` rows."""
    import torch
    from transformers import DynamicCache

    decoder = model.get_decoder()
    low = torch.finfo(model.dtype).min
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        cache = DynamicCache()  # every layer whole: the mask below is each layer's, as a batch of guesses needs
        prompt = torch.randint(100, 20_000, (1, context), generator=generator)
        decoder(input_ids=prompt, past_key_values=cache, use_cache=True)
        cache.batch_repeat_interleave(batch)
        mask = torch.zeros(batch, 1, tokens, context + tokens, dtype=model.dtype)
        mask[..., context:] = torch.triu(torch.full((tokens, tokens), low, dtype=model.dtype), 1)
        masks = {"full_attention": mask, "sliding_attention": mask}
        positions = torch.arange(context, context + tokens)[None].expand(batch, tokens)
        times = []
        for _ in range(passes + 1):
            ids = torch.randint(100, 20_000, (batch, tokens), generator=generator)
            started = time.perf_counter()
            decoder(input_ids=ids, past_key_values=cache, attention_mask=masks, position_ids=positions, use_cache=True)
            times.append(time.perf_counter() - started)
            cache.crop(-tokens)
    return round(1000 * statistics.median(times[1:]), 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--context", type=int, default=1400, help="tokens in the cache before each pass")
    parser.add_argument("--passes", type=int, default=9, help="timed passes per shape")
    args = parser.parse_args()
    import torch

    rows = []
    for dtype in ("float32", "bfloat16"):
        model = load_causal_lm(str(convert_gguf(gemma3_gguf())), dtype=dtype).eval()
        for batch, tokens in SHAPES:
            ms = pass_ms(model, batch, tokens, args.context, args.passes)
            rows.append(
                {"dtype": dtype, "batch": batch, "tokens": tokens, "pass_ms": ms, "ms_per_row": round(ms / batch, 1)}
            )
            print(rows[-1], flush=True)
    lines = [
        "# A decoder pass of Gemma 3 270M by the tokens it reads (`bench/decoder_pass_cost.py`)",
        "",
        f"Machine: {machine()}; torch threads {torch.get_num_threads()}. The decoder alone, after a cache of "
        f"{args.context} tokens, with a mask of ours per layer kind; medians of {args.passes} passes after one "
        "untimed; one run. Float32 is the protocol's judge; bfloat16's numbers differ from it.",
        "",
        "| dtype | rows | tokens a row | ms a pass | ms a row |",
        "|---|---:|---:|---:|---:|",
        *(f"| {r['dtype']} | {r['batch']} | {r['tokens']} | {r['pass_ms']} | {r['ms_per_row']} |" for r in rows),
    ]
    write_report(OUT, {"machine": machine(), "context": args.context, "rows": rows}, lines)


if __name__ == "__main__":
    main()
