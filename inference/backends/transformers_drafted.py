"""Drafted greedy decoding for the transformers engine (`decoding: drafted`): the judge's greedy reply, written
with fewer and cheaper forward passes, then read for probabilities from the same KV cache.

A judge's reply quotes the output it judges in a fixed format that its prompt spells out, and on a CPU a small
model's step is dominated by its output layer (Gemma 3's 262,144 words: 25 of 56 ms a step at batch 1 on a 2-core
Xeon, bench/results/cut_output_layer.md). So, for each reply:

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
  next prompt reads only what it does not share with this one (the outputs of one input one after another);
- **rows** (`write_all`): where the model takes attention masks of ours, the replies of several prompts (the
  engine's `batch_size`: the outputs of one input) are written together, every pass checking each unfinished
  reply's guess as a row of one batch (`row_cache.RowCache`), and a reply's guesses look up the others' too. On a
  2-core CPU a pass over a few tokens costs about what reading the weights costs, which the rows share.

Only greedy requests without stop strings or a grammar are drafted; the others take the batched path. With
`stop_at_repeat` (`stop_at=contract.first_repeat`), a reply that writes an error block again word for word (a
small judge's greedy loop) is cut before that block once its tokens are checked, `Overall score:` is fed for the
judge in the next pass, and the judge writes its score from there (`_stop`, `_next_feed`): its errors end where
the loop began.

Measured (bench/results/drafted_judging.md, 2-core Xeon): a Gemma 3 student's protocol judging of 120 dev outputs,
the same replies as the batched engine's (fixed for Gemma 3's padding), 4.69 s an output against 7.88 (1.68x); on a
2-core AMD EPYC, another student's with the stop, four replies together against one at a time, the same 120
replies, 6.64 s an output against 8.53 (1.28x).
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from ..chat import shared_length
from ..contract import MAX_ERRORS, ErrorAnnotation, Evaluation
from ..contract.render import SCORE_FIELD, render_judge
from .row_cache import RowCache
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


@dataclass
class _Reply:
    """One reply as drafted decoding writes it: its tokens, how far the whole output layer has checked them, the final
    hidden states by position, and what its next pass feeds (a guess, or the tokens `_stop` writes for the judge)."""

    prompt: list[int]
    max_tokens: int
    vocabulary: set[int]
    layer: _Layer | None
    reply: list[int]
    hidden: dict[int, Any]
    looked: int | None  # checked tokens `stop_at` has read; None: no more
    checked: int = 0  # reply tokens whose whole row agreed
    rewritten: int = 0
    guess: list[int] = field(default_factory=list)
    forced: list[int] | None = None

    @property
    def fed(self) -> int:
        """The tokens its cache holds (the prompt, and the reply but its last token): its last token's position."""
        return len(self.prompt) + len(self.reply) - 1


