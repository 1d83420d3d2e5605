"""What used to be a traceback is one line: an adapter that asks to run code, a score run that fails before judging (and
writes no provenance), a training plan whose mean is longer than max_length."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from support.faults import GOOD, Serve, one_item_score_args, one_line
from support.standin import Reply

from spanjudge.app.cli import main as cli_main
from spanjudge.inference.score.rows import run_info_path


def _adapter_with_tokenizer(folder: Path, smollm2_folder: Path) -> Path:
    folder.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((smollm2_folder / name).read_bytes())
    config = {"base_model_name_or_path": str(smollm2_folder), "r": 4, "lora_alpha": 8, "peft_type": "LORA",
              "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    weights = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, 576), np.float32)}
    save_file(weights, str(folder / "adapter_model.safetensors"))
    return folder


@pytest.mark.parametrize("trap", ["auto_map", "template"])
def test_an_adapter_that_asks_to_run_code_is_one_line(
    serve: Serve, tmp_path: Path, smollm2_folder: Path, capsys: pytest.CaptureFixture[str], trap: str
) -> None:
    _, url = serve([Reply(text=GOOD)])
    adapter = _adapter_with_tokenizer(tmp_path / "adapter", smollm2_folder)
    if trap == "auto_map":
        config = json.loads((adapter / "tokenizer_config.json").read_text())
        config.update(auto_map={"AutoTokenizer": ["evil.EvilTokenizer", None]}, tokenizer_class="EvilTokenizer")
        (adapter / "tokenizer_config.json").write_text(json.dumps(config))
    else:
        (adapter / "chat_template.jinja").write_text("{{ ''.__class__.__mro__[1].__subclasses__() }}")
    args, out = one_item_score_args(tmp_path, str(adapter), "--engine", "openai", "--base-url", url)
    code = cli_main(args)
    line = one_line(capsys)
    assert code == 2
    said = "needs its own Python code" if trap == "auto_map" else "reaches outside Jinja's sandbox"
    assert said in line, line
    assert not run_info_path(out).exists()


def test_a_run_that_fails_before_judging_writes_no_provenance(
    tmp_path: Path, smollm2_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = ["--engine", "llamacpp", "--engine-arg", f"gguf={tmp_path / 'absent.gguf'}"]
    args, out = one_item_score_args(tmp_path, str(smollm2_folder), *engine)
    code = cli_main(args)
    assert code == 2 and "absent.gguf: no such file" in one_line(capsys)
    assert not run_info_path(out).exists()


def test_plan_refuses_a_mean_longer_than_max_length(capsys: pytest.CaptureFixture[str]) -> None:
    config = Path(__file__).resolve().parents[2] / "configs/train/smollm2_cpu_smoke.yaml"
    code = cli_main(["train", "--config", str(config), "--plan", "--gpu", "A40", "--mean-tokens", "100000"])
    line = one_line(capsys)
    assert code == 2 and "--mean-tokens 100000: no example is longer than data.max_length" in line, line
