"""The backends on real models: llama.cpp's OpenAI-compatible server on 127.0.0.1 with the
PyPI-shipped SmolLM2-135M-Instruct and Gemma 3 270M, and transformers loading SmolLM2
from its GGUF. Replies are short (max_tokens <= 32): the machine has 2 CPU cores."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from spanjudge.inference.backends import (
    BackendSpec,
    CachedBackend,
    CallResult,
    ChatRequest,
    Completion,
    LLMCache,
    Message,
    SamplingParams,
    make_backend,
)
from spanjudge.inference.backends.llamacpp import LlamaCppServer
from spanjudge.inference.shipped_models import free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

GREEDY = SamplingParams(temperature=0.0, max_tokens=16, seed=0)


def _spec(*endpoints: str, **overrides: Any) -> BackendSpec:
    fields: dict[str, Any] = {"kind": "openai", "model": "smollm2", "endpoints": endpoints, "timeout_s": 120}
    return BackendSpec(**{**fields, **overrides})


def _texts(results: list[CallResult]) -> list[str]:
    assert all(isinstance(r, Completion) for r in results), results
    return [r.text for r in results if isinstance(r, Completion)]


@pytest.fixture
def fresh_smollm2_pair(smollm2_path: Path, start_llamacpp: Callable[..., LlamaCppServer]) -> tuple[str, str]:
    """Two new real llama.cpp servers with the same model, for the endpoint pool. New, both: llama-cpp-python
    reuses the cached prefix of a server's earlier prompts, read in another batch shape, whose rounding flipped
    this small model's first greedy token on an AVX2 CPU (so each server gets one request below)."""
    return start_llamacpp(smollm2_path, "smollm2").base_url, start_llamacpp(smollm2_path, "smollm2").base_url


def test_openai_backend_chats_with_a_real_server(smollm2_server: LlamaCppServer) -> None:
    requests = [
        ChatRequest.user("Name a colour.", GREEDY),
        ChatRequest(
            messages=(
                Message(role="system", content="Answer in one word."),
                Message(role="user", content="Capital of France?"),
            ),
            params=GREEDY,
        ),
    ]
    seen: dict[int, CallResult] = {}
    backend = make_backend(_spec(smollm2_server.base_url, concurrency=2))
    results = backend.generate(requests, on_result=seen.__setitem__)
    # each reply is reported once, under its request's index, and returned in request order; greedy
    # text is not compared across runs: llama.cpp batches concurrent slots (and reuses cached prompts)
    # differently from run to run, which can flip a near-tie token
    assert sorted(seen) == [0, 1] and [seen[0], seen[1]] == results
    for result in results:
        assert isinstance(result, Completion), result
        assert result.text.strip()
        assert result.finish_reason in {"stop", "length"}
        assert result.completion_tokens is not None and 1 <= result.completion_tokens <= 16
        assert result.prompt_tokens and result.endpoint == smollm2_server.base_url and result.attempts == 1
    colour, capital = (any(word in text for word in ("France", "Paris")) for text in _texts(results))
    assert capital and not colour


def test_completions_api_on_a_base_model_without_chat_template(gemma3_path: Path, tmp_path: Path) -> None:
    with LlamaCppServer(gemma3_path, alias="gemma3", n_ctx=1024, log_path=tmp_path / "gemma3.log") as server:
        backend = make_backend(_spec(server.base_url, model="gemma3", api="completions"))
        request = ChatRequest(
            messages=(
                Message(role="system", content="The following is a list of fruits."),
                Message(role="user", content="Apples, pears,"),
            ),
            params=SamplingParams(max_tokens=8),
        )
        [result] = backend.generate([request])
    assert isinstance(result, Completion), result
    assert result.completion_tokens is not None and 1 <= result.completion_tokens <= 8
    assert result.finish_reason in {"stop", "length"}
    assert backend.model_id == "openai-completions:gemma3"


def test_pool_of_two_real_servers_shares_the_work(fresh_smollm2_pair: tuple[str, str]) -> None:
    urls = fresh_smollm2_pair
    requests = [ChatRequest.user("Say one word.", GREEDY)] * 2
    results = make_backend(_spec(*urls, concurrency=1)).generate(requests)
    assert {r.endpoint for r in results if isinstance(r, Completion)} == set(urls)
    assert len(set(_texts(results))) == 1  # the same model greedy on either server: the same text


def test_pool_survives_a_dead_endpoint(smollm2_server: LlamaCppServer) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    backend = make_backend(_spec(dead, smollm2_server.base_url, retries=2, backoff_s=0.05))
    results = backend.generate([ChatRequest.user(f"Count to {n}.", GREEDY) for n in range(1, 4)])
    assert all(isinstance(r, Completion) and r.endpoint == smollm2_server.base_url for r in results)
    assert any(r.attempts == 2 for r in results)  # the first request met the dead endpoint, then moved over


