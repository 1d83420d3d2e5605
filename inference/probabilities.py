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
  written one;
- **location**: the log-probability of each of the first `LOCATION_TOKENS` tokens of each block's
  location as written (the quote of the output where the error lies), each given the reply before it:
  how sure the judge is of where the span starts, which the count decisions do not say (issue #67's
  candidate "a confidence read from the probability of the span's first tokens"). These are the written
  tokens' own probabilities, not normalised among alternatives: a reader reads them from the rows of
  the written reply it computes anyway.

Each alternative is a whole string (say `Overall score: 75` and the end of the turn), scored as
the model's tokenization of the reply with it, so a value written as two tokens counts as two
tokens; the alternatives of a choice are normalised among themselves. This module holds what every
engine shares (the choices, `ChoiceReader`, the assembly of `ReplyProbabilities`); each engine that
reads probabilities holds its own reader beside its backend, which gives each alternative's
log-probability: `backends.transformers_reader.ProbabilityReader` (one teacher-forced pass over prompt +
reply keeps its KV cache; each choice's alternatives run as one batch on a copy of it cut back to where
they branch), `backends.llamacpp.LlamaCppProbabilityReader`, and vLLM's two readers in
`backends.vllm_offline`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel

from .chat import encode_text, shared_length
from .contract import Evaluation
from .contract.render import (
    BLOCK_SEPARATOR,
    ERROR_HEADER,
    LINE_BREAK,
    LOCATION_FIELD,
    NO_ERROR,
    NO_LOCATION,
    SCORE_FIELD,
    SEVERITY_FIELD,
    render_judge,
)

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

SEVERITIES = tuple(range(1, 6))  # the contract's severity values (`ErrorAnnotation.severity`)
SCORES = tuple(range(0, 101))  # the contract's score values (`Evaluation.score`)
# the probability-aware reading keeps a written span when the judge writes it (and every block before
# it) with at least this probability along its reply
SPAN_KEPT_AT = 0.5
# what a reading holds, kept in a judgment's identity: judgments read before the location tokens were are never
# taken for ones read now (`eval.distill.phases`)
READING = "choices+locations"
# the location tokens read (`ErrorProbabilities.location_log_probs`): a quote's start is what the judge chooses
LOCATION_TOKENS = 4
_HEADER_LINE = re.compile(r"^Error \d+:$", re.MULTILINE)  # a block's header line in a rendered reply


class ErrorProbabilities(BaseModel):
    """One written error block: the probability of writing it given the blocks before it, and
    its severity as a distribution over the contract's values."""

    confidence: float
    expected_severity: float
    severity_distribution: dict[int, float]
    # log P(token | reply before it) of the location's first tokens as written (at most LOCATION_TOKENS, at least
    # one); empty in readings made before the locations were read
    location_log_probs: list[float] = []


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
    headers = [m.start() for m in _HEADER_LINE.finditer(text)]
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


def _location_spans(text: str, evaluation: Evaluation) -> list[tuple[int, int]]:
    """The character span of each block's location in a reply rendered by `render_judge`."""
    headers = [m.end() for m in _HEADER_LINE.finditer(text)]
    spans = []
    for header, error in zip(headers, evaluation.errors, strict=True):
        at = header + len(LINE_BREAK) + len(LOCATION_FIELD)
        spans.append((at, at + len(error.location if error.location is not None else NO_LOCATION)))
    return spans


def expected_count(continue_probabilities: Sequence[float]) -> float:
    """Σ_k Π_{j≤k} c_j: the expected number of errors when decision k goes on with probability c_k."""
    total, reach = 0.0, 1.0
    for probability in continue_probabilities:
        reach *= probability
        total += reach
    return total


def _assemble(
    evaluation: Evaluation,
    n_counts: int,
    n_severities: int,
    probabilities: list[list[float]],
    locations: list[list[float]],
) -> ReplyProbabilities:
    """`ReplyProbabilities` from each choice's normalised distribution, in `_choices`' order, and each block's
    location tokens' log-probabilities."""
    count_p = probabilities[:n_counts]
    severity_p = probabilities[n_counts : n_counts + n_severities]
    score_p = probabilities[-1]
    going_on = [p[0] for p in count_p]
    errors = [
        ErrorProbabilities(
            confidence=going_on[k] if k < len(going_on) else 1.0,  # a block past the contract's last decision
            expected_severity=sum(v * p for v, p in zip(SEVERITIES, severity_p[k], strict=True)),
            severity_distribution=dict(zip(SEVERITIES, severity_p[k], strict=True)),
            location_log_probs=locations[k],
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
    total = log_sum_exp(log_probabilities)
    return [math.exp(value - total) for value in log_probabilities]


def log_sum_exp(values: Sequence[float]) -> float:
    top = max(values)
    return top + math.log(sum(math.exp(v - top) for v in values))


def alternative_runs(tails: Sequence[Sequence[int]], end: bool) -> list[tuple[tuple[int, ...], list[int]]]:
    """What a reader runs after the point where a choice's alternatives (`tails`, token ids) part, so that each
    row read is computed once. The rows read are those after each prefix of a tail that predicts its next token,
    and with `end` (the choice ends the reply) also after the whole tail, where the turn's end is read; the row
    before the first token is the written reply's. The runs are the longest of those prefixes (a run inside a
    longer one is not run again), sorted; with each, the prefix lengths whose rows it gives (each prefix once,
    in the first run holding it)."""
    read = {tuple(tail[:length]) for tail in tails for length in range(1, len(tail) + end)}
    runs: list[tuple[tuple[int, ...], list[int]]] = []
    given: set[tuple[int, ...]] = set()
    for run in sorted(read - {prefix[:-1] for prefix in read}):
        lengths = [length for length in range(1, len(run) + 1) if run[:length] not in given]
        given.update(run[:length] for length in lengths)
        runs.append((run, lengths))
    return runs


class ChoiceReader:
    """What every engine's reader shares: the reply's choices, where their alternatives part from the
    written reply (in the judge's tokenization) and the assembly of `ReplyProbabilities`; an engine gives
    `_choice_log_probs`, each alternative's log-probability."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, end_ids: Collection[int], max_errors: int = 8) -> None:
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
        # each location token is a branch of its own with one tail, the written token: its row is the written
        # reply's, which every reader computes for the choices anyway (no alternative runs)
        located = [self._location_positions(text, span, reply) for span in _location_spans(text, evaluation)]
        branches += [(at, [[reply[at]]]) for positions in located for at in positions]
        ends = [choice.end for choice in choices] + [False] * (len(branches) - len(choices))
        log_probs = self._choice_log_probs(prompt_ids, reply, branches, ends)
        read = iter(values[0] for values in log_probs[len(choices) :])
        locations = [[next(read) for _ in positions] for positions in located]
        return _assemble(
            evaluation, len(counts), len(severities), [_normalised(v) for v in log_probs[: len(choices)]], locations
        )

    def _location_positions(self, text: str, span: tuple[int, int], reply: Sequence[int]) -> list[int]:
        """The reply positions of a location's first LOCATION_TOKENS tokens (the first: the token that holds the
        location's first character, which may begin with the space before it)."""
        start = shared_length(self._ids(text[: span[0]]), reply)
        stop = shared_length(self._ids(text[: span[1]]), reply)
        return list(range(start, max(start + 1, min(stop, start + LOCATION_TOKENS))))

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
