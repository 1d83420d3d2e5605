"""A randomly initialised 2-layer Llama saved with SmolLM2's real tokenizer (it has a chat template):
what the tests that need a real architecture, a real tokenizer and seconds instead of minutes load."""

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
