"""llama-cpp-python's OpenAI-compatible server on 127.0.0.1 (`LlamaCppServer`: start, health, crash report, stop;
reached through the `openai` engine) and the reader of a served judge's probabilities (`LlamaCppProbabilities`)."""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from spanjudge.core.cpus import cpu_threads
from spanjudge.core.crash import crashed, describe_exit, log_tail
from spanjudge.core.errors import SpanjudgeError

from ...chat import encode_templated, judge_end_ids
from ...contract import Evaluation
from ...probabilities import ReplyProbabilities
from ...shipped_models import free_port
from ..base import ChatRequest
from ..engine import Engine, Launch, Serving, Wiring
from ..launched import LaunchedBackend
from ..openai_compat import request_grammar
from ..server import forget_endpoint, watch_endpoint
from ..spec import BackendSpec
from .build import build_advice
from .gguf_files import check_model_files
from .local import checked_files
from .reader import LlamaCppProbabilityReader

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


class LlamaCppServer:
    """`python -m llama_cpp.server` for one GGUF model, started and stopped by PID.

    >>> with LlamaCppServer(smollm2_gguf(), alias="smollm2") as server:
    ...     OpenAI(base_url=server.base_url, api_key="none").chat.completions.create(...)
    """

    def __init__(
        self,
        model_path: Path | str,
        alias: str,
        *,
        host: str = "127.0.0.1",
        port: int | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        chat_format: str | None = None,
        log_path: Path | str | None = None,
        lora_path: Path | str | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        self.alias = alias
        self.host = host
        self.port = port or free_port(host)
        self.n_ctx = n_ctx
        self.n_threads = n_threads or cpu_threads()
        self.chat_format = chat_format
        self.log_path = Path(log_path) if log_path else None
        self.lora_path = Path(lora_path) if lora_path else None  # a GGUF LoRA adapter (spanjudge export --gguf-lora)
        self.process: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        cmd = [
            sys.executable, "-m", "llama_cpp.server",
            "--model", str(self.model_path),
            "--model_alias", self.alias,
            "--host", self.host,
            "--port", str(self.port),
            "--n_ctx", str(self.n_ctx),
            "--n_threads", str(self.n_threads),
        ]  # fmt: skip
        if self.chat_format:
            cmd += ["--chat_format", self.chat_format]
        if self.lora_path:
            cmd += ["--lora_path", str(self.lora_path)]
        return cmd

    def start(self, timeout: float = 120.0) -> LlamaCppServer:
        """Start the server and return once it has answered a first completion: a server that loads its
        model and then dies at the first computation (a llama.cpp built for another CPU) is reported
        here as a crash, not later as requests that go unanswered."""
        if importlib.util.find_spec("llama_cpp") is None:
            raise SpanjudgeError("llama-cpp-python is not installed: pip install 'spanjudge[llamacpp]'")
        if not self.model_path.is_file():
            raise SpanjudgeError(f"model file not found: {self.model_path}")
        check_model_files(self.model_path, self.lora_path, None, f"llama.cpp server {self.alias!r}")
        if self.log_path:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path
        else:
            handle, name = tempfile.mkstemp(prefix="llamacpp-", suffix=".log")
            os.close(handle)
            self._log = Path(name)
        with self._log.open("wb") as log:  # the child keeps its own descriptor
            self.process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own process group, so stop() reaches workers too
                preexec_fn=_die_with_parent if sys.platform == "linux" else None,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SpanjudgeError(self.crash_report() or "the llama.cpp server exited")
            if self._ready():
                self._first_completion(deadline)
                watch_endpoint(self.base_url, self.crash_report)
                return self
            time.sleep(0.2)
        self.stop()
        raise SpanjudgeError(
            f"llama.cpp server {self.alias!r} not ready after {timeout:.0f} s; its log ends: {self.log_tail()}"
        )

    def _ready(self) -> bool:
        """A health probe (not a model call): GET /v1/models answers 200 once loaded."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=1.0) as response:
                return bool(response.status == 200)
        except (OSError, ValueError):
            return False

    def _first_completion(self, deadline: float) -> None:
        """One token of a completion: the first time the model computes anything."""
        body = json.dumps({"model": self.alias, "prompt": "Hello", "max_tokens": 1, "temperature": 0}).encode()
        request = urllib.request.Request(
            f"{self.base_url}/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=max(1.0, deadline - time.monotonic())) as response:
                response.read()
        except (OSError, ValueError) as error:
            if self.process is not None and not isinstance(error, urllib.error.HTTPError):
                with contextlib.suppress(subprocess.TimeoutExpired):  # a crashing server drops the connection
                    self.process.wait(timeout=5)  # before the kernel has reaped it
            report = self.crash_report()
            self.stop()
            raise SpanjudgeError(
                report
                or f"llama.cpp server {self.alias!r} failed its first completion ({error}); "
                f"its log ends: {self.log_tail()}"
            ) from None

    def crash_report(self) -> str | None:
        """Why the server is no longer running, in one line (which server, its exit signal and likely cause,
        the end of its log, what to do), or None while it runs or after `stop()`."""
        process = self.process
        if process is None or process.poll() is None:
            return None
        return (
            f"the llama.cpp server {self.alias!r} ({self.model_path.name}, pid {process.pid}, {self.base_url}) "
            f"{'crashed' if crashed(process.returncode) else 'stopped'}: {describe_exit(process.returncode)}; "
            f"{build_advice()}its log ({self._log}) ends: {self.log_tail()}; once fixed, run the same command "
            "again: finished work is kept and resumed"
        )

    def log_tail(self) -> str:
        return log_tail(self._log)

    def stop(self, grace: float = 10.0) -> None:
        forget_endpoint(self.base_url)
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def __enter__(self) -> LlamaCppServer:
        return self.start()

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.stop()


class LlamaCppProbabilities:
    """The probabilities of a judge that llama.cpp serves, read in this process from the same GGUF (and
    GGUF LoRA): pass its `read_probabilities` to `Judge.from_pretrained(..., probability_reader=...)`.

    The served judge sends the chat-templated prompt (`api: prompt`), so the request's text is what the
    server saw; it is encoded with the judge's tokenizer (`tokenizer`, of the model the GGUF was
    converted from) and read by `backends.llamacpp.LlamaCppProbabilityReader`, on a llama.cpp context of its
    own. The server cannot give these itself (see that class)."""

    def __init__(
        self,
        gguf: Path | str,
        tokenizer: PreTrainedTokenizerBase,
        lora: Path | str | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> None:

        checked_files(Path(gguf), Path(lora) if lora else None, tokenizer, "llama.cpp probabilities")
        self.tokenizer = tokenizer
        # the context keeps the last reading: the next prompt reads only what it does not share with it (the
        # judge sends the outputs of one input one after another, so all but the output is shared)
        self.reader = LlamaCppProbabilityReader(
            gguf, tokenizer, judge_end_ids(tokenizer), lora=lora, n_ctx=n_ctx, n_threads=n_threads
        )

    def read_probabilities(self, request: ChatRequest, evaluation: Evaluation) -> ReplyProbabilities:
        """`ReplyProbabilities` along `evaluation` after the request's (templated) prompt."""

        # the text the server read, encoded as it reads it: its contents were defused (`chat.served_prompt`)
        return self.reader.read(encode_templated(self.tokenizer, request.messages[-1].content), evaluation)

    def close(self) -> None:
        self.reader.close()


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def _die_with_parent() -> None:
    """In the server's process before it runs (Linux): the kernel kills it when the thread that started it
    ends, so a run killed with SIGKILL (no `stop()`, no atexit) leaves no server behind. SIGKILL, not SIGTERM:
    on SIGTERM uvicorn first finishes the reply it is writing, which nobody will read (minutes on a loaded
    CPU); the server keeps nothing that a graceful exit would save."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


SERVER_OPTIONS = ("gguf", "lora", "n_ctx", "n_threads", "chat_format", "log")


def shipped_or_file(value: object) -> Path:
    """A `gguf` engine option: `@smollm2` or `@gemma3` (the GGUFs PyPI packages ship) or a file."""
    from ...shipped_models import gemma3_gguf, smollm2_gguf

    text = str(value)
    shipped = {"@smollm2": smollm2_gguf, "@gemma3": gemma3_gguf}
    if text.startswith("@") and text not in shipped:
        raise SpanjudgeError(f"gguf={text}: the shipped models are {', '.join(shipped)}; or give a .gguf file")
    return shipped[text]() if text in shipped else Path(text).expanduser()


def start_server(options: Mapping[str, Any]) -> LlamaCppServer:
    """The `llamacpp-server` engine's launch: llama-cpp-python's server for `gguf` (and `lora`), answering to
    `alias` (the model name the judge sends), started and checked by a first completion."""
    if not options.get("gguf"):
        raise SpanjudgeError("engine 'llamacpp-server' needs the engine option gguf=PATH (or @smollm2, @gemma3)")
    server = LlamaCppServer(
        shipped_or_file(options["gguf"]),
        alias=str(options.get("alias") or "judge"),
        n_ctx=int(options.get("n_ctx") or 4096),
        n_threads=int(options["n_threads"]) if options.get("n_threads") else None,
        chat_format=str(options["chat_format"]) if options.get("chat_format") else None,
        lora_path=options.get("lora") or None,
        log_path=options.get("log") or None,  # default: a temporary file
    )
    return server.start()


class LlamaCppServedBackend(LaunchedBackend):
    """`llamacpp-server`: a GGUF (and GGUF LoRA) on llama-cpp-python's server, which this backend starts (shared
    with other backends of the same files, `launched.py`) and stops; with the judge's probabilities read in this
    process from the same files (`LlamaCppProbabilities`, on the tokenizer of the judge's folder, the engine option
    `tokenizer` the judge sets)."""

    launch = Launch(start_server, (*SERVER_OPTIONS, "alias"))

    def __init__(self, spec: BackendSpec) -> None:
        self._options = dict(spec.options)
        self._reader: LlamaCppProbabilities | None = None
        super().__init__(spec.model_copy(update={"options": {**spec.options, "alias": spec.model}}))

    def read_probabilities(self, request: ChatRequest, evaluation: Evaluation) -> ReplyProbabilities:
        if self._reader is None:  # made at the first reading: a judge that reads none loads no second copy
            from ...hf_models import load_tokenizer

            folder = self._options.get("tokenizer")
            if not folder:
                raise SpanjudgeError(
                    "engine 'llamacpp-server' reads probabilities with the judge's tokenizer: the judge sets the "
                    "engine option tokenizer=FOLDER (Judge.from_pretrained does)"
                )
            self._reader = LlamaCppProbabilities(
                shipped_or_file(self._options["gguf"]),
                load_tokenizer(str(folder), trust_remote_code=bool(self._options.get("trust_remote_code"))),
                self._options.get("lora") or None,
                n_ctx=int(self._options.get("n_ctx") or 4096),
            )
        return self._reader.read_probabilities(request, evaluation)

    def close(self) -> None:
        try:
            super().close()
        finally:
            reader, self._reader = self._reader, None
            if reader is not None:
                reader.close()


ENGINE = Engine(
    name="llamacpp-server",
    backend=LlamaCppServedBackend,
    summary="llama.cpp's OpenAI-compatible server, which spanjudge starts and stops on 127.0.0.1: a GGUF and a "
    "GGUF LoRA in a process of their own (a crash is reported as one); engine options gguf=PATH|@smollm2|@gemma3, "
    "lora=PATH, n_ctx, n_threads, chat_format",
    packages=("llama_cpp", "openai", "transformers"),
    install="pip install 'spanjudge[llamacpp]'",
    extra="llamacpp",
    serve=Serving("started by spanjudge on 127.0.0.1", templated_prompt=True, request_fields=True),
    judge_options=("served_model", "concurrency", "timeout_s"),
    constrain=request_grammar,
    prefix_reuse_off=Wiring(request_fields={"cache_prompt": False}),
    launch=LlamaCppServedBackend.launch,
    reads_gguf=True,
)
