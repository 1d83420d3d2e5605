"""The backend layer's failure paths, pool, cache and Ollama client, without a model.

A real server cannot be made to fail on demand (answer 500 once, hang, rate-limit), so
these tests run the real `openai` / `ollama` clients and the real runner against a
minimal stand-in: a stdlib `http.server` on 127.0.0.1 that answers in the OpenAI JSON
shape (`/v1/chat/completions`) or Ollama's native shape (`/api/chat`, non-streaming), as
scripted per hit, and counts the hits. Real models on a real llama.cpp server are in
test_backends_real.py.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support.standin import Reply

from spanjudge.inference.backends import (
    BackendError,
    BackendSpec,
    CachedBackend,
    CallFailure,
    CallResult,
    ChatRequest,
    Completion,
    LLMCache,
    Message,
    SamplingParams,
    make_backend,
)
from spanjudge.inference.backends.ollama_native import OllamaBackend
from spanjudge.inference.backends.openai_compat import OpenAIBackend, flatten_messages
from spanjudge.inference.shipped_models import free_port

pytestmark = pytest.mark.timeout(120)


def _spec(*endpoints: str, **overrides: Any) -> BackendSpec:
    fields: dict[str, Any] = {"kind": "openai", "model": "stand-in", "endpoints": endpoints, "backoff_s": 0.01}
    return BackendSpec(**{**fields, **overrides})


def _requests(count: int, **params: Any) -> list[ChatRequest]:
    return [ChatRequest.user(f"question {i}", SamplingParams(max_tokens=8, **params)) for i in range(count)]


def _dead_url() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"  # a port nobody listens on: connection refused


# -- OpenAI-compatible backend: success and failure paths ---------------------------------


def test_success_maps_reply_and_calls_on_result_once_per_request(serve) -> None:
    stand_in, url = serve([Reply(text="fine")])
    seen: list[tuple[int, CallResult]] = []
    with OpenAIBackend(_spec(url, concurrency=2)) as backend:
        results = backend.generate(_requests(3), on_result=lambda i, r: seen.append((i, r)))
    assert sorted(i for i, _ in seen) == [0, 1, 2]
    assert [dict(seen)[i] for i in range(3)] == results
    for result in results:
        assert isinstance(result, Completion)
        assert (result.text, result.finish_reason, result.model) == ("fine", "stop", "stand-in")
        assert (result.prompt_tokens, result.completion_tokens, result.attempts) == (7, 3, 1)
        assert result.endpoint == url and result.seconds > 0 and not result.cached
    assert stand_in.paths == ["/v1/chat/completions"] * 3
    [body] = [b for b in stand_in.bodies if b["messages"] == [{"role": "user", "content": "question 0"}]]
    assert (body["max_tokens"], body["temperature"], body["top_p"], body["seed"]) == (8, 0.0, 1.0, 0)


def test_results_come_back_in_request_order_when_they_finish_out_of_order(serve) -> None:
    def slow_first(body: dict[str, Any]) -> Reply:
        first = body["messages"][0]["content"] == "question 0"
        return Reply(text="slow", delay=0.5) if first else Reply(text="fast")

    _, url = serve(slow_first)
    order: list[int] = []
    backend = OpenAIBackend(_spec(url, concurrency=2))
    results = backend.generate(_requests(2), on_result=lambda i, r: order.append(i))
    assert order == [1, 0]  # on_result fires as each finishes ...
    assert [r.text for r in results if isinstance(r, Completion)] == ["slow", "fast"]  # ... results keep order


def test_server_error_then_success_is_retried(serve) -> None:
    stand_in, url = serve([Reply(status=500), Reply(text="second try")])
    [result] = OpenAIBackend(_spec(url, retries=2)).generate(_requests(1))
    assert isinstance(result, Completion)
    assert (result.text, result.attempts, stand_in.hits) == ("second try", 2, 2)


def test_persistent_server_error_fails_after_retries(serve) -> None:
    stand_in, url = serve([Reply(status=503)])
    [result] = OpenAIBackend(_spec(url, retries=2)).generate(_requests(1))
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, result.endpoint, stand_in.hits) == ("server", 3, url, 3)
    assert "503" in result.reason


def test_rate_limit_is_retried_then_reported(serve) -> None:
    stand_in, url = serve([Reply(status=429), Reply(status=429), Reply(text="let in")])
    [result] = OpenAIBackend(_spec(url, retries=2)).generate(_requests(1))
    assert isinstance(result, Completion) and result.attempts == 3

    stand_in, url = serve([Reply(status=429)])
    [result] = OpenAIBackend(_spec(url, retries=1)).generate(_requests(1))
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, stand_in.hits) == ("rate_limit", 2, 2)


def test_client_error_is_not_retried(serve) -> None:
    stand_in, url = serve([Reply(status=400)])
    [result] = OpenAIBackend(_spec(url, retries=3)).generate(_requests(1))
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, stand_in.hits) == ("client", 1, 1)
    assert "HTTP 400" in result.reason


def test_hanging_server_times_out(serve) -> None:
    stand_in, url = serve([Reply(delay=30)])
    started = time.monotonic()
    [result] = OpenAIBackend(_spec(url, timeout_s=1.0, retries=0)).generate(_requests(1))
    assert time.monotonic() - started < 10
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, stand_in.hits) == ("timeout", 1, 1)


def test_connection_refused_is_a_connection_failure() -> None:
    url = _dead_url()
    [result] = OpenAIBackend(_spec(url, retries=1)).generate(_requests(1))
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, result.endpoint) == ("connection", 2, url)


def test_failure_budget_disables_the_model_without_further_calls(serve) -> None:
    stand_in, url = serve([Reply(status=500)])
    backend = OpenAIBackend(_spec(url, retries=1, max_consecutive_failures=2))
    results = backend.generate(_requests(5))
    assert [r.kind for r in results if isinstance(r, CallFailure)] == ["server"] * 2 + ["disabled"] * 3
    assert stand_in.hits == 4  # two requests with one retry each; the other three never reach the server
    disabled = results[2]
    assert isinstance(disabled, CallFailure) and disabled.attempts == 0
    assert "openai:stand-in" in disabled.reason and "HTTP 500" in disabled.reason
    assert backend.disabled_reason == disabled.reason
    # it stays disabled for later calls too
    assert [r.kind for r in backend.generate(_requests(2)) if isinstance(r, CallFailure)] == ["disabled"] * 2
    assert stand_in.hits == 4


def test_a_success_resets_the_failure_budget(serve) -> None:
    stand_in, url = serve([Reply(status=500), Reply(), Reply(status=500), Reply(), Reply(status=500), Reply()])
    results = OpenAIBackend(_spec(url, retries=0, max_consecutive_failures=2)).generate(_requests(6))
    assert [isinstance(r, Completion) for r in results] == [False, True] * 3
    assert stand_in.hits == 6


# -- endpoint pool ---------------------------------------------------------------------


def test_pool_sends_each_request_to_the_least_busy_endpoint(serve) -> None:
    first, url_a = serve([Reply(text="a", delay=0.3)])
    second, url_b = serve([Reply(text="b", delay=0.3)])
    results = OpenAIBackend(_spec(url_a, url_b, concurrency=1)).generate(_requests(4))
    assert (first.hits, second.hits) == (2, 2)
    assert sorted(r.endpoint or "" for r in results) == sorted([url_a, url_a, url_b, url_b])


def test_pool_retries_on_another_endpoint_when_one_is_dead(serve) -> None:
    live, url = serve([Reply(text="alive")])
    dead = _dead_url()
    results = OpenAIBackend(_spec(dead, url, retries=1)).generate(_requests(4))
    assert all(isinstance(r, Completion) and r.endpoint == url for r in results)
    assert any(r.attempts == 2 for r in results)  # the request first sent to the dead one moved over
    assert live.hits == 4


# -- plain completions API -------------------------------------------------------------


def test_flatten_messages_puts_system_then_user_text_and_a_blank_line() -> None:
    messages = (Message(role="system", content="Be strict."), Message(role="user", content="Rate this."))
    assert flatten_messages(messages) == "Be strict.\n\nRate this.\n\n"


def test_completions_api_sends_the_flattened_prompt(serve) -> None:
    stand_in, url = serve([Reply(text="continued")])
    request = ChatRequest(
        messages=(Message(role="system", content="S"), Message(role="user", content="U")),
        params=SamplingParams(max_tokens=4, stop=("\n\n",)),
    )
    backend = OpenAIBackend(_spec(url, api="completions", retries=0))
    [result] = backend.generate([request])
    assert stand_in.paths == ["/v1/completions"]
    assert stand_in.bodies[0]["prompt"] == "S\n\nU\n\n" and stand_in.bodies[0]["stop"] == ["\n\n"]
    assert "messages" not in stand_in.bodies[0]
    assert isinstance(result, Completion)
    assert (result.text, result.finish_reason, result.completion_tokens) == ("continued", "length", 4)
    assert backend.model_id == "openai-completions:stand-in"  # never shares cache entries with chat


def test_api_key_comes_from_the_named_environment_variable(serve, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in, url = serve([Reply()])
    monkeypatch.setenv("SPANJUDGE_TEST_KEY", "sk-test-123")
    OpenAIBackend(_spec(url, api_key_env="SPANJUDGE_TEST_KEY")).generate(_requests(1))
    monkeypatch.delenv("SPANJUDGE_TEST_KEY")
    OpenAIBackend(_spec(url, api_key_env="SPANJUDGE_TEST_KEY")).generate(_requests(1))
    OpenAIBackend(_spec(url)).generate(_requests(1))
    assert stand_in.authorizations == ["Bearer sk-test-123", "Bearer not-needed", "Bearer not-needed"]


# -- Ollama's native API -----------------------------------------------------------------


def _ollama_spec(*endpoints: str, **overrides: Any) -> BackendSpec:
    fields: dict[str, Any] = {"kind": "ollama", "model": "qwen-8k", "endpoints": endpoints, "backoff_s": 0.01}
    return BackendSpec(**{**fields, **overrides})


def test_ollama_chat_sends_model_options_and_maps_the_reply(serve) -> None:
    """Stand-in for Ollama's /api/chat: no real Ollama can run here."""
    stand_in, url = serve([Reply(text="ollama says hi")], ollama=True)
    spec = _ollama_spec(url, options={"num_ctx": 8192})
    request = ChatRequest(
        messages=(Message(role="system", content="S"), Message(role="user", content="U")),
        params=SamplingParams(temperature=0.7, top_p=0.9, max_tokens=16, seed=7, stop=("END",)),
    )
    [result] = make_backend(spec).generate([request])
    assert isinstance(result, Completion)
    assert (result.text, result.finish_reason, result.prompt_tokens, result.completion_tokens) == (
        "ollama says hi",
        "stop",
        7,
        3,
    )
    assert result.endpoint == url and result.model == "qwen-8k"
    assert stand_in.paths == ["/api/chat"]
    body = stand_in.bodies[0]
    assert body["model"] == "qwen-8k" and body["stream"] is False
    assert body["messages"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}]
    assert body["options"] == {
        "num_ctx": 8192,
        "seed": 7,
        "temperature": 0.7,
        "top_p": 0.9,
        "num_predict": 16,
        "stop": ["END"],
    }


