"""Several replies' KV caches as the rows of one batch (`RowCache`), for drafted decoding's passes over the outputs of
one input together (`transformers_drafted`, `DraftedReader.write_all`).

On a 2-core CPU a decoder pass over a few tokens costs about what reading the weights costs, and the rows of a batch
share that read (bench/results/decoder_pass_cost.md: a Gemma 3 270M pass over 9 tokens after a 1,400-token cache,
61.3 ms alone, 32.6 ms a row in 4 rows). But each reply keeps what its own guesses got right, so the rows' caches
never stay the same length. Here no row is ever cut back: every pass appends as many columns to every row, and the
columns a row does not keep (a guess's rejected tail, a row's padding, a prompt shorter than the others') are holes
that an attention mask of ours hides, each column carrying its row's position for the rotary embedding and the
sliding window. The masks are the model's own causal and sliding-window masks, computed from the positions, so a
row reads what it would read alone, up to the sums' rounding (a batch of rows is multiplied in another order than
one row). Where the holes pile up, the rows are packed again (`_pack`).

A model takes such masks where its attention takes a mask of ours (sdpa or eager) and its layer kinds are full or
sliding-window attention (`transformers_reader.TREE_ATTENTION`): Llama-like models, Gemma 2 and 3."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# holes a layout may hold beyond its fullest row before it is packed: packing copies every layer's keys and values,
# a few passes' worth of time, while each hole costs every later pass its attention
SLACK = 192


class _Layout:
    """The columns shared by the layers of one kind (full or sliding-window attention): which hold a token of their
    row (`valid`, rows x columns) and at what position (`positions`), and the window of a sliding kind."""

    def __init__(self, valid: torch.Tensor, positions: torch.Tensor, window: int | None) -> None:
        self.valid, self.positions, self.window = valid, positions, window

    def mask(self, torch: Any, positions: torch.Tensor, real: torch.Tensor, dtype: Any) -> torch.Tensor:
        """The additive mask of a pass feeding `positions` (rows x tokens; `real`: not padding): a fed token sees its
        row's kept columns before it (within the window) and the real tokens fed before it; padding sees itself."""
        rows, fed = positions.shape
        seen = self.valid[:, None, :].expand(rows, fed, -1)
        if self.window is not None:
            seen = seen & (self.positions[:, None, :] > positions[:, :, None] - self.window)
        device = positions.device
        causal = torch.ones(fed, fed, dtype=torch.bool, device=device).tril()
        itself = torch.eye(fed, dtype=torch.bool, device=device)
        own = (causal[None] & real[:, None, :] & real[:, :, None]) | itself[None]
        allowed = torch.cat([seen, own], dim=-1)
        mask = torch.zeros(allowed.shape, dtype=dtype, device=device)
        return mask.masked_fill_(~allowed, torch.finfo(dtype).min)[:, None]

    def append(self, torch: Any, positions: torch.Tensor, real: torch.Tensor) -> None:
        self.valid = torch.cat([self.valid, real], dim=1)
        self.positions = torch.cat([self.positions, positions], dim=1)

    def forget(self, row: int, tokens: int) -> None:
        """Hide the last `tokens` kept columns of `row`."""
        if tokens > 0:
            kept = self.valid[row].nonzero()[:, 0]
            self.valid[row, kept[-tokens:]] = False


def _layer(keys: torch.Tensor, values: torch.Tensor) -> Any:
    """A cache layer holding `keys` and `values` (every row's), to which the model's passes append."""
    from transformers.cache_utils import DynamicLayer

    layer = DynamicLayer()
    layer.lazy_initialization(keys, values)
    layer.keys, layer.values = keys, values
    return layer


