"""A randomly initialised 2-layer Llama (or Gemma 3, with a sliding-window layer) saved with SmolLM2's real
tokenizer (it has a chat template): what the tests that need a real architecture, a real tokenizer and seconds
instead of minutes load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.shipped_models import smollm2_gguf

SHAPE = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 4096}  # fmt: skip


def tiny_llama(folder: Path, **config: Any) -> tuple[Any, Any]:
    """The model (seed 0; `config` over SHAPE) and the tokenizer, both saved in `folder`."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf()))
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{**SHAPE, "vocab_size": len(tokenizer), **config}))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


def tiny_gemma3(folder: Path, window: int = 8) -> tuple[Any, Any]:
    """A 2-layer Gemma 3 (seed 0) whose first, local layer sees `window` tokens, and the tokenizer, saved in
    `folder`."""
    import torch
    from transformers import AutoTokenizer, Gemma3ForCausalLM, Gemma3TextConfig

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf()))
    torch.manual_seed(0)
    config = Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=8, vocab_size=len(tokenizer), initializer_range=0.4,
                              sliding_window=window, layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    model = Gemma3ForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer
