"""CPU training throughput and memory: the SmolLM2 smoke config with the thesis default
(gradient checkpointing on), with checkpointing off, with packing on, and the distillation
protocol's recipe (no checkpointing, 2 sequences a pass, examples filling max_length 2048)
with and without `training.cpu_memory_fixes` (training/cpu_memory.py); then the protocol's
own student (Gemma 3 270M, one sequence a pass) on its own teacher records (GPT-4's quintd-1
spans on tables 0-24 of its three domains, imported here as `spanjudge distill` does), with
and without the fixes.

    .venv/bin/python bench/train_cpu.py [--records 16] [--steps 4] [--repeats 1] [--only TEXT]

Each variant runs `spanjudge train` as its own process (one process, so the numbers are
not split across DDP ranks) on real SummEval judge examples (~1k tokens each: CNN/DM
article + summary, experts' mean relevance as the score; the protocol's rows join
consecutive articles into one input of ~1.9k tokens, as long as the longest quintd-1 owid
records). A judge's records are mostly prompt: only the reply's tokens have a label. Tokens/s
counts the non-padding input tokens the trainer saw over the training wall time; peak
memory is the process's maximum resident set. Results: bench/results/train_cpu.{json,md}.
Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from report_files import machine, write_report  # noqa: E402
from roofline import forward_flops_per_token, lora_training_flops_per_token, machine_limits, model_shape  # noqa: E402

from spanjudge.core.paths import data_dir  # noqa: E402
from spanjudge.eval.distill.phases import import_quintd  # noqa: E402
from spanjudge.eval.distill.study import STUDENTS, StudySettings  # noqa: E402
from spanjudge.inference.hf_models import local_folder, resolve_model_source  # noqa: E402
from tests.support.judge_records import summeval_records  # noqa: E402

EXAMPLES_PER_STEP = 4  # the smoke config's effective batch: 2 × 2 accumulated, or 1 × 4 for Gemma
LONG = "long"  # the records of the protocol's rows: inputs that fill max_length
TEACHER = "teacher"  # the distillation protocol's own training records
PROTOCOL = ["training.gradient_checkpointing=false"]  # bench/distill_quintd.py's student: the smoke config's
GEMMA = [
    *PROTOCOL,
    *(f"{key}={value}" for key, value in STUDENTS["gemma3"]["sets"].items()),
    f"training.per_device_batch_size={STUDENTS['gemma3']['device_batch']}",
    "data.too_long=cut",
]
SMOLLM2, GEMMA3 = "@smollm2", "@gemma3"


@dataclass(frozen=True)
class Variant:
    data: str
    overrides: list[str]
    model: str = SMOLLM2


VARIANTS: dict[str, Variant] = {
    "defaults (gradient checkpointing on)": Variant("summeval", ["training.gradient_checkpointing=true"]),
    "gradient checkpointing off": Variant("summeval", ["training.gradient_checkpointing=false"]),
    "packing on (checkpointing off)": Variant(
        "summeval", ["training.gradient_checkpointing=false", "training.packing=true"]
    ),
    "protocol recipe, ~1.9k-token examples, CPU memory fixes off": Variant(
        LONG, [*PROTOCOL, "training.cpu_memory_fixes=false"]
    ),
    "protocol recipe, ~1.9k-token examples (CPU memory fixes on)": Variant(LONG, PROTOCOL),
    "protocol student (Gemma 3 270M) on its teacher records, CPU memory fixes off": Variant(
        TEACHER, [*GEMMA, "training.cpu_memory_fixes=false"], GEMMA3
    ),
    "protocol student (Gemma 3 270M) on its teacher records (CPU memory fixes on)": Variant(TEACHER, GEMMA, GEMMA3),
}
LONG_INPUT_CHARS = 6_800  # ~1.7k Llama-family tokens of article: with the prompt and reply, just under 2,048


def long_records(rows: list[dict]) -> list[dict]:
    """Each record's article followed by the next ones', cut at LONG_INPUT_CHARS."""
    articles = [row["inputs"]["Article"] for row in rows]
    joined = []
    for index, row in enumerate(rows):
        text = "\n\n".join(articles[index:] + articles[:index])[:LONG_INPUT_CHARS]
        joined.append({**row, "id": row["id"] + "-long", "inputs": {"Article": text}})
    return joined


def teacher_records(scratch: Path, count: int) -> list[dict]:
    """`count` of the protocol's training records, spread evenly over them (its three domains, in order)."""
    settings = StudySettings()
    import_quintd(scratch, "import", settings.import_config, settings.domains, settings.train_tables,
                  on_mismatch="relocate_or_drop")  # fmt: skip
    records = [json.loads(line) for line in (scratch / "import" / "train.jsonl").read_text().splitlines()]
    return [records[i * len(records) // count] for i in range(count)]


def run_variant(records: Path, out: Path, variant: Variant, steps: int) -> dict:
    command = [
        str(Path(sys.executable).parent / "spanjudge"),
        "train",
        "--config",
        str(REPO / "configs/train/smollm2_cpu_smoke.yaml"),
    ]
    for item in [
        f"data.train={records}",
        f"training.output_dir={out}",
        f"training.max_steps={steps}",
        "training.save_steps=1000",
        "data.max_length=2048",
        *variant.overrides,
    ]:
        command += ["--set", item]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    metrics = json.loads((out / "metrics.json").read_text())
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    return {
        # before the first update both paths compute the same loss; later steps part by rounding
        "first_step_loss": next(h["loss"] for h in history if "loss" in h and h.get("step") == 1),
        "tokens_per_second": metrics["tokens_per_second"],
        "train_runtime_s": metrics["train_runtime"],
        "input_tokens_seen": metrics["input_tokens_seen"],
        "peak_rss_mib": metrics["peak_rss_mib_rank0"],
        "train_loss": metrics["train_loss"],
        "train_examples": metrics["train_examples"],
        "skipped_too_long": metrics["skipped_too_long"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=16)
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--only", default="", help="run only the variants whose name contains this")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "train_cpu")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as scratch:
        rows = summeval_records(data_dir(), args.records)
        folders = {}
        wanted = {variant.data for name, variant in VARIANTS.items() if args.only in name}
        data_sets = {"summeval": lambda: rows, LONG: lambda: long_records(rows),
                     TEACHER: lambda: teacher_records(Path(scratch), args.records)}  # fmt: skip
        for data, make in data_sets.items():
            if data not in wanted:
                continue
            records = make()
            folders[data] = Path(scratch) / data
            folders[data].mkdir()
            (folders[data] / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
        results = {}
        for name, variant in VARIANTS.items():
            if args.only not in name:
                continue
            folder = folders[variant.data]
            runs = [
                run_variant(folder, Path(scratch) / f"run-{len(results)}-{i}", variant, args.steps)
                for i in range(args.repeats)
            ]
            results[name] = {
                "runs": runs,
                "median_tokens_per_second": statistics.median(r["tokens_per_second"] for r in runs),
                "median_peak_rss_mib": statistics.median(r["peak_rss_mib"] for r in runs),
            }
            print(name, results[name]["median_tokens_per_second"], "tok/s", flush=True)

    import torch

    limits = machine_limits(torch.bfloat16)  # the smoke config's bf16 autocast: its matmuls run in bf16
    shapes = {spec: model_shape(local_folder(resolve_model_source(spec))) for spec in (SMOLLM2, GEMMA3)}
    for name, result in results.items():
        run, variant = result["runs"][0], VARIANTS[name]
        shape = shapes[variant.model]
        mean_tokens = run["input_tokens_seen"] / (args.steps * EXAMPLES_PER_STEP)
        result["mean_example_tokens"] = round(mean_tokens)
        forward = forward_flops_per_token(
            shape["matmul_parameters"], shape["layers"], shape["hidden"], int(mean_tokens)
        )
        per_token = lora_training_flops_per_token(forward, "training.gradient_checkpointing=true" in variant.overrides)
        result["flops_per_token"] = per_token
        result["achieved_flops_per_s"] = per_token * result["median_tokens_per_second"]
        result["peak_fraction"] = result["achieved_flops_per_s"] / limits["matmul_flops_per_s"]
    firsts: dict[str, float] = {}  # each model's first variant run
    for name, result in results.items():
        firsts.setdefault(VARIANTS[name].model, result["median_tokens_per_second"])
    payload = {
        "machine": machine(),
        "model": "SmolLM2-135M-Instruct, or Gemma 3 270M where the variant says (fp32 weights, mixed precision "
        "as the machine gives it: bf16 autocast where the CPU computes bf16 natively), LoRA r16 on all projections",
        "data": f"{args.records} SummEval judge examples (and as many ~1.9k-token ones), or {args.records} of the "
        "protocol's teacher records (spread over its 284), max_length 2048",
        "steps": args.steps,
        "examples_per_step": EXAMPLES_PER_STEP,
        "limits": limits,
        "model_shapes": shapes,
        "results": results,
    }
    lines = [
        "# CPU training throughput (SmolLM2-135M and Gemma 3 270M LoRA, `bench/train_cpu.py`)",
        "",
        f"Machine: {payload['machine']}. Data: {payload['data']}; {args.steps} optimizer steps of "
        f"{EXAMPLES_PER_STEP} sequences (2 × 2 accumulated; Gemma 1 × 4), one process. Medians of "
        f'{args.repeats} run(s) per variant, all measured in the same invocation; "vs the first" compares with '
        "the model's first row.",
        "",
        f"Roofline: bf16 matmul peak measured in this run {limits['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s "
        "(torch, n=2048, every core). Training FLOPs per token = 2× the forward's (forward + the backward's input "
        "gradients; the frozen base needs no weight gradients), 3× with gradient checkpointing (the forward again); "
        "the forward's = 2·P + 2·L·d·T (P the weights multiplied per token, L layers, d width, T the mean "
        "example's tokens). These are model FLOPs: the LM head counted at every position, though with the CPU "
        "memory fixes on it runs on the labelled positions only.",
        "",
        "| variant | mean tokens | tokens/s | vs the first | GFLOP/s | of bf16 peak | peak RSS (MiB) | first step's "
        "loss | train loss |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, result in results.items():
        tps = result["median_tokens_per_second"]
        lines.append(
            f"| {name} | {result['mean_example_tokens']} | {tps:.1f} | {tps / firsts[VARIANTS[name].model]:.2f}× | "
            f"{result['achieved_flops_per_s'] / 1e9:.1f} | {result['peak_fraction']:.0%} | "
            f"{result['median_peak_rss_mib']:.0f} | {result['runs'][0]['first_step_loss']:.4f} | "
            f"{result['runs'][0]['train_loss']:.4f} |"
        )
    write_report(args.out, payload, lines)


if __name__ == "__main__":
    main()
