"""The rule-based perturbations (docs/research/benchmarks.md §1-§3) and the sentence splitter they share.

A rule takes (text, seeded rng, parameters, pool of alternatives) and returns an `Edit`: the
new text and, per new character, its index in the original (None for an inserted or
replacing character), from which `perturbations.Perturbation.apply` derives the spans. A rule
that cannot apply returns `Rejected(reason)`. `RULES` names each rule for the tables in
configs/perturb/perturbations.yaml.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

import typo

from spanjudge.core.errors import InputError

Span = tuple[int, int]


@dataclass(frozen=True)
class Rejected:
    """A perturbation that could not be made for one text, and why (to be counted)."""

    reason: str


@dataclass(frozen=True)
class Edit:
    """A rule's result: the new text and, per new character, its index in the original
    (None for an inserted or replacing character); `detail` goes into the provenance."""

    text: str
    origin: list[int | None]
    detail: object = None


RuleFn = Callable[[str, random.Random, Mapping[str, object], Sequence[str]], "Edit | Rejected"]


def _local_edit(origin: list[int | None], before: str, after: str) -> list[int | None]:
    """The origin map after one local edit, found as the common prefix and suffix."""
    limit = min(len(before), len(after))
    prefix = 0
    while prefix < limit and before[prefix] == after[prefix]:
        prefix += 1
    suffix = 0
    while suffix < limit - prefix and before[-1 - suffix] == after[-1 - suffix]:
        suffix += 1
    inserted = len(after) - prefix - suffix
    return origin[:prefix] + [None] * inserted + origin[len(before) - suffix :]


# -- sentence splitting ---------------------------------------------------------------------

# Ends a sentence: . ! ? (then closing quotes/brackets) before whitespace, or a line break.
_SENTENCE_END = re.compile(r"""[.!?]+["'”’)\]]*(?=\s)|\n""")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc e.g i.e no gen gov sen rep lt col capt inc ltd co corp u.s u.k a.m p.m".split()  # noqa: SIM905
)


def _is_abbreviation(text: str, end: int) -> bool:
    """Whether the period just before `end` closes an abbreviation or an initial ("T. S.")."""
    word = re.search(r"(\S*)\.$", text[:end])
    token = (word.group(1) if word else "").lower().lstrip("(\"'“‘")
    return token in _ABBREVIATIONS or (len(token) == 1 and token.isalpha())


def split_sentences(text: str) -> list[Span]:
    """Sentence spans (without surrounding whitespace), shared by every sentence-level rule.

    A simple, documented splitter (nltk is not a dependency): a sentence ends at . ! ?
    (plus closing quotes or brackets) followed by whitespace, unless the period closes a
    known abbreviation or a one-letter initial or the next word starts in lower case; a line
    break always ends a sentence. SummEval's tokenized text ("Burnley . He") splits fine.
    """
    spans: list[Span] = []
    start = 0
    for match in _SENTENCE_END.finditer(text):
        end = match.end()
        if match.group() != "\n":
            following = text[end:].lstrip()
            if not following or following[0].islower():
                continue
            if match.group().startswith(".") and len(match.group()) == 1 and _is_abbreviation(text, end):
                continue
        _add_sentence(text, start, end, spans)
        start = end
    _add_sentence(text, start, len(text), spans)
    return spans


def _add_sentence(text: str, start: int, end: int, spans: list[Span]) -> None:
    piece = text[start:end]
    if piece.strip():
        left = start + len(piece) - len(piece.lstrip())
        spans.append((left, start + len(piece.rstrip())))


# -- rule-based perturbations ---------------------------------------------------------------


def _int(params: Mapping[str, object], name: str) -> int:
    value = params[name]
    if not isinstance(value, int):
        raise InputError(f"parameter {name!r} must be an integer, not {value!r}")
    return value


