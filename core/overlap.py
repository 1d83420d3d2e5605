"""One rule for "the same input": normalised text and its digest, shared by the stages that
keep training inputs apart from meta-evaluation inputs (data_gen drops them, training records
their digests in spanjudge.json, eval warns when a judge is scored on them).

The rule, applied to each input text of an example (the article, the dialogue history, ...):
casefold; collapse every run of whitespace to one space; strip whitespace and punctuation
(Unicode category P*) at both ends. The example's key is its normalised texts, sorted (so the
headers' names and order do not matter) and joined with a newline; its digest is the sha1 of
that key. So "The cat sat." and "  the CAT\\n sat " are the same input; "the cat sat on" is not.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Iterable, Mapping

DIGEST_CHARS = 16  # 64 bits: no accidental collision among millions of inputs, half the size of sha1 hex

_SPACE = re.compile(r"\s+")

RULE = (
    "each input text casefolded, whitespace runs collapsed to one space, punctuation and spaces "
    "stripped at both ends; the texts sorted and joined; sha1 of that"
)


def _is_edge(char: str) -> bool:
    return char.isspace() or unicodedata.category(char).startswith("P")


def normalise_text(text: str) -> str:
    collapsed = _SPACE.sub(" ", text.casefold())
    start, end = 0, len(collapsed)
    while start < end and _is_edge(collapsed[start]):
        start += 1
    while end > start and _is_edge(collapsed[end - 1]):
        end -= 1
    return collapsed[start:end]


def input_key(inputs: Mapping[str, str] | Iterable[str]) -> str:
    """The normalised text of an example's inputs ({header: text}, or the texts alone)."""
    texts = inputs.values() if isinstance(inputs, Mapping) else inputs
    return "\n".join(sorted(normalise_text(str(t)) for t in texts))


def input_digest(inputs: Mapping[str, str] | Iterable[str]) -> str:
    return hashlib.sha1(input_key(inputs).encode("utf-8")).hexdigest()[:DIGEST_CHARS]
