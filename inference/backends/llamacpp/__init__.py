"""The llama.cpp engine: llama.cpp in this process (llama-cpp-python's `Llama`: a GGUF, optionally a GGUF
LoRA, on CPU), its probability reader, and llama-cpp-python's OpenAI-compatible server on 127.0.0.1
(`LlamaCppServer`, reached through the `openai` engine) with the reader of a served judge's probabilities
(`LlamaCppProbabilities`).

`spec.model` is the model's Hugging Face folder or hub id, for its tokenizer and chat template (an
adapter folder's own tokenizer wins, as on transformers); `spec.options`:
- `gguf` (required): the model's GGUF file; `lora`: a GGUF LoRA (`spanjudge export --gguf-lora`);
- `n_ctx` (default 4096), `n_threads` (default: every core);
- `reuse_prefix` (default on): requests run in the order of their token ids, so those sharing a
  prompt prefix (every output of one input) follow each other, and llama.cpp reads only what a
  prompt does not share with the one before (llama-cpp-python keeps the longest common prefix of
  its KV cache); false clears the cache before every request, to measure what reuse saves;
- `grammar`: a GBNF grammar every reply is held to (set by the judge with `constrained=True`);
- `adapter`, `trust_remote_code`: set by the judge (the tokenizer's folder, and whether to run its code).

Before `Llama()` loads anything, the files are checked (`gguf_files.check_model_files`: each a GGUF,
the LoRA an adapter that fits the model, the tokenizer of the model's vocabulary): one line each. What
cannot be checked from the files (a llama.cpp built for another CPU, a damaged tensor) is tried once per
process in a child process that loads the model and computes one token (`probe`): a crash there is
reported with its signal and output, and this process lives.

The judge's probabilities (`probabilities=True`) are read on a second llama.cpp context of the same GGUF
and LoRA (`LlamaCppProbabilityReader`, below), made at the first reading: it runs a reply's
alternatives side by side as sequences of one cache, which `Llama`'s single-sequence context cannot. The
prompt generation has just read is copied into it (KV cells, not read again), so `probabilities=True`
costs the reply and the alternatives only.
"""

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
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, cast

from spanjudge.core.crash import crashed, describe_exit, log_tail
from spanjudge.core.errors import InputError, SpanjudgeError

from ...chat import encode_chat, encode_templated, judge_end_ids, shared_length
from ...contract import Evaluation
from ...probabilities import ChoiceReader, ReplyProbabilities
from ...shipped_models import free_port
from ..adapters import tokenizer_source
from ..base import Backend, BackendError, CallResult, ChatRequest, Completion, ResultCallback
from ..engine import Engine, grammar_option
from ..server import forget_endpoint, watch_endpoint
from ..spec import BackendSpec
from .build import build_advice
from .gguf_files import check_model_files

if TYPE_CHECKING:
    import llama_cpp
    import numpy as np
    from numpy.typing import NDArray
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
        n_threads = int(options.pop("n_threads", max(1, os.cpu_count() or 1)))
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


# tokens a pass reads at most, and sequences one context holds (capped by the library's own maximum): an
# evaluation's ~120 alternatives (101 score values) fit one or two passes
_LLAMA_CPP_BATCH = 512
_LLAMA_CPP_SEQUENCES = 256


