"""What the fault-injection tests share: the one-item score call against a stand-in judge, the items file,
a tiny adapter folder, and the check that an error is one line (no traceback)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from spanjudge.app.cli import main as cli_main

from .standin import StandIn

TASK, ASPECT = "qags_xsum", "factual consistency"
GOOD = "Error 1:\nLocation: on a hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"
Serve = Callable[..., tuple[StandIn, str]]  # the `serve` fixture: a scripted stand-in server and its URL


def items(path: Path, count: int, first: int = 0) -> Path:
    """A JSONL file of `count` summaries to judge (ids item-FIRST ...)."""
    rows = [
        {"id": f"item-{n}", "article": f"The cat {n} sat on the mat.", "summary": "A cat sat on a hat."}
        for n in range(first, first + count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def served_score_args(url: str, data: Path, out: Path, *more: str) -> list[str]:
    """`spanjudge score` of `data` with the judge a server at `url` serves."""
    return [
        "score", "--model", "stand-in-judge", "--engine", "openai", "--base-url", url, "--served-model", "judge",
        "--data", str(data), "--out", str(out), "--task", TASK, "--aspect", ASPECT,
        "--input", "Article=article", "--output-field", "summary", "--max-new-tokens", "96", "--retries", "0", *more,
    ]  # fmt: skip


def served_score(url: str, data: Path, out: Path, *more: str) -> int:
    return cli_main(served_score_args(url, data, out, *more))


def one_item_score_args(tmp_path: Path, model: str, *engine: str) -> tuple[list[str], Path]:
    """`spanjudge score` of one item with the judge `model` on `engine` (its flags), and the results file."""
    data, out = tmp_path / "items.jsonl", tmp_path / "scores.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "The cat sat.", "summary": "A cat sat."}) + "\n")
    args = ["score", "--model", model, *engine, "--data", str(data), "--out", str(out), "--task", TASK,
            "--aspect", ASPECT, "--input", "Article=article", "--output-field", "summary",
            "--retries", "0"]  # fmt: skip
    return args, out


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The last line printed to stderr, after checking no traceback was printed."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines, "nothing printed"
    return lines[-1]


def tiny_adapter(folder: Path, *, pickle_only: bool = False) -> Path:
    """A LoRA adapter folder as `spanjudge train` leaves it (tiny real safetensors weights)."""
    folder.mkdir(parents=True)
    config = {"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct", "r": 4, "lora_alpha": 8,
              "peft_type": "LORA", "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    weights = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, 8), np.float32)}
    if pickle_only:
        (folder / "adapter_model.bin").write_bytes(b"\x80\x04K\x01.")  # a pickle: never to be loaded
    else:
        save_file(weights, str(folder / "adapter_model.safetensors"))
    (folder / "spanjudge.json").write_text(json.dumps({"base_model": "@smollm2"}))
    return folder


def results_row(
    item: str, score: object, *, aspect: str = "relevance", severity: object = 2, model: str = "judge-a"
) -> dict:
    """A row of a results file with one error, as `spanjudge score` writes it."""
    error = {"location": "x", "start": 0, "end": 1, "severity": severity, "explanation": "e"}
    return {"id": item, "task": "summeval", "aspect": aspect, "model": model, "output": "xyz",
            "evaluation": {"errors": [error], "score": score}}  # fmt: skip
