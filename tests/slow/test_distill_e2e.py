"""Import → train → score → span agreement on a handful of real quintd-1 items, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spanjudge.eval.spans.agreement import span_agreement
from spanjudge.eval.spans.judging import quintd_tables

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled", "COLUMNS": "200"}


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(BIN / "spanjudge"), *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_import_train_score_on_quintd(tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "configs/import/quintd1_gpt4_wikidata.yaml").read_text())
    config["source"]["table_range"] = [0, 4]  # 4 tables x 4 systems
    config["validation_fraction"] = 0.25
    (tmp_path / "import.yaml").write_text(yaml.safe_dump(config))
    _run("import", "--config", str(tmp_path / "import.yaml"), "--out", str(tmp_path / "teacher"))
    run = json.loads((tmp_path / "teacher" / "run.json").read_text())
    assert (run["records"], run["train"], run["validation"]) == (16, 12, 4)

    sets = {
        "data.train": tmp_path / "teacher",
        "training.output_dir": tmp_path / "run",
        "training.max_steps": 2,
        "training.save_steps": 2,
    }
    _run("train", "--config", "configs/train/smollm2_cpu_smoke.yaml", *[f"--set={k}={v}" for k, v in sets.items()])
    adapter = tmp_path / "run" / "adapter"
    assert (adapter / "adapter_model.safetensors").is_file()

    # the validation records are held-out inputs in the annotate format: score reads them as they are
    scores = tmp_path / "scores.jsonl"
    _run("score", "--model", str(adapter), "--data", str(tmp_path / "teacher" / "validation.jsonl"),
         "--out", str(scores), "--limit", "2", "--max-new-tokens", "48", "--retries", "0")  # fmt: skip
    rows = [json.loads(line) for line in scores.read_text().splitlines()]
    assert len(rows) == 2 and all(r["task"] == "quintd1" and r["aspect"] == "accuracy" for r in rows)

    # against the human spans of the same outputs (record ids carry the quintd document id)
    doc_ids = {r["id"].rsplit("/", 1)[0]: r for r in rows}
    docs = [d for d in quintd_tables("human", (0, 4)) if d.id in doc_ids]
    assert len(docs) == 2
    predictions = {
        d.id: None
        if doc_ids[d.id]["evaluation"]["score"] is None
        else [(e["start"], e["end"]) for e in doc_ids[d.id]["evaluation"]["errors"] if e.get("start") is not None]
        for d in docs
    }
    row = span_agreement(docs, predictions, n_resamples=20)
    assert row["asked"] == 2 and row["scored"] == sum(p is not None for p in predictions.values())