def _char_deletion(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> Edit | Rejected:
    """DHP C,R Random Deletions: delete k random alphanumeric characters (000 Table 2)."""
    k = _int(params, "k")
    eligible = [i for i, char in enumerate(text) if char.isalnum()]
    if len(eligible) < k:
        return Rejected(f"too short: {len(eligible)} alphanumeric characters, k = {k}")
    deleted = set(rng.sample(eligible, k))
    kept = [i for i in range(len(text)) if i not in deleted]
    return Edit("".join(text[i] for i in kept), list(kept), sorted(deleted))


_TYPO_ATTEMPTS = 50


def _one_typo(text: str, kind: str, seed: int) -> str:
    """One typo of the `typo` package. StrErrer reseeds the GLOBAL random module, so its
    state is saved and restored: our seeded rng stays the only source of randomness."""
    state = random.getstate()
    try:
        return str(getattr(typo.StrErrer(text, seed=seed), kind)().result)
    except (KeyError, ValueError, IndexError):  # the package fails on a few unicode digits
        return text
    finally:
        random.setstate(state)


def _typos(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> Edit | Rejected:
    """DHP C,R Random Typos: k typos of the `typo` package's kinds (000 Table 2).

    A typo that changes nothing (a swap of two equal letters, no doubled letter for
    `unichar`) is drawn again, so the text gets exactly k effective typos."""
    k = _int(params, "k")
    kinds = tuple(str(kind) for kind in params["kinds"])  # type: ignore[attr-defined]
    current, origin, applied = text, list[int | None](range(len(text))), []
    for _typo in range(k):
        for _attempt in range(_TYPO_ATTEMPTS):
            kind = rng.choice(kinds)
            changed = _one_typo(current, kind, rng.getrandbits(32))
            if changed != current:
                origin = _local_edit(origin, current, changed)
                current = changed
                applied.append(kind)
                break
        else:
            return Rejected(f"no typo applies: {_TYPO_ATTEMPTS} draws left the text unchanged")
    return Edit(current, origin, applied)


def _with_order(text: str, sentences: list[Span], order: Sequence[int]) -> Edit:
    """Put sentence order[i] in slot i, keeping the whitespace between slots; a slot whose
    sentence text changed is marked replaced (moved text is not 'kept')."""
    pieces: list[tuple[str, list[int | None]]] = []
    cursor = 0
    for slot, source in enumerate(order):
        start, end = sentences[slot]
        pieces.append((text[cursor:start], list(range(cursor, start))))
        new = text[slice(*sentences[source])]
        same = new == text[start:end]
        pieces.append((new, list(range(start, end)) if same else [None] * len(new)))
        cursor = end
    pieces.append((text[cursor:], list(range(cursor, len(text)))))
    return Edit("".join(p for p, _ in pieces), [i for _, o in pieces for i in o], list(order))


def _reorder(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> Edit | Rejected:
    """Reordering (DHP S,R: k = 2 swaps two sentences, k = "all" shuffles) and Sentence
    Exchange (002: random permutation). Never the identity: a permutation that leaves every
    sentence text in place is drawn again (two equal sentences swapped count as identity)."""
    sentences = split_sentences(text)
    texts = [text[s:e] for s, e in sentences]
    if len(set(texts)) < 2:
        return Rejected(f"fewer than 2 distinct sentences ({len(sentences)} found)")
    if params["k"] == 2:
        pairs = [(i, j) for i in range(len(texts)) for j in range(i + 1, len(texts)) if texts[i] != texts[j]]
        i, j = rng.choice(pairs)
        order = list(range(len(texts)))
        order[i], order[j] = j, i
    else:
        order = rng.sample(range(len(texts)), len(texts))
        while [texts[o] for o in order] == texts:
            order = rng.sample(range(len(texts)), len(texts))
    return _with_order(text, sentences, order)


def _word_span_deletion(
    text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]
) -> Edit | Rejected:
    """DHP W,R Random Deletions: delete k consecutive words (000 Table 2, WMT22 zh-en), with
    the whitespace after them (before them when they end the text)."""
    k = _int(params, "k")
    words = [m.span() for m in re.finditer(r"\S+", text)]
    if len(words) <= k:
        return Rejected(f"too short: {len(words)} words, k = {k} (deleting all is no benchmark)")
    first = rng.randrange(len(words) - k + 1)
    start, end = words[first][0], words[first + k - 1][1]
    if first + k < len(words):
        end = words[first + k][0]
    else:
        start = words[first - 1][1]
    kept = [*range(start), *range(end, len(text))]
    return Edit(text[:start] + text[end:], list(kept), {"first_word": first, "k": k})


def _replace_from_pool(
    text: str, rng: random.Random, params: Mapping[str, object], pool: Sequence[str]
) -> Edit | Rejected:
    """DHP S,R ending / answer replacement: the whole text becomes an alternative from
    `pool` (another story's ending, the item's wrong ending, another question's answer)."""
    alternatives = [p for p in pool if p.strip() and p.strip() != text.strip()]
    if not alternatives:
        return Rejected("no alternative differs from the text")
    new = rng.choice(alternatives)
    return Edit(new, [None] * len(new), {"replacement_index": pool.index(new)})


_LOWER_WORD = re.compile(r"[a-z]+")


def _tokens(text: str, sentence: Span) -> list[Span]:
    return [(sentence[0] + m.start(), sentence[0] + m.end()) for m in re.finditer(r"\S+", text[slice(*sentence)])]


def _exchange_positions(words: list[str], rng: random.Random) -> list[int]:
    """002 Word Exchange, per sentence: ≤5 tokens untouched; 6-9 one adjacent swap at an
    index in [1, n-2]; ≥10 one swap in each half (first in [1, n//2-2], second in
    [n//2, n-2]); both words of a pair pure lowercase a-z (the authors' grammar_order.py)."""
    n = len(words)
    if n <= 5:
        return []
    ranges = [range(1, n - 1)] if n < 10 else [range(1, n // 2 - 1), range(n // 2, n - 1)]
    chosen = []
    for indices in ranges:
        eligible = [i for i in indices if _LOWER_WORD.fullmatch(words[i]) and _LOWER_WORD.fullmatch(words[i + 1])]
        if eligible:
            chosen.append(rng.choice(eligible))
    return chosen


def _word_exchange(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> Edit | Rejected:
    """002 Word Exchange (docs/research/benchmarks.md §3); the whitespace between tokens is kept as is."""
    replacements: list[tuple[Span, str]] = []
    swaps = []
    for number, sentence in enumerate(split_sentences(text)):
        tokens = _tokens(text, sentence)
        for i in _exchange_positions([text[s:e] for s, e in tokens], rng):
            (s1, e1), (s2, e2) = tokens[i], tokens[i + 1]
            replacements.append(((s1, e2), text[s2:e2] + text[e1:s2] + text[s1:e1]))
            swaps.append((number, i))
    return _splice(text, replacements, swaps)


def _misspell(word: str, rng: random.Random) -> tuple[str, str, int]:
    """One of 002's three edits, with the authors' index ranges (grammar_typo.py)."""
    edit = rng.choice(("repeat", "delete", "swap"))
    if edit == "repeat":
        at = rng.randint(0, len(word) - 1)
        return word[:at] + word[at] + word[at:], edit, at
    if edit == "delete":
        at = rng.randint(1, len(word) - 1)
        return word[:at] + word[at + 1 :], edit, at
    at = rng.randint(0, len(word) - 2)
    return word[:at] + word[at + 1] + word[at] + word[at + 2 :], edit, at


def _spelling(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> Edit | Rejected:
    """002 Spelling Mistake: per sentence up to 3 pure a-z tokens of ≥4 characters, one
    random edit each (repeat a char, delete a char at index ≥1, swap adjacent chars)."""
    replacements: list[tuple[Span, str]] = []
    edits = []
    for number, sentence in enumerate(split_sentences(text)):
        tokens = _tokens(text, sentence)
        eligible = [i for i, (s, e) in enumerate(tokens) if e - s >= 4 and _LOWER_WORD.fullmatch(text[s:e])]
        for i in sorted(eligible if len(eligible) <= 3 else rng.sample(eligible, 3)):
            new, edit, at = _misspell(text[slice(*tokens[i])], rng)
            replacements.append((tokens[i], new))
            edits.append({"sentence": number, "token": i, "edit": edit, "index": at})
    if not replacements:
        return Rejected("no pure a-z token of 4 or more characters")
    return _splice(text, replacements, edits)


def _splice(text: str, replacements: list[tuple[Span, str]], detail: object) -> Edit:
    """Replace non-overlapping spans (in order), marking only the changed middle of each."""
    pieces: list[str] = []
    origin: list[int | None] = []
    cursor = 0
    for (start, end), new in replacements:
        pieces += [text[cursor:start], new]
        origin += list(range(cursor, start)) + _local_edit(list(range(start, end)), text[start:end], new)
        cursor = end
    pieces.append(text[cursor:])
    origin += list(range(cursor, len(text)))
    return Edit("".join(pieces), origin, detail)


def _last_sentence_deletion(
    text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]
) -> Edit | Rejected:
    """002 Sentence Deletion: drop the last sentence (and the whitespace before it)."""
    sentences = split_sentences(text)
    if len(sentences) < 2:
        return Rejected(f"fewer than 2 sentences ({len(sentences)} found): deleting the last would empty the text")
    end = sentences[-2][1]
    return Edit(text[:end], list(range(end)), {"deleted_sentence": len(sentences) - 1})


# the names configs/perturb/perturbations.yaml uses for the rules
RULES: Mapping[str, RuleFn] = MappingProxyType({
    "char_deletion": _char_deletion,
    "typos": _typos,
    "reorder": _reorder,
    "word_span_deletion": _word_span_deletion,
    "replace_from_pool": _replace_from_pool,
    "word_exchange": _word_exchange,
    "spelling": _spelling,
    "last_sentence_deletion": _last_sentence_deletion,
})  # fmt: skip