def test_ollama_failures_map_to_kinds(serve) -> None:
    """Stand-in for Ollama's /api/chat: 500 is retried, 404 (unknown model) is not."""
    stand_in, url = serve([Reply(status=500), Reply(text="ok")], ollama=True)
    [result] = OllamaBackend(_ollama_spec(url, retries=1)).generate(_requests(1))
    assert isinstance(result, Completion) and result.attempts == 2

    stand_in, url = serve([Reply(status=404)], ollama=True)
    [result] = OllamaBackend(_ollama_spec(url, retries=3)).generate(_requests(1))
    assert isinstance(result, CallFailure)
    assert (result.kind, result.attempts, stand_in.hits) == ("client", 1, 1)
    assert "404" in result.reason and "stand-in says 404" in result.reason

    [result] = OllamaBackend(_ollama_spec(_dead_url().removesuffix("/v1"), retries=0)).generate(_requests(1))
    assert isinstance(result, CallFailure) and result.kind == "connection"

    stand_in, url = serve([Reply(delay=30)], ollama=True)
    [result] = OllamaBackend(_ollama_spec(url, retries=0, timeout_s=1.0)).generate(_requests(1))
    assert isinstance(result, CallFailure) and result.kind == "timeout"


def test_ollama_refuses_sampling_options_in_the_spec() -> None:
    with pytest.raises(BackendError, match="temperature"):
        OllamaBackend(_ollama_spec("http://127.0.0.1:11434", options={"temperature": 0.5, "num_ctx": 4096}))