def test_cache_answers_a_rerun_with_no_model_calls(smollm2_server: LlamaCppServer, tmp_path: Path) -> None:
    requests = [ChatRequest.user("Name an animal.", GREEDY), ChatRequest.user("Name a tree.", GREEDY)]
    path = tmp_path / "cache.sqlite"
    with LLMCache(path) as cache:
        first = CachedBackend(make_backend(_spec(smollm2_server.base_url)), cache)
        first_texts = _texts(first.generate(requests))
    assert (first.model_calls, first.cache_hits) == (2, 0)
    # a new process would open the file afresh: the stored completions are there
    with LLMCache(path) as reopened:
        again = CachedBackend(make_backend(_spec(smollm2_server.base_url)), reopened)
        results = again.generate(requests)
    assert (again.model_calls, again.cache_hits) == (0, 2)
    assert _texts(results) == first_texts
    assert all(isinstance(r, Completion) and r.cached and r.seconds == 0.0 for r in results)


@pytest.fixture(scope="module")
def smollm2_transformers(smollm2_path: Path) -> Iterator[Any]:
    folder, name = os.path.split(smollm2_path)
    spec = BackendSpec(kind="transformers", model=folder, options={"gguf_file": name, "batch_size": 2})
    backend = make_backend(spec)
    try:
        yield backend
    finally:
        backend.close()


def test_transformers_backend_generates_greedily_in_one_batch(smollm2_transformers: Any) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=6)
    requests = [
        ChatRequest.user("Write a long story about a cat.", params),
        ChatRequest.user("Write a long poem about the sea.", params),
    ]
    first = smollm2_transformers.generate(requests)
    second = smollm2_transformers.generate(requests)
    assert _texts(first) == _texts(second) and all(_texts(first))
    for result in first:
        assert isinstance(result, Completion)
        # six tokens are not enough to finish a long story: max_tokens ran out
        assert (result.finish_reason, result.completion_tokens) == ("length", 6)
        assert result.prompt_tokens and result.seconds > 0


def test_transformers_backend_cuts_at_stop_strings(smollm2_transformers: Any) -> None:
    request = ChatRequest.user("Write a long story about a cat.", SamplingParams(max_tokens=6))
    [plain] = _texts(smollm2_transformers.generate([request]))
    stop = plain[len(plain) // 2 :].strip()[:3]
    assert stop, plain
    cut_request = ChatRequest.user(request.messages[0].content, SamplingParams(max_tokens=6, stop=(stop,)))
    [result] = smollm2_transformers.generate([cut_request])
    assert isinstance(result, Completion)
    assert (result.text, result.finish_reason) == (plain[: plain.find(stop)], "stop")


@pytest.mark.gpu
@pytest.mark.timeout(900)
def test_vllm_offline_batch_on_gpu(smollm2_path: Path, tmp_path: Path) -> None:
    """vLLM on CUDA with SmolLM2, saved as a plain HF folder from its GGUF (no hub access)."""
    pytest.importorskip("vllm")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder, name = os.path.split(smollm2_path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
    model.hf_quantizer = None  # a dequantized GGUF model must forget its quantizer to be saved
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(tmp_path / "smollm2")
    AutoTokenizer.from_pretrained(folder, gguf_file=name).save_pretrained(tmp_path / "smollm2")
    spec = BackendSpec(
        kind="vllm",
        model=str(tmp_path / "smollm2"),
        options={"dtype": "bfloat16", "max_model_len": 2048, "gpu_memory_utilization": 0.3},
    )
    with make_backend(spec) as backend:
        requests = [ChatRequest.user(f"Count to {n}.", SamplingParams(max_tokens=16)) for n in range(1, 5)]
        results = backend.generate(requests)
    assert len(_texts(results)) == 4
    assert all(isinstance(r, Completion) and r.finish_reason in {"stop", "length"} for r in results)


def test_a_server_dies_with_the_process_that_started_it(smollm2_path: Path) -> None:
    """A run killed with SIGKILL cannot call `stop()`: the server must not outlive it (it would hold a
    core and a port until someone kills it by hand), even in the middle of a long reply that nobody will
    read (a SIGTERM lets uvicorn finish the reply first: minutes of a loaded CPU)."""
    import subprocess
    import sys
    import time

    script = (
        "import sys, threading, time\n"
        "from openai import OpenAI\n"
        "from spanjudge.inference.backends.llamacpp import LlamaCppServer\n"
        "server = LlamaCppServer(sys.argv[1], alias='orphan', n_ctx=4096, n_threads=1).start()\n"
        "client = OpenAI(base_url=server.base_url, api_key='none')\n"
        "ask = lambda: client.completions.create(model='orphan', prompt='1, 2, 3,', max_tokens=4000,\n"
        "                                        logit_bias={'0': -100, '1': -100, '2': -100})\n"
        "threading.Thread(target=ask, daemon=True).start()\n"
        "time.sleep(2)\n"  # the reply is being written: 4,000 tokens, far more than the wait below
        "print(server.process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", script, str(smollm2_path)], stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    server_pid = int(parent.stdout.readline())
    assert _running(server_pid)
    parent.kill()
    parent.wait()
    deadline = time.monotonic() + 10
    while _running(server_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _running(server_pid), f"llama.cpp server {server_pid} outlived the process that started it"


def _running(pid: int) -> bool:
    """Alive and not a zombie (a container's PID 1 may never reap the orphan)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, IndexError):
        return False
    return state != "Z"
