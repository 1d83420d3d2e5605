"""The transformers engine's probability reader (`ProbabilityReader`): the judge's probabilities along a written
reply, the choices' alternatives read after the prompt's KV cache, and how a CPU reads a long prompt in pieces
(`prefill_chunks`). See `inference.probabilities` for what is read.

Where the model's attention takes a mask of our own (sdpa or eager attention), the alternatives are read in one row
after a cache (`_tree_rows`): a mask lets each token see the prompt and reply up to where its choice parts, and
the tokens of its own run before it, at the positions it would have alone. Without a sliding window (Llama, Qwen,
SmolLM2) every choice reads after the one cache; with one (Gemma 3, whose local layers keep only the window before
their end, and which takes a mask per layer kind) each choice reads after a copy cut back to where it parts.
Otherwise (flash attention; a model whose every layer slides) each pass copies the cache once per alternative
(`_batched_rows`): on a CPU that copying is what a reading cost, its attention repeating every copy's keys to the
query heads (bench/results/tree_reading.md, tree_reading_base.md)."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

from ..chat import shared_length
from ..probabilities import ChoiceReader, alternative_runs

if TYPE_CHECKING:
    import torch
    from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase


# a CPU reads a long prompt in pieces of this many tokens: its attention kernel masks a whole prompt's
# tokens x tokens scores (Gemma 3's local layers too, whose window is 512), so a 3,800-token owid prompt took
# 19.0 s at once and 11.2 s in pieces of 512 (Gemma 3 270M, one thread), the logits equal within 3e-5. A GPU's
# kernels skip what the mask hides: there a prompt is read whole.
CPU_PREFILL_CHUNK = 512


def prefill_chunks(begin: int, end: int, device: Any) -> list[tuple[int, int]]:
    """The pieces [a, b) in which tokens begin..end are read on `device` (a torch device): CPU_PREFILL_CHUNK tokens
    each on a CPU, all at once elsewhere."""
    if getattr(device, "type", "cpu") != "cpu":
        return [(begin, end)]
    return [(a, min(end, a + CPU_PREFILL_CHUNK)) for a in range(begin, end, CPU_PREFILL_CHUNK)]


# alternatives per forward pass at most: 101 score values x Gemma's 262k vocabulary stay small
_BATCH = 16

# the attention implementations whose mask can be ours (a 4D mask, passed through as it is): the tree reading's
TREE_ATTENTION = ("sdpa", "eager")

# tokens of alternatives per pass of the tree reading at most: its mask is tokens x (cache + tokens), and its
# output rows (Gemma's 262k words) are made per pass
TREE_TOKENS = 256

Part = tuple[int, list[list[int]], bool]  # where a choice parts (its first tail token's position), its tails, end
Rows = dict[tuple[int, ...], Any]  # a tail prefix -> the log-softmax row after it
Run = tuple[int, tuple[int, ...], list[int]]  # where its choice parts, the run's tokens, the prefix lengths read


def _tree_passes(runs: list[Run]) -> list[list[Run]]:
    """The runs, whole, in passes of at most TREE_TOKENS tokens (a longer run alone)."""
    passes: list[list[Run]] = []
    size = TREE_TOKENS
    for run in runs:
        if size + len(run[1]) > TREE_TOKENS:
            passes.append([])
            size = 0
        passes[-1].append(run)
        size += len(run[1])
    return passes


# the prompt's KV cache is copied once per alternative in a pass: an 8B model's 4k-token prompt
# holds 0.5 GB of it, so a pass takes as many alternatives as fit this (at least one); on a CUDA
# device a quarter of its free memory when more (an 80 GB card then takes 16 such copies a pass:
# bench/results/gpu_probabilities.md)
CACHE_BUDGET_BYTES = 2 * 1024**3


def cache_budget(device: torch.device) -> int:
    """The memory the copies of a prompt's cache may take in one pass on `device` (a torch device):
    `CACHE_BUDGET_BYTES`, or on a CUDA device a quarter of its free memory when that is more."""
    if getattr(device, "type", None) != "cuda":
        return CACHE_BUDGET_BYTES
    import torch

    free, _ = torch.cuda.mem_get_info(device)
    return max(CACHE_BUDGET_BYTES, int(free) // 4)


def alternatives_per_pass(row_bytes: float, budget_bytes: int) -> int:
    """How many alternatives one forward pass takes: each copies a prompt cache of `row_bytes`."""
    return max(1, min(_BATCH, int(budget_bytes // max(1.0, row_bytes))))


def sliding_window(model: Any) -> int | None:
    """The window of the model's sliding-window attention layers (Gemma 3's local layers: 512), or None when it
    has none."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    window = getattr(config, "sliding_window", None)
    layer_types = getattr(config, "layer_types", None)
    if not window or (layer_types is not None and "sliding_attention" not in layer_types):
        return None
    return int(window)