# -- make_backend --------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["openai", "ollama"])
def test_server_kinds_need_an_endpoint(kind: str) -> None:
    with pytest.raises(BackendError, match="at least one endpoint"):
        make_backend(BackendSpec(kind=kind, model="m"))


def test_completions_api_is_only_for_openai_servers() -> None:
    with pytest.raises(BackendError, match="api 'completions'"):
        make_backend(BackendSpec(kind="ollama", model="m", endpoints=("http://x",), api="completions"))


@pytest.mark.skipif(__import__("importlib").util.find_spec("vllm") is not None, reason="vllm is installed here")
def test_vllm_without_vllm_installed_says_how_to_install_it() -> None:
    with pytest.raises(BackendError, match=r"pip install 'spanjudge\[vllm\]'"):
        make_backend(BackendSpec(kind="vllm", model="any/model"))


# -- cache -------------------------------------------------------------------------------


def test_cache_serves_repeats_without_model_calls(serve, tmp_path: Path) -> None:
    stand_in, url = serve([Reply(text="first"), Reply(text="second")])
    requests = _requests(2)
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        backend = CachedBackend(OpenAIBackend(_spec(url)), cache)
        first = backend.generate(requests)
        again = backend.generate(requests)
    assert (backend.model_calls, backend.cache_hits, stand_in.hits) == (2, 2, 2)
    assert [r.text for r in again if isinstance(r, Completion)] == [r.text for r in first if isinstance(r, Completion)]
    assert all(isinstance(r, Completion) and r.cached and r.seconds == 0.0 for r in again)
    assert all(isinstance(r, Completion) and not r.cached for r in first)


