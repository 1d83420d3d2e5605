"""`--shard K/N`: one of N disjoint parts of a run, chosen by input.

Every input (the dataset and input id, or the input text) goes to shard
`sha256(key) mod N + 1`. The split depends on nothing but the key and N: not on the order
of the file, not on what else is in it, not on the machine. So every output and aspect of
one input lands in one shard (the train/validation split keeps inputs whole, and the
sampling draws systems per input), and re-running shard K on another host does the same
work again.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import InputError

SHARD_HELP = (
    "Do only part K of N (e.g. 2/8): the inputs whose stable hash falls in shard K, all outputs of an "
    "input together. Run every K from 1 to N (on other machines), each with its own --out."
)

_PATTERN = re.compile(r"^\s*(\d+)\s*/\s*(\d+)\s*$")


@dataclass(frozen=True)
class Shard:
    index: int  # K, 1-based
    count: int  # N

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    @property
    def slug(self) -> str:
        """For file names: shard-2-of-8."""
        return f"shard-{self.index}-of-{self.count}"

    def holds(self, key: str) -> bool:
        return shard_number(key, self.count) == self.index


def shard_number(key: str, count: int) -> int:
    """The 1-based shard of `key` among `count` (sha256: the same on every machine and Python)."""
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def input_key(dataset: str, input_id: str) -> str:
    return f"{dataset}\x1f{input_id}"


def parse_shard(text: str | None) -> Shard | None:
    """`--shard K/N` (None when not given); anything else is one clear error."""
    if text is None:
        return None
    match = _PATTERN.match(text)
    if match is None or not 1 <= int(match[1]) <= int(match[2]):
        raise InputError(f"--shard expects K/N with 1 <= K <= N (e.g. --shard 2/8), got {text!r}")
    return Shard(int(match[1]), int(match[2]))


def shard_path(path: Path, shard: Shard | None) -> Path:
    """A file of this shard next to `path`: cache.sqlite -> cache.shard-2-of-8.sqlite."""
    if shard is None:
        return path
    return path.with_name(f"{path.stem}.{shard.slug}{path.suffix}")
