"""llama.cpp in this process (llama-cpp-python's `Llama`): the engine's backend, its files checked before
anything loads, and the probe that loads them once in a child process (see the package docstring)."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, cast

from spanjudge.core.cpus import cpu_threads
from spanjudge.core.crash import crashed, describe_exit, log_tail
from spanjudge.core.errors import InputError

from ...chat import encode_chat, judge_end_ids
from ...contract import Evaluation
from ...probabilities import ReplyProbabilities
from ..adapters import tokenizer_source
from ..base import Backend, BackendError, CallResult, ChatRequest, Completion, ResultCallback
from ..engine import Engine, grammar_option
from ..spec import BackendSpec
from .build import build_advice
from .gguf_files import check_model_files
from .reader import LlamaCppProbabilityReader

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


PROBE_TIMEOUT_S = 600


# what the child process runs: load the model (and LoRA), compute one token
_PROBE = """
import sys
from llama_cpp import Llama
llm = Llama(model_path=sys.argv[1], lora_path=sys.argv[2] or None, n_ctx=64, n_threads=1, verbose=True)
llm.eval(llm.tokenize(b"Hello", add_bos=True))
"""


_PROBED: set[tuple[object, ...]] = set()  # the files (with size and time) a child has loaded in this process


class LlamaCppBackend(Backend):
    """One request at a time on an in-process llama.cpp model (see the module docstring)."""

    def __init__(self, spec: BackendSpec) -> None:
        from llama_cpp import Llama, LlamaGrammar
        from transformers import AutoTokenizer

        options = dict(spec.options)
        gguf = options.pop("gguf", None)
        if not gguf:
            raise BackendError(f"llamacpp model {spec.model!r}: give the model's GGUF file (engine option gguf=PATH)")
        lora = options.pop("lora", None)
        adapter = options.pop("adapter", None)
        grammar = options.pop("grammar", None)
        trust = bool(options.pop("trust_remote_code", False))
        n_ctx = int(options.pop("n_ctx", 4096))
        n_threads = int(options.pop("n_threads", 0)) or cpu_threads()
        # on unless turned off: its replies were identical with and without (bench/judge_throughput.py)
        self.reuse_prefix = options.pop("reuse_prefix", None) is not False
        if options:
            raise BackendError(f"llamacpp model {spec.model!r}: unknown engine options {sorted(options)}")
        self.spec, self.model_id = spec, spec.model_id
        source = tokenizer_source(adapter, spec.model)
        self.tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=trust)
        checked_files(Path(gguf), Path(lora) if lora else None, self.tokenizer, f"llamacpp model {spec.model!r}")
        self.llm = Llama(
            model_path=str(gguf), lora_path=str(lora) if lora else None, n_ctx=n_ctx, n_threads=n_threads,
            verbose=False,
        )  # fmt: skip
        self._model_files = {"gguf": gguf, "lora": lora, "n_ctx": n_ctx, "n_threads": n_threads}
        self._grammar = LlamaGrammar.from_string(grammar, verbose=False) if grammar else None
        self._end_ids = judge_end_ids(self.tokenizer)
        self._reader: LlamaCppProbabilityReader | None = None

    def _prompt_ids(self, request: ChatRequest) -> list[int]:
        """The request's chat as token ids; no message's text becomes a control token (`chat.encode_chat`)."""
        return encode_chat(self.tokenizer, [message.model_dump() for message in request.messages])

    def generate(self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None) -> list[CallResult]:
        prompts = [self._prompt_ids(request) for request in requests]
        order = sorted(range(len(requests)), key=prompts.__getitem__) if self.reuse_prefix else range(len(requests))
        results: list[CallResult | None] = [None] * len(requests)
        for index in order:
            request, ids = requests[index], prompts[index]
            params, started = request.params, time.perf_counter()
            if not self.reuse_prefix:
                self.llm.reset()  # read the whole prompt again
            output = self.llm.create_completion(
                prompt=ids, max_tokens=params.max_tokens, temperature=params.temperature, top_p=params.top_p,
                top_k=0 if params.temperature else 1, seed=params.seed, stop=list(params.stop) or None,
                grammar=self._grammar,
            )  # fmt: skip
            choice, usage = output["choices"][0], output["usage"]
            result = Completion(
                text=choice["text"], finish_reason=choice["finish_reason"], model=self.spec.model,
                prompt_tokens=usage["prompt_tokens"], completion_tokens=usage["completion_tokens"],
                seconds=time.perf_counter() - started,
            )  # fmt: skip
            results[index] = result
            if on_result is not None:
                on_result(index, result)
        return cast("list[CallResult]", results)  # every index was run

    def read_probabilities(self, request: ChatRequest, evaluation: Evaluation) -> ReplyProbabilities:
        """The model's `ReplyProbabilities` along `evaluation` to `request`, encoded as `generate` encodes it."""

        if self._reader is None:
            self._reader = LlamaCppProbabilityReader(
                self._model_files["gguf"], self.tokenizer, self._end_ids, lora=self._model_files["lora"],
                n_ctx=self._model_files["n_ctx"], n_threads=self._model_files["n_threads"], source=self.llm,
            )  # fmt: skip
        return self._reader.read(self._prompt_ids(request), evaluation)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
        self.llm.close()


def checked_files(gguf: Path, lora: Path | None, tokenizer: PreTrainedTokenizerBase, where: str) -> None:
    """BackendError, one line, unless llama.cpp can load `gguf` (and `lora`) for `tokenizer` and compute with
    them here: the files checked (`gguf_files.check_model_files`), then loaded in a child process (`probe`)."""
    try:
        check_model_files(gguf, lora, tokenizer, where)
    except InputError as error:
        raise BackendError(str(error)) from None
    probe(gguf, lora, where)


def probe(gguf: Path, lora: Path | None, where: str) -> None:
    """Load `gguf` (and `lora`) and compute one token in a child process, once per process and files:
    BackendError with the child's exit signal and output if it crashes or fails, instead of a crash of
    this process inside `Llama()`."""
    files = [path for path in (gguf, lora) if path is not None]
    key = tuple((str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns) for path in files)
    if key in _PROBED:
        return
    with tempfile.TemporaryDirectory(prefix="spanjudge-probe-") as folder:
        log = Path(folder) / "llama.log"
        with log.open("wb") as output:
            try:
                done = subprocess.run(
                    [sys.executable, "-c", _PROBE, str(gguf), str(lora or "")],
                    stdout=output, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=PROBE_TIMEOUT_S,
                )  # fmt: skip
            except subprocess.TimeoutExpired:
                raise BackendError(f"{where}: loading gguf={gguf} took over {PROBE_TIMEOUT_S} s in a probe") from None
        if done.returncode == 0:
            _PROBED.add(key)
            return
        what = f"gguf={gguf}" + (f" with lora={lora}" if lora else "")
        if crashed(done.returncode):
            raise BackendError(
                f"{where}: llama.cpp crashed loading {what} and computing one token (in a child process): "
                f"{describe_exit(done.returncode)}; {build_advice()}its output ends: {log_tail(log)}"
            )
        raise BackendError(f"{where}: llama.cpp could not load {what}: {log_tail(log, lines=3)}")


ENGINE = Engine(
    name="llamacpp",
    backend=LlamaCppBackend,
    summary="llama.cpp in this process: a GGUF and a GGUF LoRA (CPU); engine option gguf=PATH, lora=PATH",
    packages=("llama_cpp", "transformers"),
    install="pip install 'spanjudge[llamacpp]'",
    extra="llamacpp",
    judge_options=("reuse_prefix",),
    constrain=grammar_option,
    reads_gguf=True,
)