def test_cache_sends_identical_requests_once(serve, tmp_path: Path) -> None:
    stand_in, url = serve([Reply(text="shared")])
    seen: list[int] = []
    request = ChatRequest.user("same question")
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        backend = CachedBackend(OpenAIBackend(_spec(url)), cache)
        results = backend.generate([request, request, ChatRequest.user("other")], on_result=lambda i, r: seen.append(i))
        assert len(cache) == 2
    assert (stand_in.hits, backend.model_calls, sorted(seen)) == (2, 2, [0, 1, 2])
    assert results[0] == results[1]


def test_cache_does_not_store_failures(serve, tmp_path: Path) -> None:
    _, url = serve([Reply(status=500), Reply(text="recovered")])
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        backend = CachedBackend(OpenAIBackend(_spec(url, retries=0)), cache)
        [failed] = backend.generate(_requests(1))
        assert isinstance(failed, CallFailure) and len(cache) == 0
        [retried] = backend.generate(_requests(1))
    assert isinstance(retried, Completion) and retried.text == "recovered"
    assert (backend.model_calls, backend.cache_hits) == (2, 0)


def test_cache_keys_separate_models_and_sampling_params(serve, tmp_path: Path) -> None:
    stand_in, url = serve([Reply()])
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        CachedBackend(OpenAIBackend(_spec(url)), cache).generate(_requests(1))
        other_model = CachedBackend(OpenAIBackend(_spec(url, model="other")), cache)
        other_model.generate(_requests(1))
        other_params = CachedBackend(OpenAIBackend(_spec(url)), cache)
        other_params.generate(_requests(1, temperature=0.5))
    assert (other_model.model_calls, other_params.model_calls, stand_in.hits) == (1, 1, 3)