class LlamaCppProbabilityReader(ChoiceReader):
    """Reads `ReplyProbabilities` with llama.cpp in this process, on a context of its own (llama-cpp-python's
    low-level API) made from a GGUF and optionally a GGUF LoRA: one pass over prompt + reply, then the
    alternatives of every choice together in as few passes as fit, each alternative a sequence of its own on
    the same KV cache (`llama_memory_seq_cp` shares the cells of the prompt and of the reply up to where it
    parts; nothing is copied). Alternatives that begin alike (`8` of `87` and `85`) share those tokens' cells,
    and a token whose row nothing reads (an alternative's last, unless the choice ends the reply) is not run.

    Why its own context: `llama_cpp.Llama` makes one with a single sequence, so it could only run the ~120
    alternatives of an evaluation one after another, ~60 ms each after a 3.8k-token prompt on 2 cores
    (docs/research/distillation.md; bench/results/llamacpp_reading.md compares the two). The context keeps
    what it last read: the next prompt reads only the tokens it does not share with it (the judge sends the
    outputs of one input one after another). `source`: a `llama_cpp.Llama` of the same GGUF and LoRA (the
    in-process engine's, which has just read the prompt to write the reply): the reader uses its weights, and
    when it shares more of the next prompt, its cache is copied here instead of read again.

    The token ids come from the judge's tokenizer (`tokenizer`), so every engine reads the same sequences; the
    GGUF must have been converted from that tokenizer's model (same vocabulary). Through llama.cpp's *server*
    the same reading is not offered: it returns no log-probabilities of prompt tokens worth the cost (~110
    requests an evaluation, each sorting the whole vocabulary for every prompt position)."""

    def __init__(
        self,
        gguf: str | Path,
        tokenizer: PreTrainedTokenizerBase,
        end_ids: Collection[int],
        *,
        lora: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        max_errors: int = 8,
        source: llama_cpp.Llama | None = None,
    ) -> None:
        import logging

        import llama_cpp

        super().__init__(tokenizer, end_ids, max_errors)
        self._llama = llama_cpp
        self._stack = ExitStack()  # frees what was made, in reverse: batch, context, model
        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # as `Llama(verbose=False)` does
        llama_cpp.llama_backend_init()
        if source is not None:  # its weights, not a second load of the GGUF (close this reader before it)
            model = source.model
        else:
            model = llama_cpp.llama_model_load_from_file(str(gguf).encode(), llama_cpp.llama_model_default_params())
            if model is None:
                raise ValueError(f"llama.cpp could not load the GGUF {gguf}")
            self._stack.callback(llama_cpp.llama_model_free, model)
        self.n_ctx, self.n_batch = n_ctx, _LLAMA_CPP_BATCH
        self.sequences = min(_LLAMA_CPP_SEQUENCES, llama_cpp.llama_max_parallel_sequences())
        params = llama_cpp.llama_context_default_params()
        params.n_ctx = n_ctx + self.n_batch  # the reply's tokens and, beyond them, one pass of alternatives
        params.n_batch = params.n_ubatch = self.n_batch
        params.n_seq_max, params.kv_unified = self.sequences, True  # one cache, its cells shared by sequences
        params.n_threads = params.n_threads_batch = n_threads or max(1, os.cpu_count() or 1)
        params.flash_attn_type = 0  # off, as `Llama` has it: the reading equals generation's model
        self.ctx = llama_cpp.llama_init_from_model(model, params)
        if self.ctx is None:
            raise ValueError(f"llama.cpp could not make a context of {n_ctx} tokens for {gguf}")
        self._stack.callback(llama_cpp.llama_free, self.ctx)
        if lora:
            adapter = llama_cpp.llama_adapter_lora_init(model, str(lora).encode())  # freed with the model
            if adapter is None or llama_cpp.llama_set_adapters_lora(
                self.ctx, (llama_cpp.llama_adapter_lora_p_ctypes * 1)(adapter), 1, (ctypes.c_float * 1)(1.0)
            ):
                raise ValueError(f"llama.cpp could not apply the GGUF LoRA {lora}")
        self.memory = llama_cpp.llama_get_memory(self.ctx)
        self.n_vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(model))
        self.batch = llama_cpp.llama_batch_init(self.n_batch, 0, self.sequences)
        self._stack.callback(llama_cpp.llama_batch_free, self.batch)
        self._held: list[int] = []  # the tokens sequence 0 holds: the last prompt + reply read
        self._source = source
        self.tokens_read = 0  # tokens put in sequence 0 so far (not those copied from `source`)

    def close(self) -> None:
        self._stack.close()

    def _decode(self, tokens: list[tuple[int, int, Sequence[int], bool]]) -> NDArray[np.float64]:
        """One pass over `tokens` (token, position, its sequences, whether its row is read): the log-softmax
        rows read, in order."""
        import numpy as np

        batch, llama_cpp = self.batch, self._llama
        batch.n_tokens = len(tokens)
        for i, (token, position, sequences, wanted) in enumerate(tokens):
            batch.token[i], batch.pos[i], batch.n_seq_id[i], batch.logits[i] = token, position, len(sequences), wanted
            for j, sequence in enumerate(sequences):
                batch.seq_id[i][j] = sequence
        if llama_cpp.llama_decode(self.ctx, batch) != 0:
            raise RuntimeError(f"llama.cpp could not read {len(tokens)} tokens (its context holds {self.n_ctx})")
        count = sum(wanted for *_, wanted in tokens)
        if not count:
            return np.empty((0, self.n_vocab))
        rows = np.ctypeslib.as_array(llama_cpp.llama_get_logits(self.ctx), shape=(count, self.n_vocab))
        rows = rows.astype(np.float64)
        return rows - np.logaddexp.reduce(rows, axis=1, keepdims=True)

    def _read_written(self, written: list[int], wanted: set[int]) -> dict[int, Any]:
        """Puts prompt + reply (`written`) in sequence 0, reading only what it does not share with what it held
        (or with `source`, copied); the rows after the positions in `wanted` (every one of them is read again)."""
        if len(written) > self.n_ctx:
            raise ValueError(f"prompt + reply are {len(written)} tokens; the llama.cpp context holds {self.n_ctx}")
        if self._source is not None:
            theirs = list(self._source.input_ids[: self._source.n_tokens])
            if shared_length(theirs, written) > shared_length(self._held, written):
                self._copy_sequence(self._source.ctx, theirs)
        kept = min(shared_length(self._held, written), min(wanted))
        self._llama.llama_memory_seq_rm(self.memory, -1, kept, -1)
        self._held = written[:kept]
        rows: dict[int, Any] = {}
        for begin in range(kept, len(written), self.n_batch):
            positions = range(begin, min(len(written), begin + self.n_batch))
            read = self._decode([(written[p], p, (0,), p in wanted) for p in positions])
            rows.update(zip([p for p in positions if p in wanted], read, strict=True))
            self._held = written[: positions[-1] + 1]
            self.tokens_read += len(positions)
        return rows

    def _copy_sequence(self, ctx: llama_cpp.llama_context_p, tokens: list[int]) -> None:
        """Sequence 0 becomes a copy of sequence 0 of another context of the same model (`ctx`, holding
        `tokens`): a memory copy of its KV cells, far cheaper than reading a long prompt again."""
        llama_cpp = self._llama
        size = llama_cpp.llama_state_seq_get_size(ctx, 0)
        state = (ctypes.c_uint8 * size)()
        copied = llama_cpp.llama_state_seq_get_data(ctx, state, size, 0) == size
        llama_cpp.llama_memory_seq_rm(self.memory, -1, -1, -1)
        self._held = []
        if copied and llama_cpp.llama_state_seq_set_data(self.ctx, state, size, 0):
            self._held = tokens

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        import numpy as np

        starts = [len(prompt_ids) + start for start, _ in branches]  # the first tail token is predicted before it
        first = self._read_written([*prompt_ids, *reply], {at - 1 for at in starts})
        # the tokens of each alternative whose rows are read: all but its last, which only an ending choice reads
        runs = [
            (at, tail[: len(tail) if end else len(tail) - 1])
            for at, (_, tails), end in zip(starts, branches, ends, strict=True)
            for tail in tails
        ]
        rows = self._read_alternatives([run for run in runs if run[1]])
        out: list[list[float]] = []
        for at, (_, tails), end in zip(starts, branches, ends, strict=True):
            totals = []
            for tail in tails:
                total = float(first[at - 1][tail[0]]) if tail else 0.0
                total += sum(float(rows[at, tuple(tail[:j])][tail[j]]) for j in range(1, len(tail)))
                if end:
                    last = rows[at, tuple(tail)] if tail else first[at - 1]
                    total += float(np.logaddexp.reduce(last[self.end_ids]))
                totals.append(total)
            out.append(totals)
        return out

    def _read_alternatives(self, runs: list[tuple[int, list[int]]]) -> dict[tuple[int, tuple[int, ...]], Any]:
        """The row after each prefix of each run (where it parts from sequence 0, its tokens), keyed by (where,
        prefix), in passes of at most `sequences - 1` runs and `n_batch` tokens."""
        rows: dict[tuple[int, tuple[int, ...]], Any] = {}
        group: list[tuple[int, list[int]]] = []
        size = 0  # the group's tokens
        for run in runs:
            if group and (len(group) == self.sequences - 1 or size + len(run[1]) > self.n_batch):
                rows.update(self._read_runs(group))
                group, size = [], 0
            group.append(run)
            size += len(run[1])
        if group:
            rows.update(self._read_runs(group))
        return rows

    def _read_runs(self, runs: list[tuple[int, list[int]]]) -> dict[tuple[int, tuple[int, ...]], Any]:
        """One pass: each run a sequence sharing sequence 0's cells before where it parts; runs that part at the
        same place share the cells of the tokens they begin with."""
        nodes: dict[tuple[int, tuple[int, ...]], list[int]] = {}  # (where, prefix): the sequences it is in
        for sequence, (at, tokens) in enumerate(runs, start=1):
            self._llama.llama_memory_seq_cp(self.memory, 0, sequence, 0, at)
            for j in range(len(tokens)):
                nodes.setdefault((at, tuple(tokens[: j + 1])), []).append(sequence)
        try:
            read = self._decode([(p[-1], at + len(p) - 1, seqs, True) for (at, p), seqs in nodes.items()])
        finally:
            for sequence in range(1, len(runs) + 1):
                self._llama.llama_memory_seq_rm(self.memory, sequence, -1, -1)
        return dict(zip(nodes, read, strict=True))


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
        self.n_threads = n_threads or max(1, os.cpu_count() or 1)
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


ENGINE = Engine(
    name="llamacpp",
    backend=LlamaCppBackend,
    summary="llama.cpp in this process: a GGUF and a GGUF LoRA (CPU); engine option gguf=PATH, lora=PATH",
    packages=("llama_cpp", "transformers"),
    install="pip install 'spanjudge[llamacpp]'",
    extra="llamacpp",
    judge_options=("reuse_prefix",),
    read_probabilities=True,
    constrain=grammar_option,
)
