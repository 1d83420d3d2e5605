"""bench/gpu/run.py at a tiny shape on CPU: every line of the GPU measurement script runs in CI
(model build, the five training variants through train.py, judging at batch 1 and batched,
the report), only the shape and the device differ. No number from here is a GPU number."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench/gpu/run.py"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=REPO, env=ENV, capture_output=True, text=True,
                          timeout=900)  # fmt: skip


@pytest.mark.slow
def test_the_gpu_script_runs_end_to_end_at_tiny_shape_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "results" / "gpu"
    earlier = {"device": "NVIDIA H200", "shape": "8b", "complete": False, "parameters": 1, "max_length": 4096,
               "mean_tokens_per_example": 2110.7, "model_flops_per_token": 3.2e10, "judging": [], "thesis": {},
               "training": [{"variant": "lora", "steps": 4, "tokens_per_s": 3241.1, "examples_per_s": 1.536,
                             "mfu": 0.1046, "peak_gpu_memory_gib": 23.87, "hours_per_thesis_epoch": 6.69}]}  # fmt: skip
    out.parent.mkdir(parents=True)
    out.with_suffix(".json").write_text(json.dumps(earlier))  # the first format: one run, no date
    # three of the variants: the baseline, a Liger one (refused on CPU) and padding-free; every variant's
    # settings are checked in tests/unit/test_bench_scripts.py, QLoRA's CPU training in test_training.py
    done = _run("--shape", "tiny", "--device", "cpu", "--steps", "4", "--max-length", "256", "--judge-items", "2",
                "--batch-one-items", "1", "--batch", "2", "--max-new-tokens", "4", "--note", "CI's check",
                "--variants", "lora,lora-liger-no-checkpointing,lora-padding-free",
                "--work", str(tmp_path / "work"), "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(out.with_suffix(".json").read_text())
    assert len(payload["runs"]) == 2 and payload["runs"][0]["device"] == "NVIDIA H200"  # the earlier run is kept
    run = payload["runs"][-1]
    assert run["complete"] is True and run["note"] == "CI's check" and run["software"]["trl"]
    rows = {row["variant"]: row for row in run["training"]}
    assert list(rows) == ["lora", "lora-liger-no-checkpointing", "lora-padding-free"]
    assert "Triton kernels for a CUDA GPU" in rows.pop("lora-liger-no-checkpointing")["error"]  # refused on CPU
    for row in rows.values():
        assert "error" not in row, row  # padding-free without packing included (TRL 1.16 refused max_length there)
        assert row["steps"] == 4 and row["timed_steps"] == 1 and not row["warmup_included"]  # steps 4..N timed
        assert row["tokens_per_s"] > 0 and row["examples_per_s"] > 0 and row["whole_run_tokens_per_s"] > 0
        assert row["mfu"] is None and row["hardware_mfu"] is None and row["peak_gpu_memory_gib"] is None
    # the architecture is Llama 3.1 8B's with the tiny sizes: the GQA ratio, vocab and RoPE scaling kept
    config = json.loads((tmp_path / "work/tiny/model/config.json").read_text())
    assert config["vocab_size"] == 128256 and config["num_key_value_heads"] == 2 and config["num_hidden_layers"] == 2
    assert config["rope_parameters"]["rope_type"] == "llama3" and config["rope_parameters"]["factor"] == 8.0
    assert (tmp_path / "work/tiny/model/model.safetensors").is_file()
    assert not list((tmp_path / "work/tiny/model").glob("*.bin"))
    judging = [(r["row"], r["batch"], r["warmup_items"], r["items"]) for r in run["judging"]]
    assert judging == [
        ("batch 1", 1, 1, 1),
        ("LoRA unmerged", 2, 2, 2),
        ("LoRA merged", 2, 2, 2),
        ("continuous batching", 2, 2, 2),
        ("SummEval shape", 2, 2, 2),  # 16 outputs of each article: warm-up and timed share one
        ("SummEval shape, prefix reuse", 2, 2, 2),
    ]
    compared = [r["compared_with"] for r in run["judging"]]
    assert compared == [None, None, "LoRA unmerged", "LoRA merged", None, "SummEval shape"]
    for row in run["judging"]:
        assert row["evaluations_per_s"] > 0
        assert row["identical_replies"] is None or 0 <= row["identical_replies"] <= row["items"]
    report = out.with_suffix(".md").read_text()
    assert "## " in report and "NVIDIA H200" in report and "| lora-padding-free | 1 of 4 |" in report
    assert "| continuous batching | distinct | transformers | 2 |" in report and "vs LoRA merged" in report
    assert "no GPU" in report and "Incomplete" in report  # the earlier run was cut short; this one was not


def test_the_gpu_script_refuses_cuda_where_there_is_none(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    done = _run("--work", str(tmp_path), "--out", str(tmp_path / "gpu"))
    assert done.returncode == 1 and "no CUDA device here" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "gpu.json").exists()
