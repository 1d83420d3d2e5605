"""Drafted greedy decoding for the transformers engine (`decoding: drafted`): the judge's greedy reply, written
with fewer and cheaper forward passes, then read for probabilities from the same KV cache.

A judge's reply quotes the output it judges in a fixed format that its prompt spells out, and on a CPU a small
model's step is dominated by its output layer (Gemma 3's 262,144 words: 25 of 56 ms a step at batch 1 on a 2-core
Xeon, bench/results/cut_output_layer.md). So one reply at a time:

- **prompt lookup** (as transformers' `prompt_lookup_num_tokens`): the next `DRAFT_TOKENS` tokens are guessed by
  copying what followed the latest earlier occurrence of the last `NGRAM` tokens in the reply, the prompt, or the
  judge's last `HISTORY` replies (a judge explains alike from output to output); one pass checks the guess, the
  agreeing prefix and the model's own next token are kept, and the cache is cut back over the rest;
- **a cut output layer**: the passes compute only the rows of the tokens the reply is likely to use (the prompt's,
  the judge format's, the end of turn, and every token this judge has written before), a few thousand instead of
  the whole vocabulary;
- **a full check**: once the reply is written, every position's whole output row is computed in a few matrix
  products, and where the whole row's argmax is not the written token (a word outside the cut vocabulary), the
  reply is cut there, that token written, and decoding goes on from it. The reply is then greedy decoding's over
  the whole vocabulary, pass for pass up to floating-point rounding (a pass over several tokens sums in another
  order than one over one: a near-tie can flip, as between batch sizes);
- **one cache**: the writing leaves its cache and final hidden states with the engine's probability reader
  (`ProbabilityReader.hold`), which then reads the reply's choices without reading prompt and reply again, and the
  next prompt reads only what it does not share with this one (the outputs of one input one after another).

Only greedy requests without stop strings or a grammar are drafted; the others take the batched path. With
`stop_at_repeat` (`stop_at=contract.first_repeat`), a reply that writes an error block again word for word (a
small judge's greedy loop) is cut before that block once its tokens are checked, `Overall score:` is fed for the
judge in one pass, and the judge writes its score from there (`_stop`, `_force`): its errors end where the loop
began.

Measured (bench/results/drafted_judging.md, 2-core Xeon): a Gemma 3 student's protocol judging of 120 dev outputs,
the same replies as the batched engine's (fixed for Gemma 3's padding), 4.69 s an output against 7.88 (1.68x).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..contract import MAX_ERRORS, ErrorAnnotation, Evaluation
from ..contract.render import SCORE_FIELD, render_judge
from .transformers_reader import ProbabilityReader, prefill_chunks, roll_back

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

# The lookup's settings, replayed against a Gemma 3 student's 120 greedy dev replies (bench/judging_drafts.py, no model
# run): reply tokens a pass with 2-token tails and 5-token guesses in prompt and reply 2.21; 3 and 8, 2.44; 3 and 8
# with the last 3 replies (in prompt order) looked up too, 3.69 (bench/results/judging_drafts_history.md)
NGRAM = 3  # the longest tail looked up (transformers' prompt lookup: 2)
DRAFT_TOKENS = 8
HISTORY = 3
# a written stretch is checked against the whole output layer once it is this long (and at the reply's end), in one
# product: a rewrite then throws away at most this many tokens' passes
CHECK_ROWS = 32
WHOLE_LAYER_AFTER = 4  # rewrites of one reply after which it is written on with the whole output layer
_Layer = tuple[Any, Any, Any]  # a cut output layer: its token ids, weights and biases (`DraftedReader._cut`)


def guess_of(seen: list[int], ngram: int = NGRAM, draft: int = DRAFT_TOKENS) -> list[int]:
    """Prompt lookup's guess: the `draft` tokens that followed the latest earlier occurrence of the last `ngram`
    tokens of `seen`, the longest n-gram that matches first (as transformers looks); none when none matches."""
    for size in range(ngram, 0, -1):
        tail = seen[-size:]
        for start in range(len(seen) - size - 1, -1, -1):  # the latest earlier occurrence
            if seen[start : start + size] == tail:
                return seen[start + size : start + size + draft]
    return []


def format_tokens(tokenizer: PreTrainedTokenizerBase) -> set[int]:
    """The tokens of the judge format itself (`contract.render_judge`: every error number, severity and score,
    the field names, "No Error"), as they tokenise inside a rendered reply."""
    errors = [ErrorAnnotation(location=None, explanation="x", severity=1 + n % 5) for n in range(MAX_ERRORS)]
    replies = [render_judge(Evaluation(errors=errors, score=score)) for score in range(101)]
    replies.append(render_judge(Evaluation(errors=[], score=100)))
    return {i for reply in replies for i in tokenizer(reply, add_special_tokens=False)["input_ids"]}


class DraftedReader(ProbabilityReader):
    """The transformers engine's probability reader that also writes greedy replies (`write`, the module
    docstring), leaving each one's cache to the reading that follows it."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        end_ids: Collection[int],
        *,
        stop_at: Callable[[str], int | None] | None = None,
        **options: Any,
    ) -> None:
        super().__init__(model, tokenizer, end_ids, reuse_prefix=True, **options)
        # where a reply's text is cut for the score line (`contract.first_repeat`: at the first error block it
        # writes again); None: replies are written whole
        self.stop_at = stop_at
        self._weight = self._output_layer.weight
        self._bias = getattr(self._output_layer, "bias", None)
        # the cut layer's tokens beyond each prompt's own: the format, the ends, and what this judge wrote before
        self._known = format_tokens(tokenizer) | set(self.end_ids)
        self._history: deque[list[int]] = deque(maxlen=HISTORY)  # the last replies, looked up too
        # forward passes, guessed tokens kept and rewrites so far
        self.passes = self.guessed = self.rewrites = 0

    def write(self, prompt_ids: Sequence[int], max_tokens: int) -> list[int]:
        """The greedy reply to `prompt_ids` (ending with an end-of-turn token, or `max_tokens` long)."""
        torch = self._torch
        prompt = list(prompt_ids)
        with torch.inference_mode():
            read, past = self._held_prefix(prompt, len(prompt) - 1)
            cache = self._recording_cache() if past is None else past
            for begin, end in prefill_chunks(read, len(prompt), self.model.device):
                state = self._states(prompt[begin:end], cache)
            hidden = {len(prompt) - 1: state[-1]}
            vocabulary = self._known | set(prompt)
            layer: _Layer | None = self._cut(vocabulary)
            reply = self._predicted(state[-1:], layer)
            checked, rewritten = 0, 0  # reply tokens whose whole row agreed; rewrites of this reply
            looked = 0 if self.stop_at is not None else None  # checked tokens `stop_at` has read; None: no more
            while True:
                ended = reply[-1] in self.end_ids or len(reply) >= max_tokens
                done = ended and checked == len(reply)
                if looked is not None and checked > looked and (done or checked - looked >= CHECK_ROWS):
                    looked = checked
                    if (stop := self._stop(reply[:checked], max_tokens)) is not None:
                        checked, looked = self._force(prompt, reply, cache, hidden, *stop), None  # cut once
                        continue
                if done:
                    break
                if not ended and len(reply) - checked < CHECK_ROWS:
                    self._extend(prompt, reply, cache, hidden, layer, max_tokens)
                    checked = len(reply) if layer is None else checked  # the whole layer's tokens need no check
                    continue
                bad = self._first_disagreement(prompt, reply, hidden, checked)
                if bad is None:
                    checked = len(reply)
                    continue
                at, token = bad
                self.rewrites += 1
                rewritten += 1
                del reply[at:]
                for position in [p for p in hidden if p >= len(prompt) + at]:
                    del hidden[position]
                roll_back(cache, cache.get_seq_length() - len(prompt) - at)
                reply.append(token)
                checked = at + 1
                vocabulary.add(token)
                # a reply that keeps leaving the vocabulary is written on with the whole layer: never worse than
                # plain greedy decoding by more than these rewrites
                layer = None if rewritten >= WHOLE_LAYER_AFTER else self._cut(vocabulary)
            self._known.update(reply)
            self._history.append(reply)
            self.hold([*prompt, *reply[:-1]], cache, hidden)
        return reply

    def _stop(self, reply: list[int], max_tokens: int) -> tuple[int, list[int]] | None:
        """Where a checked reply is cut (`stop_at`: before the first error block it writes again), and the tokens
        written for the judge there: what `stop_at` cuts gives way to the score line's field (`Overall score:`),
        whose value the judge then writes. None: nothing to cut, or no room left for the field and a score."""
        assert self.stop_at is not None
        text = self.tokenizer.decode(reply, skip_special_tokens=True)
        at = self.stop_at(text)
        if at is None:
            return None
        keep, prefix = len(reply), text  # the longest run of reply tokens whose text lies before the repeated block
        while keep > 0 and not text[:at].startswith(prefix):
            keep -= 1
            prefix = self.tokenizer.decode(reply[:keep], skip_special_tokens=True)
        forced = self._ids(text[len(prefix) : at] + SCORE_FIELD.rstrip())
        return (keep, forced) if keep > 0 and keep + len(forced) + 4 <= max_tokens else None

    def _force(
        self, prompt: list[int], reply: list[int], cache: Any, hidden: dict[int, Any], keep: int, forced: list[int]
    ) -> int:
        """The reply cut to its first `keep` tokens and `forced` written after them in one pass, then the model's
        own next token over the whole output layer; the cache and states follow. Returns the reply's length: every
        token in it is checked (the forced ones are the judge's, not the model's)."""
        del reply[keep:]
        start = len(prompt) + keep - 1  # the position of the last kept token, the first the pass feeds
        for position in [p for p in hidden if p >= start]:
            del hidden[position]
        roll_back(cache, cache.get_seq_length() - start)
        states = self._states([reply[-1], *forced], cache)
        for offset, state in enumerate(states):
            hidden[start + offset] = state
        reply.extend(forced)
        reply.append(self._predicted(states[-1:], None)[0])
        return len(reply)

    def _states(self, ids: list[int], cache: Any) -> torch.Tensor:
        """The decoder's final hidden states (after its last norm) for `ids`, read after `cache` into it."""
        self.passes += 1
        device = self.model.device
        output = self._decoder(
            input_ids=self._torch.tensor([ids], device=device), use_cache=True, **{self._cache_argument: cache}
        )
        return output.last_hidden_state[0]

    def _cut(self, vocabulary: set[int]) -> _Layer:
        """The output layer cut to the rows of `vocabulary`: (their token ids, their weights, their biases)."""
        rows = self._torch.tensor(sorted(vocabulary), device=self.model.device)
        return rows, self._weight[rows].contiguous(), None if self._bias is None else self._bias[rows]

    def _predicted(self, states: torch.Tensor, layer: _Layer | None) -> list[int]:
        """The greedy token after each of `states`, over the cut layer's tokens (`_cut`), or all when None."""
        linear = self._torch.nn.functional.linear
        if layer is None:
            return [int(t) for t in linear(states, self._weight, self._bias).argmax(-1).tolist()]
        rows, weight, bias = layer
        return [int(t) for t in rows[linear(states, weight, bias).argmax(-1)].tolist()]

    def _extend(
        self, prompt: list[int], reply: list[int], cache: Any, hidden: dict[int, Any], layer: _Layer | None,
        max_tokens: int,
    ) -> None:  # fmt: skip
        """One checking pass: the last written token and a guess fed after `cache`; the guess's agreeing prefix and
        the model's next token appended to `reply` (never past `max_tokens`), the rest of the guess cut from the
        cache."""
        seen = [*(token for earlier in self._history for token in earlier), *prompt, *reply]
        guess = guess_of(seen)[: max_tokens - len(reply) - 1]
        cut = next((i for i, token in enumerate(guess) if token in self.end_ids), len(guess))
        guess = guess[:cut]  # an end of turn is the model's own token, never a guess's
        start = len(prompt) + len(reply) - 1  # the position of the last written token
        states = self._states([reply[-1], *guess], cache)
        predicted = self._predicted(states, layer)
        agreed = 0
        while agreed < len(guess) and predicted[agreed] == guess[agreed]:
            agreed += 1
        for offset in range(agreed + 1):
            hidden[start + offset] = states[offset]
        if agreed < len(guess):
            roll_back(cache, len(guess) - agreed)  # the disagreeing guessed tokens leave the cache
        reply.extend(guess[:agreed])
        reply.append(predicted[agreed])
        self.guessed += agreed

    def _first_disagreement(
        self, prompt: list[int], reply: list[int], hidden: dict[int, Any], checked: int
    ) -> tuple[int, int] | None:
        """The first reply token from `checked` on that is not the argmax of its whole output row, and that
        argmax; None when every one is."""
        torch = self._torch
        for begin in range(checked, len(reply), 2 * CHECK_ROWS):
            end = min(len(reply), begin + 2 * CHECK_ROWS)
            states = torch.stack([hidden[len(prompt) + j - 1] for j in range(begin, end)])
            logits = torch.nn.functional.linear(states, self._weight, self._bias)
            written = torch.tensor(reply[begin:end], device=logits.device)
            top = logits.max(-1)
            kept = logits.gather(1, written[:, None])[:, 0] >= top.values  # a tie keeps the written token
            if not bool(kept.all()):
                j = int((~kept).nonzero()[0, 0])
                return begin + j, int(top.indices[j])
        return None
