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


def tiny_gemma3_model(vocab_size: int, window: int = 8, seed: int = 0) -> Any:
    """A 2-layer Gemma 3 with random weights (seed `seed`, spread-out distributions) whose first, local layer sees
    `window` tokens."""
    import torch
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    torch.manual_seed(seed)
    config = Gemma3TextConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                              num_key_value_heads=2, head_dim=8, vocab_size=vocab_size, initializer_range=0.4,
                              sliding_window=window, layer_types=["sliding_attention", "full_attention"])  # fmt: skip
    return Gemma3ForCausalLM(config).eval()


def tiny_gemma3(folder: Path, window: int = 8) -> tuple[Any, Any]:
    """`tiny_gemma3_model` (seed 0) and the tokenizer, saved in `folder`."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf()))
    model = tiny_gemma3_model(len(tokenizer), window)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer
