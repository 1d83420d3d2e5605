"""What the judge's own probabilities say about its written evaluation (probability-aware judging).

The judge writes one greedy reply. Along that reply, in the contract's format (rendered again
from the parsed evaluation, `contract.render_judge`, so every engine reads the same text), the
model is read at each point where the reply chooses among the contract's values:

- **count decisions**: at the start, `Error 1:` or `No Error`; after block k, `Error k+1:` or
  `Overall score:` (no choice after the contract's last block). `p_no_error` is the
  probability of `No Error` at the start; c_k, the probability of going on at decision k, is
  block k's **confidence** (the probability of writing that block given the ones before it);
  the **expected number of errors** is Σ_k Π_{j≤k} c_j over the decisions along the reply (the
  first decision not taken is read; decisions beyond it, which would need other replies, are not);
- **severity**: after `Severity: `, each value 1-5 the contract allows; the **expected severity**;
- **score**: after `Overall score: `, each value 0-100 the contract allows, followed by the
  reply's end; the **expected score** (G-Eval's weighting over the contract's values) beside the
  written one.

Each alternative is a whole string (say `Overall score: 75` and the end of the turn), scored as
the model's tokenization of the reply with it, so a value written as two tokens counts as two
tokens; the alternatives of a choice are normalised among themselves. One teacher-forced pass
over prompt + reply keeps its KV cache; each choice's alternatives run as one batch on a copy of
that cache cut back to where they branch (transformers' cache API: `crop`,
`batch_repeat_interleave`), so the prompt is read once per evaluation.
"""

from __future__ import annotations

import copy
import ctypes
import inspect
import math
import os
import re
from collections.abc import Collection, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .chat import encode_text, shared_length
from .contract import Evaluation
from .contract.render import (
    BLOCK_SEPARATOR,
    ERROR_HEADER,
    NO_ERROR,
    SCORE_FIELD,
    SEVERITY_FIELD,
    render_judge,
)

SEVERITIES = tuple(range(1, 6))  # the contract's severity values (`ErrorAnnotation.severity`)
SCORES = tuple(range(0, 101))  # the contract's score values (`Evaluation.score`)
_BATCH = 16  # alternatives per forward pass at most: 101 score values x Gemma's 262k vocabulary stay small
# the prompt's KV cache is copied once per alternative in a pass: an 8B model's 4k-token prompt
# holds 0.5 GB of it, so a pass takes as many alternatives as fit this (at least one); on a CUDA
# device a quarter of its free memory when more (an 80 GB card then takes 16 such copies a pass:
# bench/results/gpu_probabilities.md)
CACHE_BUDGET_BYTES = 2 * 1024**3
# llama.cpp: tokens a pass reads at most, and sequences one context holds (capped by the library's own
# maximum): an evaluation's ~120 alternatives (101 score values) fit one or two passes
_LLAMA_CPP_BATCH = 512
_LLAMA_CPP_SEQUENCES = 256


# the probability-aware reading keeps a written span when the judge writes it (and every block before
# it) with at least this probability along its reply
SPAN_KEPT_AT = 0.5


class ErrorProbabilities(BaseModel):
    """One written error block: the probability of writing it given the blocks before it, and
    its severity as a distribution over the contract's values."""

    confidence: float
    expected_severity: float
    severity_distribution: dict[int, float]


class ReplyProbabilities(BaseModel):
    """The judge's probabilities along its written evaluation (see the module docstring)."""

    p_no_error: float
    expected_errors: float
    errors: list[ErrorProbabilities]
    expected_score: float
    score_distribution: dict[int, float]

    def written(self) -> list[float]:
        """Per written error, the probability that the judge writes at least that many errors along
        this reply (the product of the confidences up to it); the probability-aware reading keeps
        the spans where it is at least SPAN_KEPT_AT."""
        at_least = [1.0]
        for error in self.errors:
            at_least.append(at_least[-1] * error.confidence)
        return at_least[1:]


@dataclass(frozen=True)
class _Choice:
    """A point of the reply (a character offset) and the strings that may follow there."""

    at: int
    alternatives: tuple[str, ...]
    end: bool = False  # each alternative ends the reply (the score)


def _choices(text: str, evaluation: Evaluation, max_errors: int) -> tuple[list[_Choice], list[_Choice], _Choice]:
    """The count decisions, the severities and the score of a reply rendered by `render_judge`."""
    errors = len(evaluation.errors)
    headers = [m.start() for m in re.finditer(r"^Error \d+:$", text, re.MULTILINE)]
    score_at = text.rindex(SCORE_FIELD)
    starts = [0, *(h for h in headers[1:]), score_at]  # where decision k is taken (k = 1 .. errors+1)
    counts = [_Choice(0, (ERROR_HEADER.format(number=1), NO_ERROR))]
    for k in range(1, errors + 1):
        if k < max_errors:
            counts.append(_Choice(starts[k], (ERROR_HEADER.format(number=k + 1), SCORE_FIELD.rstrip())))
    severities = [
        _Choice(m.end(), tuple(f"{value}{BLOCK_SEPARATOR[0]}" for value in SEVERITIES))
        for m in re.finditer(re.escape(SEVERITY_FIELD), text)
    ]
    if len(severities) != errors:
        raise ValueError("the reply's severity lines do not match its errors")
    score = _Choice(score_at + len(SCORE_FIELD), tuple(str(value) for value in SCORES), end=True)
    return counts, severities, score


def expected_count(continue_probabilities: Sequence[float]) -> float:
    """Σ_k Π_{j≤k} c_j: the expected number of errors when decision k goes on with probability c_k."""
    total, reach = 0.0, 1.0
    for probability in continue_probabilities:
        reach *= probability
        total += reach
    return total


def _assemble(
    evaluation: Evaluation, n_counts: int, n_severities: int, probabilities: list[list[float]]
) -> ReplyProbabilities:
    """`ReplyProbabilities` from each choice's normalised distribution, in `_choices`' order."""
    count_p = probabilities[:n_counts]
    severity_p = probabilities[n_counts : n_counts + n_severities]
    score_p = probabilities[-1]
    going_on = [p[0] for p in count_p]
    errors = [
        ErrorProbabilities(
            confidence=going_on[k] if k < len(going_on) else 1.0,  # a block past the contract's last decision
            expected_severity=sum(v * p for v, p in zip(SEVERITIES, severity_p[k], strict=True)),
            severity_distribution=dict(zip(SEVERITIES, severity_p[k], strict=True)),
        )
        for k in range(len(evaluation.errors))
    ]
    return ReplyProbabilities(
        p_no_error=count_p[0][1],
        expected_errors=expected_count(going_on),
        errors=errors,
        expected_score=sum(v * p for v, p in zip(SCORES, score_p, strict=True)),
        score_distribution=dict(zip(SCORES, score_p, strict=True)),
    )


def _normalised(log_probabilities: Sequence[float]) -> list[float]:
    total = _log_sum_exp(log_probabilities)
    return [math.exp(value - total) for value in log_probabilities]