def _local_length(cache: object, held: int, window: int) -> int:
    """How many tokens a sliding-window layer of `cache` (of `held` tokens) holds: transformers 5 keeps the
    window − 1 before its end once the cache is that long."""
    for layer in getattr(cache, "layers", ()):
        if getattr(layer, "sliding_window", None) and getattr(layer, "keys", None) is not None:
            return int(layer.keys.shape[-2])
    return min(held, window - 1)


def _cache_bytes(cache: object) -> int:
    """The memory a KV cache's tensors hold (transformers 5's layered caches and 4.x's lists)."""
    layers = getattr(cache, "layers", None)
    if layers is not None:
        tensors = [t for layer in layers for t in (getattr(layer, "keys", None), getattr(layer, "values", None))]
    else:
        tensors = [*getattr(cache, "key_cache", []), *getattr(cache, "value_cache", [])]
    return sum(t.numel() * t.element_size() for t in tensors if t is not None and hasattr(t, "numel"))


class ProbabilityReader(ChoiceReader):
    """Reads `ReplyProbabilities` from a causal LM (transformers or PEFT) and its tokenizer.

    `end_ids`: the tokens that end the judge's turn (eos, Gemma's `<end_of_turn>`).
    `cache_budget_bytes`: how much memory the copies of the prompt's KV cache may take in one
    forward pass over alternatives (fewer alternatives a pass on a long prompt; same results); by
    default `cache_budget` of the model's device.
    `reuse_prefix`: keep the last reading's KV cache, so the next prompt reads only the tokens it does
    not share with the last one (the judge reads the outputs of one input one after another).
    `tree`: read the alternatives in one masked row (`_tree_rows`); by default wherever the model's attention
    takes such a mask, and never where it does not. False: as a batch of cache copies (`_batched_rows`)."""

    def __init__(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        end_ids: Collection[int],
        max_errors: int = 8,
        cache_budget_bytes: int | None = None,
        reuse_prefix: bool = False,
        tree: bool | None = None,
    ) -> None:
        import torch

        super().__init__(tokenizer, end_ids, max_errors)
        self.model = model
        self.cache_budget_bytes = cache_budget_bytes
        self._torch = torch
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        # alternatives run through the decoder alone and the output layer on the rows read (PEFT's layers are
        # inside the decoder: the base model's modules are the adapted ones)
        self._decoder, self._output_layer = base.get_decoder(), base.get_output_embeddings()
        self._text_config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
        # transformers 5 names the cache argument `cache`; 4.x `past_key_values`
        self._cache_argument = "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"
        self.reuse_prefix = reuse_prefix
        self._window = sliding_window(model)
        attention = getattr(self._text_config, "_attn_implementation", None)
        # a sliding window is masked per layer kind (Gemma 2 and 3 take a mask per kind); a model whose every layer
        # slides (Mistral) reads batched
        kinds = set(getattr(self._text_config, "layer_types", None) or ())
        masked = self._window is None or (bool(kinds) and kinds <= {"full_attention", "sliding_attention"})
        self._tree = tree is not False and attention in TREE_ATTENTION and masked
        # the last reading's (or drafted writing's) tokens and its KV cache; and the final hidden states the writing
        # computed, by position (`hold`)
        self._held: tuple[list[int], Any] | None = None
        self._hidden: dict[int, Any] = {}

    def hold(self, tokens: list[int], cache: Any, hidden: dict[int, Any]) -> None:
        """Keep a KV cache of `tokens` (written by this model just now: `transformers_drafted`) for the next
        reading, with the final hidden states at its positions (`hidden`): a reading of a reply that shares them
        reads its choices' first rows from those states, and runs the model only past them."""
        self._held, self._hidden = (tokens, cache), hidden

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
            # a held prefix reaches into the reply only where its rows can be read from held hidden states
            limit = min([len(written), *(k for k in keep if k not in self._hidden)])
            read, past = self._held_prefix(written, max(limit, len(prompt_ids) - 1))
            cache = self._recording_cache() if past is None else past
            first: dict[int, Any] = {}
            held = [k for k in keep if k < read]
            if held:  # rows whose hidden states the writing kept (`hold`)
                states = self._torch.stack([self._hidden[k] for k in held])
                first.update(zip(held, self._output_rows(states), strict=True))
            self._hidden = {}
            for begin, end in prefill_chunks(read, len(written), self.model.device):
                wanted = [k for k in keep if begin <= k < end]
                output = self.model(
                    input_ids=self._torch.tensor([written[begin:end]], device=self.model.device),
                    use_cache=True,
                    logits_to_keep=self._torch.tensor(
                        [k - begin for k in wanted or [end - 1]], device=self.model.device
                    ),
                    **{self._cache_argument: cache},
                )
                cache = output["cache"] if "cache" in output else output["past_key_values"]  # transformers 5, 4.x
                if wanted:  # else the one row computed is nobody's
                    first.update(zip(wanted, output.logits[0].float().log_softmax(-1), strict=True))
            if self.reuse_prefix:
                self._held = (written, cache)  # the alternatives below read it, or copies of it
            parts = [(len(prompt_ids) + start, tails, end) for (start, tails), end in zip(branches, ends, strict=True)]
            rows = (self._tree_rows if self._tree else self._batched_rows)(parts, first, cache)
            return [self._totals(rows[at], tails, end) for at, tails, end in parts]

    def _recording_cache(self) -> DynamicCache:
        """An empty KV cache that can be cut back to an earlier position: each choice's alternatives, and a
        reused prefix, read from the cache cut back to where they start. A sliding-window layer (Gemma 3's local
        attention) that does not record its past keeps only its window, so once the sequence is longer than the
        window it cannot be cut back at all (transformers 5; 4.x caches keep every state)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        if hasattr(cache, "activate_past_recording"):
            cache.activate_past_recording()
        return cache

    def _held_prefix(self, written: list[int], limit: int) -> tuple[int, Any]:
        """How many leading tokens of `written` the last reading's cache holds (at most `limit`: the prompt's
        but its last token, whose row is computed fresh, unless held hidden states give the rows), and that
        cache cut back to them (taken: it is this reading's now); (0, None) when nothing is shared, reuse is off,
        or the cache does not hold what the cut needs."""
        if self._held is None:
            return 0, None
        held, cache = self._held
        read = min(shared_length(held, written), limit)
        if read <= 0:
            return 0, None
        self._held = None
        try:
            roll_back(cache, cache.get_seq_length() - read)
        except ValueError:  # a cache that cannot be cut back: read the prompt whole
            return 0, None
        return read, cache

    def _tree_rows(self, parts: list[Part], first: dict[int, Any], cache: DynamicCache) -> dict[int, Rows]:
        """The rows the alternatives read (`alternative_runs`), read in one row after a cache, TREE_TOKENS tokens
        a pass: each token sees the cache up to where its choice parts (`at`) and the tokens of its own run before
        it, at the positions it would have alone. Every choice reads after `cache` itself (the prompt and the
        written reply), each pass's tokens cut from it after the pass; with a sliding window (Gemma 3's local
        layers keep only the window before their end), each choice reads after a copy cut back to where it parts."""
        rows: dict[int, Rows] = {at: {(): first[at - 1]} for at, _, _ in parts}
        runs = [(at, run, lengths) for at, tails, end in parts for run, lengths in alternative_runs(tails, end)]
        states: list[tuple[int, tuple[int, ...], Any]] = []  # (where the choice parts, the prefix, its state)
        if self._window is None:
            states += self._read_runs(cache, runs)
        else:
            for at in dict.fromkeys(at for at, _, _ in runs):
                branch = copy.deepcopy(cache)
                branch.crop(at - branch.get_seq_length())  # negative: the tokens to drop (transformers 4.56 and 5)
                states += self._read_runs(branch, [run for run in runs if run[0] == at])
        # the output layer in products of TREE_TOKENS rows, not one per pass: on a 2-core CPU Gemma's 262k-word layer
        # made 12 dev outputs' 1,780 rows in 7.3 s in 98 products, in 3.7 s in 24 (bench/results/judging_profile.md)
        for begin in range(0, len(states), TREE_TOKENS):
            chunk = states[begin : begin + TREE_TOKENS]
            read = self._output_rows(self._torch.stack([state for _, _, state in chunk]))
            for (at, prefix, _), row in zip(chunk, read, strict=True):
                rows[at][prefix] = row
        return rows

    def _read_runs(self, cache: DynamicCache, runs: list[Run]) -> list[tuple[int, tuple[int, ...], Any]]:
        """Read `runs` (each parting at its `at`, at most the cache's length) after `cache`: the final hidden state
        after each prefix a run reads, as (where its choice parts, the prefix, the state)."""
        torch = self._torch
        found: list[tuple[int, tuple[int, ...], Any]] = []
        held = cache.get_seq_length()
        local = None if self._window is None else _local_length(cache, held, self._window)
        for group in _tree_passes(runs):
            ids = [token for _, run, _ in group for token in run]
            positions: list[int] = []
            picks: list[tuple[int, tuple[int, ...], int]] = []  # where the choice parts, the prefix, its row here
            for at, run, lengths in group:
                picks += [(at, run[:length], len(positions) + length - 1) for length in lengths]
                positions += range(at, at + len(run))
            device = self.model.device
            hidden = self._decoder(
                input_ids=torch.tensor([ids], device=device),
                position_ids=torch.tensor([positions], device=device),
                attention_mask=self._tree_mask(group, held, local),
                use_cache=True,
                **{self._cache_argument: cache},
            ).last_hidden_state[0]
            cache.crop(held - cache.get_seq_length())  # negative: the tokens to drop (transformers 4.56 and 5)
            found += [(at, prefix, hidden[index]) for at, prefix, index in picks]
        return found

    def _tree_mask(self, group: list[Run], held: int, local: int | None) -> Any:
        """The attention mask of a pass of `group` after a cache of `held` tokens; with a sliding window, one per
        layer kind, a local layer's cache holding only its last `local` tokens."""
        full = self._visible(group, held, 0, None)
        if local is None:
            return full
        return {"full_attention": full, "sliding_attention": self._visible(group, held, held - local, self._window)}

    def _visible(self, group: list[Run], held: int, start: int, window: int | None) -> Any:
        """An additive mask whose rows are the group's tokens and whose columns are the cached positions
        start..held, then the group's tokens: a token at position p, of a choice parting at `at`, sees the cached
        positions before `at` (after p − window, as the model's own sliding mask has it) and its own run up to
        itself."""
        torch = self._torch
        dtype = self._decoder.dtype
        cached, width = held - start, sum(len(run) for _, run, _ in group)
        mask = torch.full((width, cached + width), torch.finfo(dtype).min, dtype=dtype)
        offset = 0
        for at, run, _ in group:
            n = len(run)
            for j in range(n):
                seen_from = start if window is None else max(start, at + j - window + 1)
                mask[offset + j, seen_from - start : at - start] = 0.0
            own = torch.ones(n, n, dtype=torch.bool).tril()
            mask[offset : offset + n, cached + offset : cached + offset + n].masked_fill_(own, 0.0)
            offset += n
        return mask.to(self.model.device)[None, None]

    def _batched_rows(self, parts: list[Part], first: dict[int, Any], cache: DynamicCache) -> dict[int, Rows]:
        """The rows the alternatives read (`alternative_runs`), each choice's runs as rows of a batch from a copy
        of `cache` cut back to where the choice parts: for models whose attention takes no mask of ours.

        Only the rows something reads are computed, as llama.cpp's reader does: tails that begin alike (`8` of
        `87` and `85`) run as one, a tail's last token runs only where the choice ends the reply, and the output
        layer (Gemma's 262k words) makes just the rows read: the 101 score values cost ~100 rows instead of one
        per value and token."""
        torch = self._torch
        found: dict[int, Rows] = {}
        for at, tails, end in parts:  # the first tail token is predicted by the row before it
            rows: Rows = {(): first[at - 1]}
            runs = alternative_runs(tails, end)
            budget = self.cache_budget_bytes or cache_budget(self.model.device)
            size = alternatives_per_pass(_cache_bytes(cache) * at / max(1, cache.get_seq_length()), budget)
            for begin in range(0, len(runs), size):
                group = runs[begin : begin + size]
                width = max(len(run) for run, _ in group)
                # right padding: a causal model's rows before it do not see it
                padded = [[*run, *[run[0]] * (width - len(run))] for run, _ in group]
                ids = torch.tensor(padded, device=self.model.device)
                branch = copy.deepcopy(cache)
                branch.crop(at - branch.get_seq_length())  # negative: the tokens to drop (transformers 4.56 and 5)
                branch.batch_repeat_interleave(len(group))
                hidden = self._decoder(
                    input_ids=ids, use_cache=True, **{self._cache_argument: branch}
                ).last_hidden_state
                read = [(index, length) for index, (_, lengths) in enumerate(group) for length in lengths]
                picked = hidden[[index for index, _ in read], [length - 1 for _, length in read]]
                for (index, length), row in zip(read, self._output_rows(picked), strict=True):
                    rows[group[index][0][:length]] = row
            found[at] = rows
        return found

    def _totals(self, rows: Rows, tails: list[list[int]], end: bool) -> list[float]:
        """log P(tail | prompt + reply[:start]) for each tail (and, with `end`, of the turn's end after it)."""
        totals = []
        for tail in tails:
            total = sum(float(rows[tuple(tail[:j])][tail[j]]) for j in range(len(tail)))
            if end:
                total += float(self._torch.logsumexp(rows[tuple(tail)][self.end_ids], dim=0))
            totals.append(total)
        return totals

    def _output_rows(self, hidden: torch.Tensor) -> torch.Tensor:
        """The log-softmax rows of the model's output layer at these final hidden states, as its forward makes
        its logits (with Gemma's final soft-capping where the config has one)."""
        logits = self._output_layer(hidden).float()
        cap = getattr(self._text_config, "final_logit_softcapping", None)
        if cap:
            logits = self._torch.tanh(logits / cap) * cap
        return logits.log_softmax(-1)


def roll_back(cache: Any, tokens: int) -> None:
    """Drop the last `tokens` positions of a recording KV cache (`ProbabilityReader._recording_cache`).
    transformers' own `crop` leaves a sliding-window layer (Gemma 3's local attention) with only the window before
    the new end, so a later cut further back would find nothing; here such a layer keeps every state it recorded
    (its attention reads only the window), and can be cut back anywhere. ValueError when a layer no longer holds
    the window the new end needs."""
    if tokens <= 0:
        return
    layers = getattr(cache, "layers", None)
    if layers is None:  # transformers 4.x: every layer keeps every state
        cache.crop(-tokens)
        return
    for layer in layers:
        if getattr(layer, "is_sliding", False):
            kept = layer.keys.shape[-2] - tokens
            if not getattr(layer, "record_past", False) or kept < min(
                layer.sliding_window - 1, layer.cumulative_length - tokens
            ):
                raise ValueError("the cache's sliding-window layer no longer holds the window before the cut")
            layer.keys, layer.values = layer.keys[:, :, :-tokens], layer.values[:, :, :-tokens]
            layer.cumulative_length -= tokens
        else:
            layer.crop(-tokens)
