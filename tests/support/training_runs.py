"""Launching real training runs from tests (accelerate + train.py, as a user would)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "configs/train/smollm2_cpu_smoke.yaml"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
BIN = Path(sys.executable).parent


def launch(args: list[str], **popen: object) -> subprocess.Popen[str]:
    """`accelerate launch ARGS` from the repository root, output captured as text."""
    return subprocess.Popen(
        [str(BIN / "accelerate"), "launch", *args],
        cwd=REPO,
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **popen,  # type: ignore[arg-type]
    )


def smoke_args(records: Path, out: Path, *more: str) -> list[str]:
    """train.py with the CPU smoke config on `records`, writing to `out`."""
    sets = ["--set", f"data.train={records}", "--set", f"training.output_dir={out}"]
    return ["train.py", "--config", str(SMOKE), *sets, *more]


@dataclass(frozen=True)
class TrainedRun:
    records: Path
    out: Path
    log: str
    args: list[str]

    @property
    def adapter(self) -> Path:
        return self.out / "adapter"

    def history(self) -> list[dict]:
        return [json.loads(line) for line in (self.out / "log_history.jsonl").read_text().splitlines()]


def smoke_config(tmp_path: Path, records: Path, **sections: dict) -> Path:
    """The CPU smoke training config on `records`, with some sections updated, written to tmp_path."""
    import yaml

    config = yaml.safe_load(SMOKE.read_text())
    config["data"]["train"] = str(records)
    config["training"]["output_dir"] = str(tmp_path / "run")
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    path = tmp_path / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path