def _log_sum_exp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def cache_budget(device: Any) -> int:
    """The memory the copies of a prompt's cache may take in one pass on `device` (a torch device):
    `CACHE_BUDGET_BYTES`, or on a CUDA device a quarter of its free memory when that is more."""
    if getattr(device, "type", None) != "cuda":
        return CACHE_BUDGET_BYTES
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return max(CACHE_BUDGET_BYTES, free // 4)


def alternatives_per_pass(row_bytes: float, budget_bytes: int) -> int:
    """How many alternatives one forward pass takes: each copies a prompt cache of `row_bytes`."""
    return max(1, min(_BATCH, int(budget_bytes // max(1.0, row_bytes))))


def _cache_bytes(cache: Any) -> int:
    """The memory a KV cache's tensors hold (transformers 5's layered caches and 4.x's lists)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        tensors = [t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))]
    else:
        tensors = [*getattr(cache, "key_cache", []), *getattr(cache, "value_cache", [])]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None and hasattr(t, "numel"))


class _ChoiceReader:
    """What every engine's reader shares: the reply's choices, where their alternatives part from the
    written reply (in the judge's tokenization) and the assembly of `ReplyProbabilities`; an engine gives
    `_choice_log_probs`, each alternative's log-probability."""

    def __init__(self, tokenizer: Any, end_ids: Collection[int], max_errors: int = 8) -> None:
        self.tokenizer = tokenizer
        self.end_ids = sorted(end_ids)
        self.max_errors = max_errors

    def _ids(self, text: str) -> list[int]:
        # the reply as training encoded it: its text never becomes a control token (`chat.encode_text`)
        return encode_text(self.tokenizer, text)

    def read(self, prompt_ids: Sequence[int], evaluation: Evaluation) -> ReplyProbabilities:
        """The probabilities along `evaluation` (scored, as the judge parsed it) after the
        encoded prompt `prompt_ids` (the chat template's generation prompt included)."""
        text = render_judge(evaluation)
        counts, severities, score = _choices(text, evaluation, self.max_errors)
        choices = (*counts, *severities, score)
        reply = self._ids(text)
        branches = [self._branch(choice, text, reply) for choice in choices]
        log_probs = self._choice_log_probs(prompt_ids, reply, branches, [choice.end for choice in choices])
        return _assemble(evaluation, len(counts), len(severities), [_normalised(v) for v in log_probs])

    def _branch(self, choice: _Choice, text: str, reply: Sequence[int]) -> tuple[int, list[list[int]]]:
        """(the reply token where the alternatives part, each alternative's tokens from there)."""
        sequences = [self._ids(text[: choice.at] + alternative) for alternative in choice.alternatives]
        start = min(shared_length(sequence, reply) for sequence in sequences)
        return start, [sequence[start:] for sequence in sequences]

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        raise NotImplementedError


class ProbabilityReader(_ChoiceReader):
    """Reads `ReplyProbabilities` from a causal LM (transformers or PEFT) and its tokenizer.

    `end_ids`: the tokens that end the judge's turn (eos, Gemma's `<end_of_turn>`).
    `cache_budget_bytes`: how much memory the copies of the prompt's KV cache may take in one
    forward pass over alternatives (fewer alternatives a pass on a long prompt; same results); by
    default `cache_budget` of the model's device.
    `reuse_prefix`: keep the last reading's KV cache, so the next prompt reads only the tokens it does
    not share with the last one (the judge reads the outputs of one input one after another)."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        end_ids: Collection[int],
        max_errors: int = 8,
        cache_budget_bytes: int | None = None,
        reuse_prefix: bool = False,
    ) -> None:
        import torch

        super().__init__(tokenizer, end_ids, max_errors)
        self.model = model
        self.cache_budget_bytes = cache_budget_bytes
        self._torch = torch
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        # transformers 5 names the cache argument `cache`; 4.x `past_key_values`
        self._cache_argument = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        self.reuse_prefix = reuse_prefix
        self._held: tuple[list[int], Any] | None = None  # the last reading's tokens and KV cache

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        """For each choice, log P(tail | prompt + reply[:start]) of each alternative tail (and, where the
        choice ends the reply, of the turn's end after it): one teacher-forced pass over prompt + reply,
        whose KV cache each choice's alternatives reuse."""
        with self._torch.inference_mode():
            keep = sorted({len(prompt_ids) + start - 1 for start, _ in branches})
            written = [*prompt_ids, *reply]
            read, past = self._held_prefix(written, len(prompt_ids))
            output = self.model(
                input_ids=self._torch.tensor([written[read:]], device=self.model.device),
                use_cache=True,
                logits_to_keep=self._torch.tensor([k - read for k in keep], device=self.model.device),
                **({self._cache_argument: past} if past is not None else {}),
            )
            cache = output["cache"] if "cache" in output else output["past_key_values"]  # transformers 5, 4.x
            if self.reuse_prefix:
                self._held = (written, cache)  # the alternatives below read copies of it
            first = {
                position: row for position, row in zip(keep, output.logits[0].float().log_softmax(-1), strict=True)
            }
            return [
                self._alternative_log_probs(prompt_ids, start, tails, first, cache, end)
                for (start, tails), end in zip(branches, ends, strict=True)
            ]

    def _held_prefix(self, written: list[int], prompt_length: int) -> tuple[int, Any]:
        """How many leading tokens of `written` the last reading's cache holds (at most the prompt's but
        its last token, whose row is computed fresh) and a copy of that cache cut back to them; (0, None)
        when nothing is shared or reuse is off."""
        if self._held is None:
            return 0, None
        held, cache = self._held
        read = min(shared_length(held, written), prompt_length - 1)
        if read <= 0:
            return 0, None
        past = copy.deepcopy(cache)
        try:
            past.crop(read - past.get_seq_length())  # negative: the tokens to drop
        except (RuntimeError, ValueError):  # a sliding window past its size cannot be cut back: read it whole
            return 0, None
        return read, past

    def _alternative_log_probs(
        self,
        prompt_ids: Sequence[int],
        start: int,
        tails: list[list[int]],
        first: dict[int, Any],
        cache: Any,
        end: bool,
    ) -> list[float]:
        """log P(tail | prompt + reply[:start]) for each tail (and, with `end`, of the turn's end after it)."""
        torch = self._torch
        at = len(prompt_ids) + start  # the first tail token is predicted by the row before it
        opening = first[at - 1]
        totals = [float(opening[tail[0]]) if tail else 0.0 for tail in tails]
        budget = self.cache_budget_bytes or cache_budget(self.model.device)
        size = alternatives_per_pass(_cache_bytes(cache) * at / max(1, cache.get_seq_length()), budget)
        for begin in range(0, len(tails), size):
            group = tails[begin : begin + size]
            width = max(len(tail) for tail in group)
            if width == 0:
                continue
            pad = group[0][0] if group[0] else 0
            ids = torch.tensor([tail + [pad] * (width - len(tail)) for tail in group], device=self.model.device)
            branch = copy.deepcopy(cache)
            branch.crop(at - branch.get_seq_length())  # negative: the tokens to drop (transformers 4.56 and 5)
            branch.batch_repeat_interleave(len(group))
            logits = self.model(input_ids=ids, use_cache=True, **{self._cache_argument: branch}).logits
            rows = logits.float().log_softmax(-1)
            for offset, tail in enumerate(group):
                index = begin + offset
                totals[index] += sum(float(rows[offset, j - 1, tail[j]]) for j in range(1, len(tail)))
                if end:
                    last = rows[offset, len(tail) - 1] if tail else opening
                    totals[index] += float(torch.logsumexp(last[self.end_ids], dim=0))
        return totals


class LlamaCppProbabilityReader(_ChoiceReader):
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
        tokenizer: Any,
        end_ids: Collection[int],
        *,
        lora: str | Path | None = None,
        n_ctx: int = 4096,
        n_threads: int | None = None,
        max_errors: int = 8,
        source: Any = None,
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

    def _decode(self, tokens: list[tuple[int, int, Sequence[int], bool]]) -> Any:
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

    def _copy_sequence(self, ctx: Any, tokens: list[int]) -> None:
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


class VLLMProbabilityReader(_ChoiceReader):
    """Reads `ReplyProbabilities` with vLLM's offline engine (`vllm.LLM`), through its prompt log-probabilities:
    each alternative is one prompt of token ids (prompt + reply up to where it parts + the alternative, and,
    where the choice ends the reply, one of the turn's end tokens after it), sent with
    `SamplingParams(max_tokens=1, prompt_logprobs=0)`, which returns the log-probability of every prompt token
    under the model (the raw logits: no sampler touches them). All of an evaluation's alternatives go in one
    `LLM.generate` call, which vLLM batches itself. `lora_request`: the judge's adapter, as generation has it.

    Not run against vLLM here: vLLM needs a CUDA GPU and could not be installed on the machines this was
    written on (tested on a stand-in with `LLM.generate`'s interface, against the brute-force computation)."""

    def __init__(
        self, llm: Any, tokenizer: Any, end_ids: Collection[int], max_errors: int = 8, lora_request: Any = None
    ) -> None:
        super().__init__(tokenizer, end_ids, max_errors)
        self.llm = llm
        self.lora_request = lora_request

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        from vllm import SamplingParams

        # (choice, alternative, the prompt's tokens, its first scored position): with several end tokens, one
        # prompt per end token; their probabilities add up (log-sum-exp) to the alternative's
        prompts: list[tuple[int, int, list[int], int]] = []
        for index, ((start, tails), end) in enumerate(zip(branches, ends, strict=True)):
            before = [*prompt_ids, *reply[:start]]
            for alternative, tail in enumerate(tails):
                for end_id in self.end_ids if end else [None]:
                    ids = [*before, *tail, *([] if end_id is None else [end_id])]
                    prompts.append((index, alternative, ids, len(before)))
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for _, _, ids, _ in prompts],
            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0),
            use_tqdm=False,
            lora_request=self.lora_request,
        )
        parts: list[list[list[float]]] = [[[] for _ in tails] for _, tails in branches]
        for (index, alternative, ids, first), output in zip(prompts, outputs, strict=True):
            logprobs = output.prompt_logprobs  # one entry per prompt token, None for the first
            parts[index][alternative].append(sum(_logprob(logprobs[j], ids[j]) for j in range(first, len(ids))))
        return [[_log_sum_exp(values) for values in choice] for choice in parts]


class VLLMCachedProbabilityReader(_ChoiceReader):
    """Reads `ReplyProbabilities` with vLLM's offline engine without reading the prompt again for each
    alternative: one generation request per point where an alternative needs its next token's probability
    (prompt + reply up to where the alternatives part + the alternative's tokens so far), each asking for
    the `top_logprobs` most likely next tokens (`SamplingParams(max_tokens=1, logprobs=K)`). Those requests
    share the judge's prompt and reply, which vLLM's prefix cache holds (`enable_prefix_caching`, on by
    default), so each computes only its last few tokens; `prompt_logprobs` would turn the cache off for
    them (vLLM PR #13949).

    **The approximation.** vLLM returns the top K log-probabilities of each next token (the raw logits'
    log-softmax, before any sampler: exact for those K). A token outside them has at most the smaller of
    the K-th probability and the mass the K leave (1 − Σ top K), and that bound is what it is given; it is
    counted in `approximated`. A trained judge puts nearly all the mass of its decisions on a few tokens,
    so only improbable alternatives are bounded, and a choice's distribution moves by at most the mass
    outside the top K (tested against the exact transformers reader on the trained smoke judge). Ask for
    more with the engine's `max_logprobs` (vLLM's default and the cap on K: 20).

    Not run against vLLM here (it needs a CUDA GPU): tested on a stand-in with `LLM.generate`'s interface
    that answers from a transformers model."""

    def __init__(
        self,
        llm: Any,
        tokenizer: Any,
        end_ids: Collection[int],
        max_errors: int = 8,
        lora_request: Any = None,
        top_logprobs: int = 20,
    ) -> None:
        super().__init__(tokenizer, end_ids, max_errors)
        self.llm = llm
        self.lora_request = lora_request
        self.top_logprobs = top_logprobs
        self.requests = 0  # requests sent, over this reader's life
        self.approximated = 0  # log-probabilities bounded because they were outside the top K

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        from vllm import SamplingParams

        # every point an alternative needs the next token's distribution at, once
        points: dict[tuple[int, ...], None] = {}
        for (start, tails), end in zip(branches, ends, strict=True):
            before = (*prompt_ids, *reply[:start])
            for tail in tails:
                for j in range(len(tail) + (1 if end else 0)):
                    points[(*before, *tail[:j])] = None
        order = list(points)
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(ids)} for ids in order],
            SamplingParams(max_tokens=1, temperature=0.0, logprobs=self.top_logprobs),
            use_tqdm=False,
            lora_request=self.lora_request,
        )
        self.requests += len(order)
        top = {ids: _top_logprobs(output) for ids, output in zip(order, outputs, strict=True)}
        out: list[list[float]] = []
        for (start, tails), end in zip(branches, ends, strict=True):
            before = (*prompt_ids, *reply[:start])
            totals = []
            for tail in tails:
                total = sum(self._log_p(top[(*before, *tail[:j])], tail[j]) for j in range(len(tail)))
                if end:
                    last = top[(*before, *tail)]
                    total += _log_sum_exp([self._log_p(last, end_id) for end_id in self.end_ids])
                totals.append(total)
            out.append(totals)
        return out

    def _log_p(self, top: dict[int, float], token: int) -> float:
        """`token`'s log-probability from one point's top K, or its bound when it is not among them."""
        if token in top:
            return top[token]
        self.approximated += 1
        return _outside_top_bound(top)


def _top_logprobs(output: Any) -> dict[int, float]:
    """{token: log-probability} of a one-token generation's top K (vLLM: `outputs[0].logprobs[0]`)."""
    top = output.outputs[0].logprobs[0]
    return {int(token): float(getattr(value, "logprob", value)) for token, value in top.items()}


def _outside_top_bound(top: dict[int, float]) -> float:
    """The most log-probability a token outside these top K can have: min(the K-th's, log of what they leave)."""
    kth = min(top.values())
    left = 1.0 - sum(math.exp(value) for value in top.values())
    return min(kth, math.log(left)) if left > 0 else kth


def _logprob(position: Any, token: int) -> float:
    """The log-probability vLLM reports for `token` at one prompt position (a `Logprob`, or a bare float)."""
    value = position[token]
    return float(getattr(value, "logprob", value))
