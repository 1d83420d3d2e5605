"""Loading a PEFT model prints no library noise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_loading_a_peft_model_prints_no_library_noise(tmp_path: Path) -> None:
    script = """
import warnings
warnings.simplefilter("default")
import spanjudge.inference  # installs the filters, as every command does
from peft import LoraConfig, get_peft_model, PeftModel
from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, vocab_size=64))
get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained("adapter")
PeftModel.from_pretrained(LlamaForCausalLM(model.config), "adapter")
print("loaded")
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0 and "loaded" in done.stdout, done.stderr
    assert "kernels" not in done.stderr and "is_gradient_checkpointing" not in done.stderr, done.stderr
