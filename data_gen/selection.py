"""Which (input, output, aspect) triples get annotated: n systems x m aspects per input.

Thesis §3.3: per input, sample n systems (default 4), then m aspects (default 3) per
(input, output). The draws depend only on the seed and the item's identity, not on the
order of the file or on other sources, so adding a source never reshuffles another.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass

from .sources import SourceItem


@dataclass(frozen=True)
class EvalRequest:
    id: str
    item: SourceItem
    aspect: str


def _rng(seed: int, *parts: str) -> random.Random:
    digest = hashlib.sha256("\x1f".join((str(seed), *parts)).encode("utf-8")).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def request_id(item: SourceItem, aspect: str) -> str:
    blob = "\x1f".join((item.dataset, item.input_id, item.system, aspect))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:20]


def sample_requests(
    items: Sequence[SourceItem], aspects: Sequence[str], n_systems: int, n_aspects: int, seed: int
) -> list[EvalRequest]:
    """Requests in a stable order: inputs as first seen, chosen systems, chosen aspects."""
    by_input: dict[str, list[SourceItem]] = {}
    for item in items:
        by_input.setdefault(item.input_id, []).append(item)
    requests = []
    for input_id, group in by_input.items():
        systems = sorted({i.system for i in group})
        chosen = set(_rng(seed, group[0].dataset, input_id).sample(systems, min(n_systems, len(systems))))
        for item in group:
            if item.system not in chosen:
                continue
            chosen.discard(item.system)  # one output per system and input
            picked = _rng(seed, item.dataset, input_id, item.system).sample(list(aspects), min(n_aspects, len(aspects)))
            requests += [EvalRequest(request_id(item, a), item, a) for a in sorted(picked, key=list(aspects).index)]
    return requests
