"""Fitting the libraries around spanjudge (issue #17, items 2 and 6).

Pass-through: engine arguments (`score --engine-arg`, meta-eval `engine_arg.KEY`, Judge
`engine_options`) reach `vllm.LLM(...)` and transformers' `from_pretrained`; adapters may be
Hub ids; `training.trainer_args` reach TRL's SFTConfig, and `logging.report_to` takes any
tracker transformers knows. Library pieces instead of our own: generation stops at stop
strings inside transformers' `generate`, the training world comes from accelerate's
`PartialState`, retries honour `Retry-After`, and the chat API gets `max_completion_tokens`.

vLLM needs CUDA and is not installable here: what our code hands to vLLM is checked with a
stand-in module (`_FakeVLLM`, the pattern of test_constrained.py), not with vLLM itself.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
import time
import types
import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from email.utils import format_datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.judge_records import write_records
from support.standin import Reply
from support.training_runs import ENV, REPO, smoke_config

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.inference.backends import (
    BackendError,
    BackendSpec,
    ChatRequest,
    Completion,
    SamplingParams,
    make_backend,
    parse_engine_args,
)
from spanjudge.inference.backends.adapters import lora_adapter
from spanjudge.inference.backends.ollama_native import OllamaBackend
from spanjudge.inference.backends.openai_compat import OpenAIBackend
from spanjudge.inference.backends.server import RETRY_AFTER_CAP_S, retry_after_seconds
from spanjudge.inference.contract import Evaluation, render_judge
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.judge import Judge
from spanjudge.inference.shipped_models import smollm2_gguf

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    return convert_gguf(smollm2_gguf())  # SmolLM2-135M-Instruct as a transformers folder (cached)


# -- Retry-After on 429 / 503 --------------------------------------------------------------


class _Scripted(BaseHTTPRequestHandler):
    """Answers POSTs from the server's script (status, headers) and notes when each came."""

    def do_GET(self) -> None:  # the runner's health check
        self._send(200, {}, {"object": "list", "data": []})

    def do_POST(self) -> None:
        server: Any = self.server
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        with server.lock:
            server.hits.append(time.monotonic())
            status, headers = server.script[min(len(server.hits), len(server.script)) - 1]
        if status != 200:
            self._send(status, headers, {"error": {"message": f"scripted {status}"}})
        elif server.ollama:
            self._send(200, {}, {"model": "m", "created_at": "2026-01-01T00:00:00Z", "done": True,
                                 "message": {"role": "assistant", "content": "ok"}, "done_reason": "stop"})  # fmt: skip
        else:
            self._send(200, {}, {"id": "c", "object": "chat.completion", "created": 0, "model": "m",
                                 "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                              "finish_reason": "stop"}]})  # fmt: skip

    def _send(self, status: int, headers: dict[str, str], payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **headers}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def scripted() -> Iterator[Any]:
    """start(script, ollama=False) -> (server, base URL); servers stop when the test ends."""
    servers: list[ThreadingHTTPServer] = []

    def start(script: list[tuple[int, dict[str, str]]], ollama: bool = False) -> tuple[Any, str]:
        server: Any = ThreadingHTTPServer(("127.0.0.1", 0), _Scripted)
        server.daemon_threads = True
        server.script, server.hits, server.lock, server.ollama = script, [], threading.Lock(), ollama
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
        host, port = server.server_address[:2]
        return server, f"http://{host}:{port}" + ("" if ollama else "/v1")

    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("ollama", [False, True], ids=["openai", "ollama"])
@pytest.mark.parametrize("status", [429, 503])
def test_retry_waits_as_long_as_retry_after_says(scripted: Any, status: int, ollama: bool) -> None:
    server, url = scripted([(status, {"Retry-After": "1"}), (200, {})], ollama=ollama)
    kind = "ollama" if ollama else "openai"
    spec = BackendSpec(kind=kind, model="m", endpoints=(url,), retries=2, backoff_s=0.01)
    backend = OllamaBackend(spec) if ollama else OpenAIBackend(spec)
    [result] = backend.generate([ChatRequest.user("hi", SamplingParams(max_tokens=4))])
    assert isinstance(result, Completion) and result.attempts == 2
    waited = server.hits[1] - server.hits[0]
    assert 0.95 <= waited < 3.0, waited  # the back-off alone would have waited 0.01 s


def test_retry_after_as_an_http_date_and_its_cap() -> None:
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
    later = format_datetime(now + timedelta(seconds=7), usegmt=True)  # "Thu, 01 Jan 2026 12:00:07 GMT"
    assert retry_after_seconds(429, {"retry-after": later}, now=now) == pytest.approx(7.0)
    assert retry_after_seconds(503, {"retry-after": "3600"}) == RETRY_AFTER_CAP_S  # capped
    assert retry_after_seconds(429, {"retry-after": "soon"}) is None  # unreadable: the back-off applies
    assert retry_after_seconds(500, {"retry-after": "5"}) is None  # only 429 and 503 say when to come back
    past = format_datetime(now - timedelta(seconds=30), usegmt=True)
    assert retry_after_seconds(429, {"retry-after": past}, now=now) == 0.0


# -- max_completion_tokens -------------------------------------------------------------------


def test_chat_calls_send_max_completion_tokens_and_max_tokens(serve) -> None:
    stand_in, url = serve([Reply(text="fine")])
    spec = BackendSpec(kind="openai", model="m", endpoints=(url,))
    OpenAIBackend(spec).generate([ChatRequest.user("hi", SamplingParams(max_tokens=8))])
    OpenAIBackend(spec.model_copy(update={"api": "completions"})).generate([ChatRequest.user("hi")])
    chat, completions = stand_in.bodies
    assert (chat["max_completion_tokens"], chat["max_tokens"]) == (8, 8)
    assert "max_completion_tokens" not in completions and completions["max_tokens"] == 1024  # not in that API


# -- engine arguments ------------------------------------------------------------------------


class _FakeVLLM:
    """A stand-in for the parts of vLLM the backend uses (vLLM needs CUDA: not installable
    here). It records what `LLM(...)` and `LoRARequest(...)` were given and the prompts `generate`
    got, and answers every request with a clean judge reply."""

    def __init__(self) -> None:
        self.llm_options: dict[str, Any] = {}
        self.lora: tuple[Any, ...] = ()
        self.prompts: list[dict[str, Any]] = []
        fake = self
        reply = render_judge(Evaluation(errors=[], score=100))

        class LLM:
            def __init__(self, model: str, **options: Any) -> None:
                from transformers import AutoTokenizer

                fake.llm_options = options
                self.tokenizer = AutoTokenizer.from_pretrained(model)

            def get_tokenizer(self) -> Any:
                return self.tokenizer

            def generate(self, prompts: list[dict[str, Any]], **kwargs: Any) -> list[Any]:
                fake.prompts += prompts
                sample = types.SimpleNamespace(text=reply, finish_reason="stop", token_ids=[1, 2])
                return [
                    types.SimpleNamespace(outputs=[sample], prompt_token_ids=p["prompt_token_ids"]) for p in prompts
                ]

        class SamplingParams:
            def __init__(self, **kwargs: Any) -> None:
                self.kwargs = kwargs

        class LoRARequest:
            def __init__(self, *args: Any) -> None:
                fake.lora = args

        self.modules = {
            "vllm": types.ModuleType("vllm"),
            "vllm.sampling_params": types.ModuleType("vllm.sampling_params"),
            "vllm.lora": types.ModuleType("vllm.lora"),
            "vllm.lora.request": types.ModuleType("vllm.lora.request"),
        }
        self.modules["vllm"].LLM = LLM  # type: ignore[attr-defined]
        self.modules["vllm"].SamplingParams = SamplingParams  # type: ignore[attr-defined]
        self.modules["vllm.lora.request"].LoRARequest = LoRARequest  # type: ignore[attr-defined]

    def install(self, monkeypatch: pytest.MonkeyPatch) -> _FakeVLLM:
        for name, module in self.modules.items():
            monkeypatch.setitem(sys.modules, name, module)
        return self


def test_engine_args_are_typed_as_yaml() -> None:
    args = ["max_model_len=8192", "gpu_memory_utilization=0.8", "enforce_eager=true", "quantization=fp8"]
    assert parse_engine_args(args) == {
        "max_model_len": 8192, "gpu_memory_utilization": 0.8, "enforce_eager": True, "quantization": "fp8",
    }  # fmt: skip
    with pytest.raises(InputError, match="--engine-arg expects KEY=VALUE"):
        parse_engine_args(["max_model_len"])


def test_score_engine_args_reach_vllm_llm(monkeypatch, tmp_path: Path, smollm2_folder: Path) -> None:
    fake = _FakeVLLM().install(monkeypatch)
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "The cat sat.", "summary": "A cat sat."}) + "\n")
    code = cli_main(
        [
            "score", "--model", str(smollm2_folder), "--engine", "vllm", "--data", str(data),
            "--out", str(tmp_path / "out.jsonl"), "--task", "qags_xsum", "--aspect", "factual consistency",
            "--input", "Article=article", "--output-field", "summary",
            "--engine-arg", "max_model_len=4096", "--engine-arg", "gpu_memory_utilization=0.5",
            "--engine-arg", "tensor_parallel_size=2", "--engine-arg", "quantization=fp8",
        ]
    )  # fmt: skip
    assert code == 0
    assert fake.llm_options["max_model_len"] == 4096 and fake.llm_options["gpu_memory_utilization"] == 0.5
    assert (fake.llm_options["tensor_parallel_size"], fake.llm_options["quantization"]) == (2, "fp8")
    [row] = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert row["evaluation"]["score"] == 100


