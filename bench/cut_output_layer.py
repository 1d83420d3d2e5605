"""What Gemma 3's output layer costs a judging step on this CPU, whole and cut to a judge's vocabulary
(issue #67, "judging fast enough to search"; bench/judging_drafts.py measured which vocabulary would do).

Greedy decoding of a quintd-1 dev judge prompt with Gemma 3 270M (the protocol's student base, converted
from its GGUF; float32, as the protocol's transformers reader runs on CPU), one token at a time with the
key-value cache, at batch 1 and at the protocol's batch of 8 (the same prompt repeated). Each step is
timed in two parts: the decoder (every layer, to the last hidden state) and the output layer (the hidden
state times the 262,144-row embedding, then the argmax), and the output layer is timed again with its
rows cut to a vocabulary of `--rows` tokens (the prompt's, the judge format's and the training replies'
tokens, padded with the most frequent ids up to that size when fewer). Medians over `--steps` steps after
`--warmup` untimed ones; one run. The model's weights do not change the cost, so no trained adapter is
needed; its replies are not read.

    .venv/bin/python bench/cut_output_layer.py          # → bench/results/cut_output_layer.{json,md}
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

from judging_drafts import DEV_TABLES, DOMAINS, cut_rows, format_tokens, judge_prompt, training_tokens  # noqa: E402
from report_files import machine, write_report  # noqa: E402

from spanjudge.eval.spans.quintd import quintd_tables  # noqa: E402
from spanjudge.inference.hf_models import convert_gguf, load_causal_lm, load_tokenizer  # noqa: E402
from spanjudge.inference.shipped_models import gemma3_gguf  # noqa: E402

OUT = BENCH / "results" / "cut_output_layer"


def timed_steps(model: Any, prompt: list[int], batch: int, rows: Any, steps: int, warmup: int) -> dict[str, float]:
    """Median milliseconds of the decoder, the whole output layer and the cut one, per greedy step."""
    import torch

    weight = model.get_output_embeddings().weight  # tied to the input embedding in Gemma 3
    cut = weight[rows].contiguous()
    ids = torch.tensor([prompt] * batch)
    decoder, whole, part = [], [], []
    with torch.inference_mode():
        out = model.model(input_ids=ids, use_cache=True)
        cache, hidden = out.past_key_values, out.last_hidden_state[:, -1]
        for step in range(warmup + steps):
            started = time.perf_counter()
            logits = hidden @ weight.T
            if cap := getattr(model.config, "final_logit_softcapping", None):  # as the model's own forward does
                logits = torch.tanh(logits / cap) * cap
            token = logits.argmax(-1)
            middle = time.perf_counter()
            (hidden @ cut.T).argmax(-1)
            ended = time.perf_counter()
            out = model.model(input_ids=token[:, None], past_key_values=cache, use_cache=True)
            cache, hidden = out.past_key_values, out.last_hidden_state[:, -1]
            if step >= warmup:
                whole.append(middle - started)
                part.append(ended - middle)
                decoder.append(time.perf_counter() - ended)
    return {name: round(statistics.median(values) * 1000, 2) for name, values in
            (("decoder_ms", decoder), ("output_layer_ms", whole), ("cut_output_layer_ms", part))}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--steps", type=int, default=40, help="timed steps per batch size")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rows", type=int, default=4096, help="the cut output layer's rows")
    args = parser.parse_args()
    import torch

    folder = convert_gguf(gemma3_gguf())
    tokenizer = load_tokenizer(str(folder))
    model = load_causal_lm(str(folder), dtype="float32").eval()
    prompt = judge_prompt(tokenizer, quintd_tables("human", DEV_TABLES, list(DOMAINS))[0])
    vocabulary = set(prompt) | format_tokens(tokenizer) | training_tokens(tokenizer)
    rows = cut_rows(tokenizer, vocabulary, args.rows)
    rows_tensor = torch.tensor(rows)
    results: list[dict[str, Any]] = []
    for batch in args.batches:
        row = {"batch": batch, "prompt_tokens": len(prompt), "vocabulary": len(vocabulary), "rows": len(rows),
               "threads": torch.get_num_threads(), **timed_steps(model, prompt, batch, rows_tensor, args.steps,
                                                                  args.warmup)}  # fmt: skip
        row["step_speedup"] = round(
            (row["decoder_ms"] + row["output_layer_ms"]) / (row["decoder_ms"] + row["cut_output_layer_ms"]), 2
        )
        results.append(row)
        print(row, flush=True)
    lines = [
        "# Gemma 3's output layer in a judging step, whole and cut (`bench/cut_output_layer.py`)",
        "",
        f"Machine: {machine()}. Gemma 3 270M (float32), greedy steps with the key-value cache after a "
        f"{len(prompt)}-token quintd-1 dev judge prompt; medians of {args.steps} steps after {args.warmup} untimed, "
        f"one run. The cut layer keeps {len(rows):,} rows: the {len(vocabulary):,} tokens of the prompt, the judge "
        "format and the training replies (bench/judging_drafts.py), padded with the lowest other ids. The step "
        "speed-up is (decoder + whole layer) / (decoder + cut layer): what a step would gain, not a reply.",
        "",
        "| batch | decoder ms | output layer ms | cut output layer ms | step speed-up |",
        "|---:|---:|---:|---:|---:|",
        *(f"| {r['batch']} | {r['decoder_ms']} | {r['output_layer_ms']} | {r['cut_output_layer_ms']} | "
          f"{r['step_speedup']}× |" for r in results),
    ]  # fmt: skip
    write_report(OUT, {"machine": machine(), "rows": results}, lines)


if __name__ == "__main__":
    main()
