"""What a run of bench/gpu/run.py records beside its rows: the device and its dense bf16 peak, the software,
the runs an earlier call wrote (kept, newest last), and the markdown report of them all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # bench/, for report_files

from report_files import machine

from spanjudge.training.plan import THESIS_HOURS

THESIS = {"hours_per_epoch": THESIS_HOURS, "gpu": "A40", "library": "Unsloth", "vram_gb": 20}


def earlier_runs(out: Path) -> list[dict[str, Any]]:
    """The runs an earlier call wrote to OUT.json (a single-run file of the first format becomes one run)."""
    path = out.with_suffix(".json")
    if not path.is_file():
        return []
    payload = json.loads(path.read_text(encoding="utf-8"))
    if "runs" in payload:
        return list(payload["runs"])
    payload.pop("thesis", None)
    return [payload]


def software() -> dict[str, str | None]:
    """The driver, CUDA and library versions this run measured with."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    found: dict[str, str | None] = {"torch": torch.__version__, "cuda": torch.version.cuda}
    for name in ("transformers", "peft", "trl", "accelerate", "bitsandbytes", "liger-kernel", "vllm", "triton"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = None
    found["driver"] = None
    if torch.cuda.is_available():
        try:
            done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                  capture_output=True, text=True, timeout=30)  # fmt: skip
            found["driver"] = done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout else None
        except (OSError, subprocess.TimeoutExpired):
            pass
    return found


def report_lines(payload: dict[str, Any]) -> list[str]:
    lines = ["# GPU measurements (`bench/gpu/run.py`)", "",
             "Every run this script made, newest last; each row's numbers are from that run's device only. "
             "tokens/s: the non-padding input tokens of the optimizer steps after the warm-up (steps 4..N) over "
             "their time; MFU: tokens/s × model FLOPs per token (training/plan.py) / the device's dense bf16 peak; "
             "hardware MFU also counts gradient checkpointing's recomputed forward.", ""]  # fmt: skip
    for run in payload["runs"]:
        lines += run_lines(run)
    thesis = payload["thesis"]
    lines += [f"The thesis: {thesis['hours_per_epoch']} h per epoch, ~{thesis['vram_gb']} GB, one {thesis['gpu']} "
              f"with {thesis['library']}."]  # fmt: skip
    return lines


def run_lines(run: dict[str, Any]) -> list[str]:
    software = run.get("software") or {}
    versions = ", ".join(f"{k} {v}" for k, v in software.items() if v) or "not recorded"
    lines = [
        f"## {run.get('date', 'undated')}, {run['device']}, shape {run['shape']}",
        "",
        *([] if run.get("complete", True) else ["**Incomplete: the run stopped before every row was measured.**", ""]),
        f"Software: {versions}. Command: `{run.get('command', 'not recorded')}`."
        + (f" Note: {run['note']}" if run.get("note") else ""),
        "",
        f"Model: Llama 3.1 8B's architecture ({run['parameters']:,} parameters, random weights), max length "
        f"{run['max_length']}, mean {run['mean_tokens_per_example']} tokens per example, "
        f"{run['model_flops_per_token'] / 1e9:.2f} GFLOP per token (training/plan.py's formula).",
        "",
        "| training variant | steps timed | tokens/s | examples/s | MFU | hardware MFU | peak GPU memory (GiB) | "
        "h per thesis epoch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in run["training"]:
        if "error" in row:
            lines.append(f"| {row['variant']} | failed: {row['error']} | | | | | | |")
            continue
        timed = row.get("timed_steps")
        steps = f"{timed} of {row['steps']}" if timed else f"none of {row['steps']} (warm-up included)"
        memory = row["peak_gpu_memory_gib"] if row["peak_gpu_memory_gib"] is not None else "—"
        lines.append(
            f"| {row['variant']} | {steps} | {row['tokens_per_s']:,.0f} | {row['examples_per_s']} | "
            f"{_percent(row.get('mfu'))} | {_percent(row.get('hardware_mfu'))} | {memory} | "
            f"{row['hours_per_thesis_epoch']} |"
        )
    if run["judging"]:
        lines += ["", "| judging row | workload | engine | batch | evaluations/s | timed (after warm-up) | parsed | "
                  "identical replies |", "|---|---|---|---:|---:|---:|---:|---|"]  # fmt: skip
    for row in run["judging"]:
        name = row.get("row") or f"{row['engine']}, prefix reuse {'on' if row.get('reuse') else 'off'}"
        warm = row.get("warmup_items")
        timed = f"{row['items']} (after {warm})" if warm is not None else f"{row['items']} (warm-up included)"
        versus = row.get("compared_with")
        same = "–" if row["identical_replies"] is None else f"{row['identical_replies']}/{row['items']}"
        same += f" vs {versus}" if versus else ""
        lines.append(
            f"| {name} | {row['workload']} | {row['engine']} | {row['batch']} | {row['evaluations_per_s']} | "
            f"{timed} | {row['parsed']}/{row['items']} | {same} |"
        )
    return [*lines, ""]


def _percent(value: float | None) -> str:
    return f"{value:.1%}" if value is not None else "—"


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