class RowCache:
    """Rows of KV caches, one per reply, read in one batch (the module docstring). Made from each row's own cache
    after its prompt (`of`); `cache` is what the model's forward takes, `feed` masks a pass, `forget` cuts a row back,
    `keep` drops finished rows, `row` hands one row back as a cache of its own."""

    def __init__(self, cache: Any, layers: list[Any], kinds: list[str], layouts: dict[str, _Layout], ids: list[int]):
        self.cache, self._layers, self._kinds, self._layouts, self.ids = cache, layers, kinds, layouts, ids

    @classmethod
    def of(cls, caches: Sequence[Any], lengths: Sequence[int], kinds: Sequence[str], window: int | None) -> RowCache:
        """The rows of `caches` (one per reply, each after `lengths` tokens; a sliding-window layer may hold only
        its last window − 1), each row's columns ending where the longest row's do. `kinds`: each layer's
        ("full_attention" or "sliding_attention")."""
        import torch
        from transformers.cache_utils import Cache

        kinds = list(kinds)
        layers: list[Any] = []
        layouts: dict[str, _Layout] = {}
        for index, kind in enumerate(kinds):
            parts = [(c.layers[index].keys, c.layers[index].values) for c in caches]
            held = [keys.shape[-2] for keys, _ in parts]
            if kind == "sliding_attention" and window is not None:  # only the last window - 1 are ever read again
                held = [min(n, window - 1) for n in held]
            width = max(held)
            keys0 = parts[0][0]
            shape = (len(caches), keys0.shape[1], width, keys0.shape[-1])
            keys, values = keys0.new_zeros(shape), keys0.new_zeros(shape)
            for row, ((k, v), n) in enumerate(zip(parts, held, strict=True)):
                keys[row, :, width - n :] = k[0, :, k.shape[-2] - n :]
                values[row, :, width - n :] = v[0, :, v.shape[-2] - n :]
            layers.append(_layer(keys, values))
            if kind not in layouts:
                valid = torch.zeros(len(caches), width, dtype=torch.bool)
                positions = torch.zeros(len(caches), width, dtype=torch.long)
                for row, (n, length) in enumerate(zip(held, lengths, strict=True)):
                    valid[row, width - n :] = True
                    positions[row, width - n :] = torch.arange(length - n, length)
                layouts[kind] = _Layout(valid, positions, window if kind == "sliding_attention" else None)
        return cls(Cache(layers=layers), layers, kinds, layouts, list(range(len(caches))))

    def feed(self, positions: torch.Tensor, real: torch.Tensor, dtype: Any, device: Any) -> Any:
        """The attention mask(s) on `device` of a pass feeding `positions` (rows x tokens, in `ids` order; `real`:
        not padding): one tensor, or one per layer kind; the fed columns are this cache's from here on."""
        import torch

        masks = {kind: layout.mask(torch, positions, real, dtype).to(device) for kind, layout in self._layouts.items()}
        for layout in self._layouts.values():
            layout.append(torch, positions, real)
        if len(masks) == 1 and "full_attention" in masks:
            return masks["full_attention"]
        return masks

    def forget(self, row_id: int, tokens: int) -> None:
        """Cut row `row_id` back by its last `tokens` tokens (they stay as holes)."""
        row = self.ids.index(row_id)
        for layout in self._layouts.values():
            layout.forget(row, tokens)
        self._pack()

    def keep(self, row_ids: list[int]) -> None:
        """Keep only the rows `row_ids` (in their order here)."""
        rows = [self.ids.index(i) for i in row_ids]
        if rows == list(range(len(self.ids))):
            return
        if not rows:  # every reply is written
            self.ids = []
            return
        import torch

        index = torch.tensor(rows)
        for layer in self._layers:
            layer.keys, layer.values = layer.keys[index], layer.values[index]
        for layout in self._layouts.values():
            layout.valid, layout.positions = layout.valid[index], layout.positions[index]
        self.ids = list(row_ids)
        self._pack()

    def row(self, row_id: int, cache: Any, length: int) -> Any:
        """Row `row_id` written into `cache` (empty, recording: `ProbabilityReader._recording_cache`) as a cache of
        its own, `length` tokens long: its kept columns in order (a sliding-window layer's from the last window − 1
        of its prompt on)."""
        row = self.ids.index(row_id)
        for layer, kind, target in zip(self._layers, self._kinds, cache.layers, strict=True):
            kept = self._layouts[kind].valid[row].nonzero()[:, 0]
            target.update(layer.keys[row : row + 1, :, kept], layer.values[row : row + 1, :, kept])
            if hasattr(target, "cumulative_length"):
                target.cumulative_length = length  # its first columns are the window's, not the prompt's whole
        return cache

    def _pack(self) -> None:
        """Drop the holes of a layout that holds more than SLACK of them beyond its fullest row: each row's kept
        columns in order, ending where the fullest row's do."""
        import torch

        for kind, layout in self._layouts.items():
            counts = layout.valid.sum(1)
            width = int(counts.max())
            if layout.valid.shape[1] - width <= SLACK:
                continue
            index = torch.zeros(len(self.ids), width, dtype=torch.long)
            valid = torch.zeros(len(self.ids), width, dtype=torch.bool)
            for row in range(len(self.ids)):
                kept = layout.valid[row].nonzero()[:, 0]
                index[row, width - len(kept) :] = kept
                valid[row, width - len(kept) :] = True
            layout.positions = layout.positions.gather(1, index)
            layout.valid = valid
            for layer, layer_kind in zip(self._layers, self._kinds, strict=True):
                if layer_kind == kind:
                    picked = index[:, None, :, None].expand(-1, layer.keys.shape[1], -1, layer.keys.shape[-1])
                    layer.keys, layer.values = layer.keys.gather(2, picked), layer.values.gather(2, picked)