def test_score_refuses_engine_args_for_a_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "rows.jsonl"
    data.write_text(json.dumps({"id": "a", "output": "x", "task_id": "qags_xsum"}) + "\n")
    code = cli_main(
        ["score", "--model", "m", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--data", str(data),
         "--out", str(tmp_path / "o.jsonl"), "--engine-arg", "max_model_len=4096"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    from spanjudge.inference.backends.registry import ENGINES, engines_that

    assert f"--engine-arg is for --engine {engines_that('takes_engine_args')}" in err  # or a launched server
    assert code == 2 and not ENGINES.load("openai").in_process and len(err.splitlines()) == 1
    code = cli_main(
        ["score", "--model", "m", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1", "--data", str(data),
         "--out", str(tmp_path / "o.jsonl"), "--workers", "2"]
    )  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and "--workers 2: engine 'openai' judges on a server" in err and len(err.splitlines()) == 1


def test_meta_eval_engine_arg_options_become_engine_options(monkeypatch, smollm2_folder: Path) -> None:
    from spanjudge.eval.judging.judge_files import DistilledJudge

    fake = _FakeVLLM().install(monkeypatch)
    options = {"engine": "vllm", "retries": "0", "engine_arg.max_model_len": "4096", "engine_arg.enforce_eager": "true"}
    judge = DistilledJudge(str(smollm2_folder), options)
    assert fake.llm_options == {}  # the engine starts when a judgment is needed, not before
    assert judge._judge.retries == 0
    assert (fake.llm_options["max_model_len"], fake.llm_options["enforce_eager"]) == (4096, True)
    assert "engine_arg.max_model_len=4096" in judge.store_key  # the judgments are stored per setting


def test_transformers_engine_args_reach_from_pretrained(smollm2_folder: Path) -> None:
    # the folder's config says float32, and Judge's own dtype default ("auto") no longer wins
    options = {"dtype": "bfloat16", "attn_implementation": "eager"}
    judge = Judge.from_pretrained(smollm2_folder, engine="transformers", engine_options=options)
    try:
        model = judge.backend.model  # type: ignore[attr-defined]
        assert str(model.dtype) == "torch.bfloat16" and model.config._attn_implementation == "eager"
    finally:
        judge.close()


def test_engine_args_may_not_replace_the_judges_own_options(smollm2_folder: Path) -> None:
    with pytest.raises(SpanjudgeError, match=r"engine arguments \['adapter'\] are set by the judge"):
        Judge.from_pretrained(smollm2_folder, engine="transformers", engine_options={"adapter": "x"})


# -- adapters given as Hub ids ---------------------------------------------------------------


def _hub_cache_with_adapter(cache: Path, repo: str, tokenizer_from: Path) -> Path:
    """A Hub cache holding one LoRA adapter repository, laid out as huggingface_hub lays it out."""
    commit = "0" * 40
    root = cache / f"models--{repo.replace('/', '--')}"
    snapshot = root / "snapshots" / commit
    snapshot.mkdir(parents=True)
    (root / "refs").mkdir()
    (root / "refs" / "main").write_text(commit)
    # an adapter repository has no config.json; huggingface_hub notes that when it first asks
    # online, and transformers' offline tokenizer loading relies on that note
    (root / ".no_exist" / commit).mkdir(parents=True)
    (root / ".no_exist" / commit / "config.json").touch()
    config = {"peft_type": "LORA", "r": 32, "lora_alpha": 64, "target_modules": ["q_proj"], "task_type": "CAUSAL_LM",
              "base_model_name_or_path": str(tokenizer_from)}  # fmt: skip
    (snapshot / "adapter_config.json").write_text(json.dumps(config))
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(tokenizer_from / name, snapshot / name)  # spanjudge saves the tokenizer with the adapter
    return snapshot


def test_vllm_adapter_from_the_hub_cache(monkeypatch, tmp_path: Path, smollm2_folder: Path) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    snapshot = _hub_cache_with_adapter(tmp_path / "hub", "someone/judge-lora", smollm2_folder)
    fake = _FakeVLLM().install(monkeypatch)
    Judge.from_pretrained("someone/judge-lora", base=str(smollm2_folder), engine="vllm")
    assert fake.llm_options["enable_lora"] is True and fake.llm_options["max_lora_rank"] == 32
    assert Path(fake.lora[2]) == snapshot  # vLLM gets the downloaded folder
    assert lora_adapter(str(snapshot)) == (str(snapshot), 32)  # a folder is used where it is


def test_missing_hub_adapter_offline_is_one_line(monkeypatch, tmp_path: Path, smollm2_folder: Path) -> None:
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "empty"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    _FakeVLLM().install(monkeypatch)
    spec = BackendSpec(kind="vllm", model=str(smollm2_folder), options={"adapter": "nobody/no-such-adapter"})
    with pytest.raises(BackendError) as caught:
        make_backend(spec)
    message = str(caught.value)
    assert "'nobody/no-such-adapter': no adapter_config.json" in message and "HF_HUB_OFFLINE" in message
    assert "\n" not in message
    spec = BackendSpec(kind="transformers", model=str(smollm2_folder), options={"adapter": "nobody/no-such-adapter"})
    with pytest.raises(BackendError, match=r"no adapter_config\.json"):
        make_backend(spec)  # refused before any weights load


# -- stop strings end generation inside transformers' generate --------------------------------


def test_transformers_generation_stops_at_a_stop_string(smollm2_folder: Path) -> None:
    backend = make_backend(BackendSpec(kind="transformers", model=str(smollm2_folder), options={"batch_size": 2}))
    try:
        prompt = "Write a long story about a cat."
        [plain] = backend.generate([ChatRequest.user(prompt, SamplingParams(max_tokens=12))])
        assert isinstance(plain, Completion) and plain.completion_tokens == 12, plain
        stop = plain.text.split()[2]  # a word early in the reply
        requests = [
            ChatRequest.user(prompt, SamplingParams(max_tokens=12, stop=(stop,))),
            ChatRequest.user(prompt, SamplingParams(max_tokens=12)),  # no stop: its own generate() call
        ]
        cut, again = backend.generate(requests)
    finally:
        backend.close()
    assert isinstance(cut, Completion) and isinstance(again, Completion)
    assert (cut.text, cut.finish_reason) == (plain.text[: plain.text.find(stop)], "stop")
    assert cut.completion_tokens is not None and cut.completion_tokens < 12  # it stopped, not ran to max_tokens
    assert (again.text, again.completion_tokens) == (plain.text, 12)


# -- training: trainer_args, report_to, the world from accelerate -----------------------------


@pytest.fixture
def records(tmp_path: Path, shared_data: Path) -> Path:
    return write_records(tmp_path / "annotate", shared_data)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"training": {"trainer_args": {"neftune_noise_alpa": 5}}},
         "training.trainer_args.neftune_noise_alpa: not an argument of TRL's SFTConfig; "
         "did you mean 'neftune_noise_alpha'?"),
        ({"training": {"trainer_args": {"learning_rate": 1e-3}}},
         "training.trainer_args.learning_rate: set by training.learning_rate; set that instead"),
        ({"logging": {"report_to": "tensorbord"}}, "logging.report_to: 'tensorbord' is not a tracker transformers"),
        ({"logging": {"report_to": ["wandb", "clearml"]}}, "logging.report_to: 'clearml' is not installed here"),
    ],
)  # fmt: skip
def test_trainer_settings_are_refused_in_seconds(
    tmp_path: Path, records: Path, capsys: pytest.CaptureFixture[str], change: dict[str, Any], expected: str
) -> None:
    config = smoke_config(tmp_path, records, **change)
    started = time.monotonic()
    code = cli_main(["train", "--config", str(config)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and len(err.splitlines()) == 1, err
    assert "train.yaml" in err  # the file is named
    assert time.monotonic() - started < 60  # TRL's import, no model
    assert not (tmp_path / "run").exists()


def test_trainer_args_reach_sft_config(tmp_path: Path, records: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from trl import SFTConfig

    from spanjudge.training.config import load_train_config
    from spanjudge.training.run import TrainingRun

    extra = {"neftune_noise_alpha": 5.0, "save_strategy": "epoch", "torch_empty_cache_steps": 7}
    training = {"trainer_args": extra, "gradient_checkpointing": True}  # the smoke config's is false, TRL's default
    path = smoke_config(tmp_path, records, training=training, logging={"report_to": ["wandb"]})
    for name in ("WANDB_PROJECT", "WANDB_DIR"):  # set by prepare() for W&B; restored after the test
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("WANDB_MODE", "disabled")
    run = TrainingRun(load_train_config(path))
    run.prepare()
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        args = SFTConfig(**run.trainer_arguments(has_validation=False))
    assert (args.neftune_noise_alpha, args.save_strategy, args.torch_empty_cache_steps) == (5.0, "epoch", 7)
    assert args.report_to == ["wandb"] and args.learning_rate == run.config.training.learning_rate
    # gradient checkpointing under transformers' current name: its deprecated alias warned at every run
    assert args.activation_checkpointing is args.gradient_checkpointing is True
    assert not [w for w in warned if issubclass(w.category, FutureWarning)], [str(w.message) for w in warned]


def test_a_run_saved_before_trainer_args_existed_still_resumes(tmp_path: Path, records: Path) -> None:
    from spanjudge.core.errors import ConfigError
    from spanjudge.training.config import load_train_config, resolved_yaml
    from spanjudge.training.run_folder import check_same_run

    config = load_train_config(smoke_config(tmp_path, records))
    saved = yaml.safe_load(resolved_yaml(config))
    del saved["training"]["trainer_args"]  # written by a spanjudge without the field
    out = tmp_path / "old_run"
    out.mkdir()
    (out / "train_config.yaml").write_text(yaml.safe_dump(saved))
    check_same_run(config, out)  # the default of a newer field is the same run
    changed = config.model_copy(
        update={"training": config.training.model_copy(update={"trainer_args": {"neftune_noise_alpha": 5}})}
    )
    with pytest.raises(ConfigError, match=r"training\.trainer_args"):
        check_same_run(changed, out)


WORLD_SCRIPT = """
import json
from spanjudge.training.world import World
world = World.from_accelerate(use_cpu=True)
print(json.dumps([world.size, world.rank, world.local_rank]), flush=True)
"""


def test_world_comes_from_accelerate_in_one_and_in_two_cpu_processes(tmp_path: Path) -> None:
    from spanjudge.training.world import World

    assert World.from_accelerate(use_cpu=True) == World(size=1, rank=0, local_rank=0)  # launched plainly
    script = tmp_path / "world.py"
    script.write_text(WORLD_SCRIPT)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)]
    done = subprocess.run(
        command, cwd=REPO, env={**ENV, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=180
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # two processes share one stdout, so one's line can land inside the other's: find each list
    worlds = sorted(json.loads(found) for found in re.findall(r"\[\d+, \d+, \d+\]", done.stdout))
    assert worlds == [[2, 0, 0], [2, 1, 1]]  # one gloo group of two, as the Trainer will see it
