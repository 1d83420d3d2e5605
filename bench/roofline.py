"""This machine's limits, measured in the run that reports against them: matmul FLOP/s (what
prefill and training are bound by) and memory bandwidth (what decoding one sequence is bound by)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def median_seconds(step: Callable[[], Any], repeats: int = 5) -> float:
    """The median wall time of `repeats` runs of `step`, after one warm-up run."""
    step()  # warm-up
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def machine_limits(dtype: Any) -> dict[str, float]:
    """Matmul FLOP/s (n=2048, the model's dtype) and memory bandwidth (a 1 GiB copy reads and writes
    2 GiB), with torch on every core: the limits prefill (compute) and decode (memory) are bound by."""
    import torch

    n = 2048
    a, b = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
    flops = 2 * n**3 / median_seconds(lambda: a @ b)
    source = torch.empty(256 * 1024**2, dtype=torch.float32).fill_(1.0)
    target = torch.empty_like(source)
    bandwidth = 2 * source.numel() * 4 / median_seconds(lambda: target.copy_(source))
    return {"matmul_flops_per_s": flops, "memory_bytes_per_s": bandwidth}


def forward_flops_per_token(matmul_parameters: int, layers: int, hidden: int, tokens: int) -> float:
    """FLOPs of one forward pass per token of a T-token sequence: 2·P (each weight matrix, P the
    weights multiplied per token) + 2·L·d·T (causal attention: QK^T and AV over half of the T×T pairs,
    2·2·d·T²/2 per layer, divided by T)."""
    return 2 * matmul_parameters + 2 * layers * hidden * tokens


def lora_training_flops_per_token(forward: float, gradient_checkpointing: bool) -> float:
    """FLOPs of a LoRA training step per token: the forward, the backward's input gradients (as much
    again; the frozen base needs no weight gradients, the adapters' are under 1 % here), and with
    gradient checkpointing the forward once more: 3× or 2× the forward."""
    return forward * (3 if gradient_checkpointing else 2)


def model_shape(folder: str) -> dict[str, Any]:
    """A transformers model's weights multiplied per token (every parameter but an untied input
    embedding, a lookup), layers and width, counted on the meta device (no weights loaded)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    parameters = sum(p.numel() for p in model.parameters())  # tied weights are counted once
    tied = bool(getattr(config, "tie_word_embeddings", False))
    embedding = model.get_input_embeddings().weight.numel()
    return {
        "parameters": parameters,
        "matmul_parameters": parameters if tied else parameters - embedding,
        "layers": config.num_hidden_layers,
        "hidden": config.hidden_size,
    }
