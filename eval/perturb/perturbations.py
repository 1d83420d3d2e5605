"""The perturbation library of the benchmarks (BENCHMARKS.md §1-§3; seeds 000, 001, 002).

Every perturbation is a `Perturbation` object: its paper name, level, method, degree,
targeted aspects and parameters. Rule-based ones carry a function and are applied here
with a seeded `random.Random`; LLM-made ones carry a prompt-template name and run through
`llm_perturb.LLMPerturber`. Either way a perturbed text records which characters changed,
because those spans are the ground truth of the span metrics:

    Perturbed.spans    half-open spans in the PERTURBED text: inserted or replacing characters
    Perturbed.removed  half-open spans in the ORIGINAL text: deleted or replaced characters

so the text outside `spans` equals the original outside `removed` (same characters, same
order). A pure deletion has no `spans` and a pure insertion no `removed`; a moved sentence
counts as removed at its old place and inserted at its new one.

A rule that cannot apply to a text (one sentence to reorder, no eligible word, a result equal
to the input) returns `Rejected(reason)` instead of a text: the caller counts it, nothing
is skipped silently.
"""

from __future__ import annotations

import difflib
import hashlib
import itertools
import random
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Literal

import typo

from spanjudge.inference.errors import InputError

Span = tuple[int, int]
Level = Literal["character", "word", "sentence"]
Method = Literal["rule", "llm", "prompt"]
Degree = Literal["minor", "major"]


@dataclass(frozen=True)
class Perturbed:
    """A perturbed text, what changed (see the module docstring) and how it was made."""

    text: str
    spans: tuple[Span, ...]
    removed: tuple[Span, ...] = ()
    provenance: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Rejected:
    """A perturbation that could not be made for one text, and why (to be counted)."""

    reason: str


Outcome = Perturbed | Rejected


@dataclass(frozen=True)
class _Edit:
    """A rule's result: the new text and, per new character, its index in the original
    (None for an inserted or replacing character); `detail` goes into the provenance."""

    text: str
    origin: list[int | None]
    detail: object = None


RuleFn = Callable[[str, random.Random, Mapping[str, object], Sequence[str]], "_Edit | Rejected"]


