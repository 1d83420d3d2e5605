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
    # three of the five variants (packing and no-checkpointing ran on the H200: bench/results/gpu.md)
    done = _run("--shape", "tiny", "--device", "cpu", "--steps", "1", "--judge-items", "1", "--batch", "2",
                "--max-new-tokens", "8", "--variants", "lora,qlora-nf4,lora-padding-free",
                "--work", str(tmp_path / "work"), "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    payload = json.loads(out.with_suffix(".json").read_text())
    rows = {row["variant"]: row for row in payload["training"]}
    assert set(rows) == {"lora", "lora-padding-free", "qlora-nf4"}
    for row in rows.values():
        assert "error" not in row, row  # padding-free without packing included (TRL 1.16 refused max_length there)
        assert row["steps"] == 1 and row["tokens_per_s"] > 0 and row["examples_per_s"] > 0
        assert row["mfu"] is None and row["peak_gpu_memory_gib"] is None  # no GPU number from a CPU run
    # the architecture is Llama 3.1 8B's with the tiny sizes: the GQA ratio, vocab and RoPE scaling kept
    config = json.loads((tmp_path / "work/tiny/model/config.json").read_text())
    assert config["vocab_size"] == 128256 and config["num_key_value_heads"] == 2 and config["num_hidden_layers"] == 2
    assert config["rope_parameters"]["rope_type"] == "llama3" and config["rope_parameters"]["factor"] == 8.0
    assert (tmp_path / "work/tiny/model/model.safetensors").is_file()
    assert not list((tmp_path / "work/tiny/model").glob("*.bin"))
    judging = [(r["workload"], r["engine"], r["batch"], r["reuse"], r["items"]) for r in payload["judging"]]
    assert judging == [
        ("distinct", "transformers", 1, True, 1),
        ("distinct", "transformers", 2, True, 1),
        ("shared16", "transformers", 2, False, 16),  # SummEval's shape: 16 outputs of the article
        ("shared16", "transformers", 2, True, 16),
    ]
    # the reuse row is compared with the one without; the others have nothing to compare with
    assert [r["identical_replies"] is None for r in payload["judging"]] == [True, True, True, False]
    assert 0 <= payload["judging"][-1]["identical_replies"] <= 16 and payload["complete"] is True
    report = out.with_suffix(".md").read_text()
    assert "| qlora-nf4 |" in report and "no GPU" in report and "| shared16 | transformers | 2 | on |" in report
    assert "Incomplete" not in report


def test_the_gpu_script_refuses_cuda_where_there_is_none(tmp_path: Path) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is here")
    done = _run("--work", str(tmp_path), "--out", str(tmp_path / "gpu"))
    assert done.returncode == 1 and "no CUDA device here" in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "gpu.json").exists()