def test_cache_files_opened_and_written_by_many_threads_at_once(tmp_path: Path) -> None:
    """Several caches on one new file at once (generate runs one per system in threads):
    switching a fresh file to WAL used to fail at once with "database is locked"."""
    import threading

    errors: list[str] = []
    for trial in range(15):
        path = tmp_path / f"cache-{trial}.sqlite"

        def write(worker: int, path: Path = path) -> None:
            try:
                with LLMCache(path) as cache:
                    for n in range(10):
                        cache.put(f"{worker}-{n}", "m", Completion(text="x", model="m"))
            except Exception as exc:  # collected: a thread's exception would not fail the test
                errors.append(repr(exc))

        threads = [threading.Thread(target=write, args=(worker,)) for worker in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with LLMCache(path) as cache:
            assert len(cache) == 60
    assert errors == []


_KILLED_RUN = """
import sys
from spanjudge.inference.backends import BackendSpec, CachedBackend, ChatRequest, LLMCache, SamplingParams
from spanjudge.inference.backends.openai_compat import OpenAIBackend

url, path = sys.argv[1], sys.argv[2]
spec = BackendSpec(kind="openai", model="stand-in", endpoints=(url,), concurrency=1, retries=0, timeout_s=120)
requests = [ChatRequest.user(f"question {i}", SamplingParams(max_tokens=8)) for i in range(5)]
CachedBackend(OpenAIBackend(spec), LLMCache(path)).generate(requests)
"""


def test_a_killed_run_keeps_what_it_finished(serve, tmp_path: Path) -> None:
    """SIGKILL a real process mid-run: the completions it already had are in the file."""
    stand_in, url = serve([Reply(text="done")] * 3 + [Reply(delay=60)])
    path = tmp_path / "cache.sqlite"
    process = subprocess.Popen([sys.executable, "-c", _KILLED_RUN, url, str(path)], start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while stand_in.hits < 4 and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert stand_in.hits == 4, "the run did not reach its fourth request"
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    with LLMCache(path) as cache:
        assert len(cache) == 3
        fresh, url2 = serve([Reply(text="rest")])
        backend = CachedBackend(OpenAIBackend(_spec(url2, model="stand-in")), cache)
        results = backend.generate([ChatRequest.user(f"question {i}", SamplingParams(max_tokens=8)) for i in range(5)])
    assert (backend.cache_hits, backend.model_calls, fresh.hits) == (3, 2, 2)
    assert [r.text for r in results if isinstance(r, Completion)] == ["done"] * 3 + ["rest"] * 2


# -- the registry: every engine is its module's declaration ----------------------------------


def test_every_engine_is_declared_by_its_own_module_and_named_once_in_the_registry() -> None:
    from spanjudge.inference.backends import registry
    from spanjudge.inference.backends.engine import Engine

    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    declared = registry.ENGINES.load_all()
    assert tuple(declared) == registry.engine_names() == tuple(registry.ENGINES.builtin)
    for name, engine in declared.items():
        assert isinstance(engine, Engine) and engine.name == name  # a copied module that kept its old name fails
        assert BackendSpec(kind=name, model="m").kind == name  # what YAML files are checked against
        # the backend class lives in the module that declares it: one module holds the engine
        assert engine.backend.__module__ == registry.ENGINES.builtin[name].split(":")[0], name
        assert engine.read_probabilities == hasattr(engine.backend, "read_probabilities"), name
        assert engine.extra is None or f"\n{engine.extra} = [" in pyproject, name  # an optional-dependencies key
        assert engine.extra is None or f"spanjudge[{engine.extra}]" in engine.install, name
    assert registry.DEFAULT_KIND in declared and registry.DEFAULT_JUDGE_ENGINE in declared


ENGINE_NAME_TEST = re.compile(
    r"""(==|!=|\bin\s*[(\[{])\s*["'](openai|ollama|vllm|llamacpp|transformers)["']"""
    r"""|["'](openai|ollama|vllm|llamacpp|transformers)["']\s*(==|!=|\bin\b)"""
    r"""|\bengine\s*(==|!=)\s*["']"""
)


def test_no_module_outside_the_engines_decides_by_an_engine_name() -> None:
    """What an engine needs and can do is asked of its declaration (`Engine`); a module that tests an
    engine's name instead is found here (bench/ scripts label their own rows and are not the package)."""
    from spanjudge.inference.backends import registry

    root = Path(__file__).parents[2]
    engine_modules = {root / (target.split(":")[0].removeprefix("spanjudge.").replace(".", "/") + ".py")
                      for target in registry.ENGINES.builtin.values()}  # fmt: skip
    found = []
    for folder in ("core", "inference", "data_gen", "training", "eval", "publish", "app", "integrations"):
        for path in sorted((root / folder).rglob("*.py")):
            if path in engine_modules:
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if ENGINE_NAME_TEST.search(line.split("#")[0]):
                    found.append(f"{path.relative_to(root)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
    assert ENGINE_NAME_TEST.search('if spec.kind != "ollama":') and ENGINE_NAME_TEST.search("engine in ('vllm', 'x')")


def test_a_kind_outside_the_registry_is_one_config_error(tmp_path: Path) -> None:
    from spanjudge.core.configio import load_yaml_model
    from spanjudge.core.errors import ConfigError

    path = tmp_path / "model.yaml"
    path.write_text("kind: sglang\nmodel: m\n")
    with pytest.raises(ConfigError, match="kind") as caught:
        load_yaml_model(BackendSpec, path)
    assert "openai" in str(caught.value) and "transformers" in str(caught.value)
    assert len(str(caught.value).splitlines()) == 1


def test_score_engine_choices_and_engine_arg_kinds_come_from_the_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spanjudge.app.cli import main as cli_main

    data = tmp_path / "rows.jsonl"
    data.write_text('{"id": "a", "output": "x", "task_id": "qags_xsum"}\n')
    code = cli_main(["score", "--model", "m", "--engine", "tgi", "--data", str(data), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    from spanjudge.core.registry import one_of
    from spanjudge.inference.backends.registry import engine_names

    assert code == 2 and f"unknown engine 'tgi'; choose {one_of(engine_names())}" in err  # the registry's list
    assert "llamacpp" in engine_names() and "ollama" in engine_names()
