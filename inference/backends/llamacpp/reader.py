"""The judge's probabilities on a second llama.cpp context of the same GGUF and LoRA: a reply's alternatives
run side by side as sequences of one cache (see the package docstring)."""

from __future__ import annotations

import ctypes
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.cpus import cpu_threads

from ...chat import shared_length
from ...probabilities import ChoiceReader

if TYPE_CHECKING:
    import llama_cpp
    import numpy as np
    from numpy.typing import NDArray
    from transformers import PreTrainedTokenizerBase


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
        params.n_threads = params.n_threads_batch = n_threads or cpu_threads()
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