class UnknownPerturbation(InputError, KeyError):
    """A perturbation key that is not in the registry (an InputError and a KeyError)."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


@dataclass(frozen=True)
class Perturbation:
    """One perturbation of the benchmarks: rule-based (`rule`) or LLM-made (`template`)."""

    key: str
    name: str
    paper: Literal["000", "001", "002"]
    level: Level
    method: Method
    degree: Degree | None
    aspects: tuple[str, ...]
    params: Mapping[str, object] = field(default_factory=dict)
    rule: RuleFn | None = field(default=None, repr=False, compare=False)
    template: str | None = None
    needs_pool: bool = False  # ending/answer replacement: the caller passes the alternatives

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        if (self.rule is None) == (self.template is None):
            raise ValueError(f"perturbation {self.key!r}: give exactly one of rule and template")

    def variant(self, suffix: str, **params: object) -> Perturbation:
        """The same perturbation with other parameters (e.g. SumPubMed's k = 20 / 100) under
        the key `key@suffix`, so frozen LLM outputs of the two never mix."""
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            raise InputError(f"perturbation {self.key!r} has no parameter {unknown}; it has {sorted(self.params)}")
        return replace(self, key=f"{self.key}@{suffix}", params={**self.params, **params})

    def apply(self, text: str, rng: random.Random, pool: Sequence[str] = (), seed: int | None = None) -> Outcome:
        """Apply a rule-based perturbation. `seed` is only recorded in the provenance;
        `pool` holds the alternatives of replacement perturbations (other items' endings)."""
        if self.rule is None:
            raise InputError(f"perturbation {self.key!r} is LLM-made: run it with llm_perturb.LLMPerturber")
        if self.needs_pool and not pool:
            return Rejected("no alternatives: pass a pool of other items' texts")
        edit = self.rule(text, rng, self.params, pool)
        if isinstance(edit, Rejected):
            return edit
        if edit.text == text:
            return Rejected("unchanged: the rule found nothing to change")
        spans, removed = _spans_from_origin(len(text), edit.origin)
        provenance = {"method": "rule", "key": self.key, "seed": seed, "params": dict(self.params)}
        return Perturbed(edit.text, spans, removed, {**provenance, "edits": edit.detail})


# -- seeds and spans ------------------------------------------------------------------------


def derive_seed(seed: int, item_id: str, key: str) -> int:
    """The per-item seed: stable across runs, processes and item order (unlike hash())."""
    digest = hashlib.sha256(f"{seed}\x1f{key}\x1f{item_id}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFFFFFF  # 31 bits: every server accepts it


def _runs(indices: Iterable[int]) -> tuple[Span, ...]:
    """Sorted indices -> half-open spans of consecutive runs."""
    spans: list[list[int]] = []
    for index in indices:
        if spans and spans[-1][1] == index:
            spans[-1][1] = index + 1
        else:
            spans.append([index, index + 1])
    return tuple((start, end) for start, end in spans)


def _spans_from_origin(original_length: int, origin: Sequence[int | None]) -> tuple[tuple[Span, ...], tuple[Span, ...]]:
    """(spans, removed) from a per-character origin map; kept characters must keep their order."""
    kept = [index for index in origin if index is not None]
    if any(a >= b for a, b in itertools.pairwise(kept)):
        raise AssertionError("kept characters out of order: a rule must mark moved text as replaced")
    kept_set = set(kept)
    spans = _runs(i for i, index in enumerate(origin) if index is None)
    return spans, _runs(i for i in range(original_length) if i not in kept_set)


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


_DIFF_TOKEN = re.compile(r"\s+|\w+|[^\w\s]")


def _merge(spans: Iterable[Span]) -> tuple[Span, ...]:
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        elif end > start:
            merged.append([start, end])
    return tuple((start, end) for start, end in merged)


def changed_spans(original: str, perturbed: str) -> tuple[tuple[Span, ...], tuple[Span, ...]]:
    """(spans in `perturbed`, removed spans in `original`) by a diff, for LLM-made texts.

    The diff runs on tokens (words, single punctuation marks, whitespace runs), then maps
    them back to characters: a character diff of a rewrite matches scattered letters and
    yields meaningless one-character spans, while a replaced word should be one span.
    Equal blocks are identical token runs, so the text outside the spans equals the
    original outside the removed spans.
    """
    a = [m.span() for m in _DIFF_TOKEN.finditer(original)]
    b = [m.span() for m in _DIFF_TOKEN.finditer(perturbed)]
    matcher = difflib.SequenceMatcher(
        None, [original[s:e] for s, e in a], [perturbed[s:e] for s, e in b], autojunk=False
    )
    spans: list[Span] = []
    removed: list[Span] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            continue
        if j2 > j1:
            spans.append((b[j1][0], b[j2 - 1][1]))
        if i2 > i1:
            removed.append((a[i1][0], a[i2 - 1][1]))
    return _merge(spans), _merge(removed)


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


def _char_deletion(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> _Edit | Rejected:
    """DHP C,R Random Deletions: delete k random alphanumeric characters (000 Table 2)."""
    k = _int(params, "k")
    eligible = [i for i, char in enumerate(text) if char.isalnum()]
    if len(eligible) < k:
        return Rejected(f"too short: {len(eligible)} alphanumeric characters, k = {k}")
    deleted = set(rng.sample(eligible, k))
    kept = [i for i in range(len(text)) if i not in deleted]
    return _Edit("".join(text[i] for i in kept), list(kept), sorted(deleted))


_TYPO_KINDS = (
    "char_swap",
    "missing_char",
    "extra_char",
    "nearby_char",
    "similar_char",
    "skipped_space",
    "random_space",
    "repeated_char",
    "unichar",
)
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


def _typos(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> _Edit | Rejected:
    """DHP C,R Random Typos: k typos of the `typo` package's kinds (000 Table 2).

    A typo that changes nothing (a swap of two equal letters, no doubled letter for
    `unichar`) is drawn again, so the text gets exactly k effective typos."""
    k = _int(params, "k")
    kinds = tuple(str(kind) for kind in params["kinds"])  # type: ignore[attr-defined]
    current, origin, applied = text, list[int | None](range(len(text))), []
    for _ in range(k):
        for _ in range(_TYPO_ATTEMPTS):
            kind = rng.choice(kinds)
            changed = _one_typo(current, kind, rng.getrandbits(32))
            if changed != current:
                origin = _local_edit(origin, current, changed)
                current = changed
                applied.append(kind)
                break
        else:
            return Rejected(f"no typo applies: {_TYPO_ATTEMPTS} draws left the text unchanged")
    return _Edit(current, origin, applied)


def _with_order(text: str, sentences: list[Span], order: Sequence[int]) -> _Edit:
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
    return _Edit("".join(p for p, _ in pieces), [i for _, o in pieces for i in o], list(order))


def _reorder(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> _Edit | Rejected:
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
) -> _Edit | Rejected:
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
    return _Edit(text[:start] + text[end:], list(kept), {"first_word": first, "k": k})


def _replace_from_pool(
    text: str, rng: random.Random, params: Mapping[str, object], pool: Sequence[str]
) -> _Edit | Rejected:
    """DHP S,R ending / answer replacement: the whole text becomes an alternative from
    `pool` (another story's ending, the item's wrong ending, another question's answer)."""
    alternatives = [p for p in pool if p.strip() and p.strip() != text.strip()]
    if not alternatives:
        return Rejected("no alternative differs from the text")
    new = rng.choice(alternatives)
    return _Edit(new, [None] * len(new), {"replacement_index": pool.index(new)})


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


def _word_exchange(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> _Edit | Rejected:
    """002 Word Exchange (BENCHMARKS.md §3); the whitespace between tokens is kept as is."""
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


def _spelling(text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]) -> _Edit | Rejected:
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


def _splice(text: str, replacements: list[tuple[Span, str]], detail: object) -> _Edit:
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
    return _Edit("".join(pieces), origin, detail)


def _last_sentence_deletion(
    text: str, rng: random.Random, params: Mapping[str, object], _: Sequence[str]
) -> _Edit | Rejected:
    """002 Sentence Deletion: drop the last sentence (and the whitespace before it)."""
    sentences = split_sentences(text)
    if len(sentences) < 2:
        return Rejected(f"fewer than 2 sentences ({len(sentences)} found): deleting the last would empty the text")
    end = sentences[-2][1]
    return _Edit(text[:end], list(range(end)), {"deleted_sentence": len(sentences) - 1})


# -- the registry ---------------------------------------------------------------------------

SUMMARIZATION_ASPECTS = ("coherence", "consistency", "fluency", "relevance")
STORY_ASPECTS = ("coherence", "consistency", "fluency")
QA_ASPECTS = ("answer quality",)
TRANSLATION_ASPECTS = ("accuracy", "fluency")


# DHP summarization-style pairs: (key, paper name, level, aspects, rule or None, minor params, major params)
_DHP_TABLE: tuple[tuple[str, str, Level, tuple[str, ...], RuleFn | None, dict[str, object], dict[str, object]], ...] = (
    ("char_deletion", "Random Deletions", "character", SUMMARIZATION_ASPECTS, _char_deletion, {"k": 10}, {"k": 50}),
    (
        "typos",
        "Random Typos",
        "character",
        SUMMARIZATION_ASPECTS,
        _typos,
        {"k": 10, "kinds": _TYPO_KINDS},
        {"k": 50, "kinds": _TYPO_KINDS},
    ),
    ("fictional_entities", "Fictional Named Entities", "word", SUMMARIZATION_ASPECTS, None, {"entities": "one"},
     {"entities": "several"}),
    ("grammatical_errors", "Grammatical Errors", "word", SUMMARIZATION_ASPECTS, None, {"errors": "few"},
     {"errors": "many"}),
    ("reordering", "Reordering", "sentence", SUMMARIZATION_ASPECTS, _reorder, {"k": 2}, {"k": "all"}),
    ("rewrite_insert", "Rewriting and Insertion", "sentence", SUMMARIZATION_ASPECTS, None, {"sentences": "one"},
     {"sentences": "several"}),
    # WMT22 zh-en's word level (000 Table 2): k consecutive words
    ("word_span_deletion", "Random Deletions", "word", TRANSLATION_ASPECTS, _word_span_deletion, {"k": 5}, {"k": 25}),
)  # fmt: skip

# DHP story / QA sentence level (000 Table 2): the text is replaced by an alternative from a pool
_REPLACEMENTS: tuple[tuple[str, str, tuple[str, ...], str], ...] = (
    ("dhp.story.random_ending", "Random Ending Sentence", STORY_ASPECTS, "another story's ending"),
    ("dhp.story.wrong_ending", "Wrong Ending Sentence", STORY_ASPECTS, "the item's wrong ending"),
    ("dhp.qa.random_answer", "Random Answer", QA_ASPECTS, "another question's answer"),
)


def _dhp() -> list[Perturbation]:
    """DHP (000 Tables 1-2). k values are SummEval's; `variant` gives other datasets' k."""
    out = []
    for key, name, level, aspects, rule, minor, major in _DHP_TABLE:
        for degree, params in (("minor", minor), ("major", major)):
            slug = f"dhp.{key}.{degree}"
            method: Method = "rule" if rule else "llm"
            template = None if rule else slug
            out.append(Perturbation(slug, name, "000", level, method, degree, aspects, params, rule, template))  # type: ignore[arg-type]
    for key, name, aspects, source in _REPLACEMENTS:
        params = {"source": source}
        out.append(
            Perturbation(key, name, "000", "sentence", "rule", None, aspects, params, _replace_from_pool, None, True)
        )
    return out


# 002 in BENCHMARKS.md order: (name, targeted aspect, level, rule or None, params)
_ATTACK_TABLE: tuple[tuple[str, str, Level, RuleFn | None, dict[str, object]], ...] = (
    ("Repetition", "fluency", "word", None, {}),
    ("Passive Voice", "fluency", "sentence", None, {}),
    ("Inversion", "fluency", "sentence", None, {}),
    ("Improper Connective", "coherence", "word", None, {}),
    ("Sentence Exchange", "coherence", "sentence", _reorder, {"k": "all"}),
    ("Incorrect Verb Form", "grammaticality", "word", None, {}),
    ("Word Exchange", "grammaticality", "word", _word_exchange, {}),
    ("Spelling Mistake", "grammaticality", "character", _spelling, {}),
    ("Uncommon Phrase", "simplicity", "word", None, {}),
    ("Complex Sentence", "simplicity", "sentence", None, {}),
    ("Abbreviation", "informativeness", "sentence", None, {}),
    ("Hypernym", "informativeness", "word", None, {}),
    ("Sentence Deletion", "informativeness", "sentence", _last_sentence_deletion, {}),
    ("Complement", "non-hallucination", "word", None, {}),
    ("Continuation", "non-hallucination", "sentence", None, {}),
    ("Different Entity", "non-contradiction", "word", None, {}),
    ("Conflicting Fact", "non-contradiction", "sentence", None, {}),
    ("Negation", "non-contradiction", "word", None, {}),
)


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _attacks() -> list[Perturbation]:
    return [
        Perturbation(
            key=f"attack.{_slug(name)}",
            name=name,
            paper="002",
            level=level,
            method="rule" if rule else "llm",
            degree=None,
            aspects=(aspect,),
            params=params,
            rule=rule,
            template=None if rule else f"attack.{_slug(name)}",
        )
        for name, aspect, level, rule, params in _ATTACK_TABLE
    ]


@dataclass(frozen=True)
class SubAspect:
    """One of 001's decomposed sub-aspects (Tables 12-13): an error is injected against it."""

    name: str
    description: str


def _subs(*pairs: tuple[str, str]) -> tuple[SubAspect, ...]:
    return tuple(SubAspect(name, description) for name, description in pairs)


# 001 Tables 12 (SummEval) and 13 (Topical-Chat), descriptions shortened in our words.
INJECTION_ASPECTS: Mapping[str, Mapping[str, tuple[SubAspect, ...]]] = MappingProxyType({
    "summeval": MappingProxyType({
        "coherence": _subs(
            ("Logical Flow", "sentences follow a logical order with smooth, clear transitions"),
            ("Thematic Consistency", "all sentences stay on one central theme, no unrelated or abrupt information"),
            ("Referential Clarity", "pronouns and other references are clear and point to something mentioned before"),
            ("Sentence Connectivity", "connectives and adverbials between sentences are proper and not confusing"),
        ),
        "consistency": _subs(
            ("Factual Accuracy", "every fact matches the article, nothing distorted or made up"),
            ("Logical Consistency", "causal, inferred and temporal relations match the article"),
            ("Exclusion of Subjectivity", "no opinions, reviews or speculation absent from the article"),
            ("Entity Consistency", "persons, organisations, places, dates, events and terms match the article"),
        ),
        "fluency": _subs(
            ("Grammatical Correctness", "no errors of agreement, capitalisation, tense or word order"),
            ("Lexical Appropriateness", "words and phrases are apt, not needlessly complex or uncommon"),
            ("Spelling and Punctuation Accuracy", "spelling and punctuation are correct"),
            ("No Redundancy", "no redundant expressions or immediate repetition"),
        ),
        "relevance": _subs(
            ("Coverage of Important Information", "all key points of the article are present, none omitted"),
            ("Exclusion of Unimportant Information", "no correct but unimportant details"),
            ("Topic Alignment", "stays on the article's main topic, adds no unrelated information"),
            ("Context Preservation", "key points keep the context needed to understand them"),
        ),
    }),
    "topical_chat": MappingProxyType({
        "understandability": _subs(
            ("Logical Flow", "the response is ordered logically with clear transitions"),
            ("Referential Clarity", "pronouns and references are clear and refer to something introduced before"),
            ("Expression Clarity", "plain, unambiguous wording without convoluted sentences"),
        ),
        "naturalness": _subs(
            ("Grammatical Correctness", "no errors of agreement, capitalisation, tense, word order or spelling"),
            ("Lexical Appropriateness", "wording and tone are usual and fit the dialogue"),
            ("No Redundancy", "no redundant expressions or immediate repetition"),
        ),
        "context maintenance": _subs(
            ("Logical Consistency", "follows the dialogue without contradicting earlier statements or facts"),
            ("Topic Relevance", "stays on the dialogue's topic, no abrupt or unrelated content"),
        ),
        "interestingness": _subs(
            ("Content Novelty", "brings fresh points instead of repeating the dialogue"),
            ("Emotional Appeal", "evokes humour, empathy or excitement that invites a reply"),
            ("Information Adequacy", "has substance; not empty, perfunctory or clichéd"),
        ),
        "knowledge use": _subs(
            ("Fact Utilization Accuracy", "uses the given fact accurately, without distortion or fabrication"),
            ("Fact Utilization Appropriateness", "brings the fact in naturally, not awkwardly or abruptly"),
        ),
    }),
})  # fmt: skip


def _injections() -> list[Perturbation]:
    """001 error injection: one perturbation per (dataset, aspect); `n` errors (default 1,
    `variant` for more), each against a sub-aspect drawn at random per item."""
    return [
        Perturbation(
            key=f"dual.{dataset}.{_slug(aspect)}",
            name=f"Error Injection ({aspect})",
            paper="001",
            level="sentence",
            method="llm",
            degree=None,
            aspects=(aspect,),
            params={"dataset": dataset, "aspect": aspect, "n": 1},
            template="dual.error_injection",
        )
        for dataset, aspects in INJECTION_ASPECTS.items()
        for aspect in aspects
    ]


def _registry() -> dict[str, Perturbation]:
    registry: dict[str, Perturbation] = {}
    for perturbation in (*_dhp(), *_attacks(), *_injections()):
        if perturbation.key in registry:
            raise AssertionError(f"duplicate perturbation key {perturbation.key!r}")
        registry[perturbation.key] = perturbation
    return registry


PERTURBATIONS: Mapping[str, Perturbation] = MappingProxyType(_registry())

DHP_SUMMARIZATION: tuple[str, ...] = tuple(
    f"dhp.{key}.{degree}"
    for key in ("char_deletion", "typos", "fictional_entities", "grammatical_errors", "reordering", "rewrite_insert")
    for degree in ("minor", "major")
)
ATTACKS: tuple[str, ...] = tuple(f"attack.{_slug(row[0])}" for row in _ATTACK_TABLE)


def get(key: str) -> Perturbation:
    """The registered perturbation `key`; UnknownPerturbation (an InputError) lists the valid ones."""
    try:
        return PERTURBATIONS[key]
    except KeyError:
        raise UnknownPerturbation(
            f"unknown perturbation {key!r}; valid keys: {', '.join(sorted(PERTURBATIONS))}"
        ) from None


def apply_rule(
    perturbation: Perturbation,
    items: Sequence[tuple[str, str]],
    seed: int,
    pool: Sequence[str] | Mapping[str, Sequence[str]] = (),
) -> dict[str, Outcome]:
    """Apply a rule to (item id, text) pairs, each with its own rng from (seed, item id, key),
    so one item's result does not depend on the others. `pool`: shared alternatives, or
    per-item alternatives keyed by item id (the item's own text is never chosen)."""
    results: dict[str, Outcome] = {}
    for item_id, text in items:
        item_seed = derive_seed(seed, item_id, perturbation.key)
        alternatives = pool.get(item_id, ()) if isinstance(pool, Mapping) else pool
        results[item_id] = perturbation.apply(text, random.Random(item_seed), alternatives, seed=item_seed)
    return results


def count_outcomes(outcomes: Iterable[Outcome]) -> tuple[int, Counter[str]]:
    """(number perturbed, rejections by reason category) — the part of a reason before ':'."""
    made, rejected = 0, Counter[str]()
    for outcome in outcomes:
        if isinstance(outcome, Perturbed):
            made += 1
        else:
            rejected[outcome.reason.split(":", 1)[0]] += 1
    return made, rejected