class DraftedReader(ProbabilityReader):
    """The transformers engine's probability reader that also writes greedy replies (`write`, `write_all`; the
    module docstring), leaving each one's cache to the reading that follows it."""

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
        # the replies written last and not read yet: (their tokens, cache and final hidden states), for `hold`
        self._written: list[tuple[list[int], Any, dict[int, Any]]] = []
        kinds = getattr(self._text_config, "layer_types", None)
        self._kinds = list(kinds or ["full_attention"] * self._text_config.num_hidden_layers)
        # forward passes, guessed tokens kept and rewrites so far
        self.passes = self.guessed = self.rewrites = 0

    @property
    def writes_together(self) -> bool:
        """Whether `write_all` writes several replies in one batch (the model's attention takes our masks)."""
        return self._tree

    def write(self, prompt_ids: Sequence[int], max_tokens: int) -> list[int]:
        """The greedy reply to `prompt_ids` (ending with an end-of-turn token, or `max_tokens` long)."""
        return self.write_all([prompt_ids], max_tokens)[0]

    def write_all(self, prompts: Sequence[Sequence[int]], max_tokens: int) -> list[list[int]]:
        """The greedy replies to `prompts`, each as `write` writes it alone, up to the sums' rounding: where the
        model takes our masks, every pass checks each unfinished reply's guess as a row of one batch (`RowCache`),
        and a reply's guesses look up the others' replies too (the outputs of one input are judged alike)."""
        if len(prompts) > 1 and not self.writes_together:
            return [reply for prompt in prompts for reply in self.write_all([prompt], max_tokens)]
        self._written = []  # replies written before and not read are not read now
        with self._torch.inference_mode():
            begun: list[tuple[_Reply, Any]] = []
            for prompt in prompts:
                begun.append(self._begin(list(prompt), max_tokens, *(begun[-1] if begun else (None, None))))
            replies = [reply for reply, _ in begun]
            if len(begun) == 1:
                reply, cache = begun[0]
                while (feed := self._next_feed(reply, partial(roll_back, cache), [])) is not None:
                    roll_back(cache, self._take(reply, self._states(feed, cache)))
                caches = [cache]
            else:
                caches = self._write_rows(replies, [cache for _, cache in begun])
        for reply, cache in zip(replies, caches, strict=True):
            self._known.update(reply.reply)
            self._history.append(reply.reply)
            self._written.append(([*reply.prompt, *reply.reply[:-1]], cache, reply.hidden))
        return [reply.reply for reply in replies]

    def _begin(self, prompt: list[int], max_tokens: int, previous: _Reply | None, cache: Any) -> tuple[_Reply, Any]:
        """A reply to `prompt` begun: the prompt read after what it shares with the `previous` prompt of the same
        call (whose `cache` stays its own), or else with the last reading, and the first token chosen; and its
        cache."""
        if previous is not None:
            self.hold(previous.prompt, copy.deepcopy(cache), {})
        read, past = self._held_prefix(prompt, len(prompt) - 1)
        cache = self._recording_cache() if past is None else past
        for begin, end in prefill_chunks(read, len(prompt), self.model.device):
            state = self._states(prompt[begin:end], cache)
        vocabulary = self._known | set(prompt)
        layer = self._cut(vocabulary)
        reply = _Reply(
            prompt, max_tokens, vocabulary, layer, self._predicted(state[-1:], layer), {len(prompt) - 1: state[-1]},
            looked=0 if self.stop_at is not None else None,
        )  # fmt: skip
        return reply, cache

    def _write_rows(self, replies: list[_Reply], prompt_caches: list[Any]) -> list[Any]:
        """Write `replies` (begun, after `prompt_caches`) together, one batch row each (`RowCache`); returns each
        one's cache, made its own again when it ends."""
        rows = RowCache.of(prompt_caches, [reply.fed for reply in replies], self._kinds, self._window)
        caches: list[Any] = [None] * len(replies)
        texts = [reply.reply for reply in replies]
        while rows.ids:
            feeds: dict[int, list[int]] = {}
            for row in rows.ids:
                others = [text for other, text in enumerate(texts) if other != row]
                if (feed := self._next_feed(replies[row], partial(rows.forget, row), others)) is None:
                    caches[row] = rows.row(row, self._recording_cache(), replies[row].fed)
                else:
                    feeds[row] = feed
            rows.keep(list(feeds))
            if not feeds:
                break
            states = self._row_states(rows, feeds, [replies[row].fed for row in feeds])
            for index, (row, feed) in enumerate(feeds.items()):
                rows.forget(row, self._take(replies[row], states[index, : len(feed)]))
        return caches

    def _row_states(self, rows: RowCache, feeds: dict[int, list[int]], starts: list[int]) -> torch.Tensor:
        """The final hidden states of one pass over `rows` (their ids in order), each row fed its `feeds` from
        position `starts`, padded to the longest: rows x tokens x hidden."""
        torch = self._torch
        width = max(len(feed) for feed in feeds.values())
        ids = torch.zeros(len(feeds), width, dtype=torch.long)
        real = torch.zeros(len(feeds), width, dtype=torch.bool)
        for index, feed in enumerate(feeds.values()):
            ids[index, : len(feed)] = torch.tensor(feed)
            real[index, : len(feed)] = True
        positions = torch.tensor(starts)[:, None] + torch.arange(width)[None]
        device = self.model.device
        self.passes += 1
        return self._decoder(
            input_ids=ids.to(device),
            position_ids=positions.to(device),
            attention_mask=rows.feed(positions, real, self._decoder.dtype, device),
            use_cache=True,
            **{self._cache_argument: rows.cache},
        ).last_hidden_state

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        """As the reader's, after the written reply that shares the most with this one (`write_all`) is held."""
        if self._written:
            written = [*prompt_ids, *reply]
            best = max(range(len(self._written)), key=lambda i: shared_length(self._written[i][0], written))
            self.hold(*self._written.pop(best))
        return super()._choice_log_probs(prompt_ids, reply, branches, ends)

    def _next_feed(self, reply: _Reply, cut: Callable[[int], None], others: list[list[int]]) -> list[int] | None:
        """What `reply`'s next pass feeds (its last token, then a guess or the judge's forced tokens), after what
        needs no pass: the whole output layer's check, a rewrite where it disagrees, a cut where `stop_at` finds a
        repeat (`cut`: drop that many tokens from the end of its cache). None: the reply is written and checked."""
        while True:
            ended = reply.reply[-1] in self.end_ids or len(reply.reply) >= reply.max_tokens
            done = ended and reply.checked == len(reply.reply)
            looked = reply.looked
            if looked is not None and reply.checked > looked and (done or reply.checked - looked >= CHECK_ROWS):
                reply.looked = reply.checked
                if (stop := self._stop(reply.reply[: reply.checked], reply.max_tokens)) is not None:
                    keep, reply.forced = stop
                    reply.looked = None  # cut once
                    self._truncate(reply, keep, cut)
                    return [reply.reply[-1], *reply.forced]
            if done:
                return None
            if not ended and len(reply.reply) - reply.checked < CHECK_ROWS:
                seen = [*(token for earlier in [*self._history, *others] for token in earlier), *reply.prompt]
                guess = guess_of([*seen, *reply.reply])[: reply.max_tokens - len(reply.reply) - 1]
                end = next((i for i, token in enumerate(guess) if token in self.end_ids), len(guess))
                reply.guess = guess[:end]  # an end of turn is the model's own token, never a guess's
                return [reply.reply[-1], *reply.guess]
            bad = self._first_disagreement(reply.prompt, reply.reply, reply.hidden, reply.checked)
            if bad is None:
                reply.checked = len(reply.reply)
                continue
            at, token = bad
            self.rewrites += 1
            reply.rewritten += 1
            self._truncate(reply, at + 1, cut)
            reply.reply[at] = token
            reply.checked = at + 1
            reply.vocabulary.add(token)
            # a reply that keeps leaving the vocabulary is written on with the whole layer: never worse than
            # plain greedy decoding by more than these rewrites
            reply.layer = None if reply.rewritten >= WHOLE_LAYER_AFTER else self._cut(reply.vocabulary)

    @staticmethod
    def _truncate(reply: _Reply, keep: int, cut: Callable[[int], None]) -> None:
        """`reply` cut to its first `keep` tokens, its cache and states with it (its cache holds all but the last)."""
        cut(len(reply.reply) - keep)
        del reply.reply[keep:]
        for position in [p for p in reply.hidden if p >= reply.fed]:
            del reply.hidden[position]

    def _take(self, reply: _Reply, states: torch.Tensor) -> int:
        """`reply` after the pass that fed what `_next_feed` gave, whose final hidden states are `states`: the guess's
        agreeing prefix and the model's next token appended (or the forced tokens and the model's next token over the
        whole output layer). Returns how many fed tokens its cache must drop again (the guess's disagreeing tail)."""
        start = reply.fed  # the position of the first token fed, the reply's last
        if reply.forced is not None:  # the forced tokens are the judge's, not the model's: all checked
            for offset, state in enumerate(states):
                reply.hidden[start + offset] = state
            reply.reply.extend(reply.forced)
            reply.reply.append(self._predicted(states[-1:], None)[0])
            reply.checked, reply.forced = len(reply.reply), None
            return 0
        guess = reply.guess
        predicted = self._predicted(states, reply.layer)
        agreed = 0
        while agreed < len(guess) and predicted[agreed] == guess[agreed]:
            agreed += 1
        for offset in range(agreed + 1):
            reply.hidden[start + offset] = states[offset]
        reply.reply.extend(guess[:agreed])
        reply.reply.append(predicted[agreed])
        self.guessed += agreed
        if reply.layer is None:  # the whole layer's tokens need no check
            reply.checked = len(reply.reply)
        return len(guess) - agreed

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
