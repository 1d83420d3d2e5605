"""The perturbation library of the benchmarks (docs/research/benchmarks.md §1-§3; seeds 000, 001, 002).

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

The rules themselves are in `rules.py`; the tables of which perturbation uses which rule with
which parameters are data, in configs/perturb/perturbations.yaml (validated by `RuleTables`).

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
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.configio import configs_dir, load_yaml_model
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.eval.perturb.rules import RULES, Rejected, RuleFn, Span, split_sentences

__all__ = [  # Rejected and split_sentences are the rules' and re-exported: callers see one library
    "ATTACKS", "DHP_SUMMARIZATION", "INJECTION_ASPECTS", "PERTURBATIONS", "Outcome", "Perturbation", "Perturbed",
    "Rejected", "SubAspect", "UnknownPerturbation", "apply_rule", "changed_spans", "count_outcomes", "derive_seed",
    "get", "split_sentences",
]  # fmt: skip

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


Outcome = Perturbed | Rejected


class UnknownPerturbation(InputError, KeyError):
    """A perturbation key that is not in the registry (an InputError and a KeyError)."""

    def __str__(self) -> str:  # KeyError would print the repr of the message
        return str(self.args[0])


@dataclass(frozen=True)
class Perturbation:
    """One perturbation of the benchmarks: rule-based (`rule`) or LLM-made (`template`)."""

    key: str
    name: str
    paper: str  # the seed paper ("000"-"002"), or the benchmark kind of a `perturbations:` row
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


# -- the tables (configs/perturb/perturbations.yaml) -----------------------------------------

Params = dict[str, int | str | tuple[str, ...]]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class DHPRow(_Strict):
    """A DHP minor / major pair; `rule` names one of `rules.RULES` (none: LLM-made)."""

    key: str = Field(pattern=r"^[a-z0-9_]+$")
    name: str = Field(min_length=1)
    level: Level
    aspects: str = Field(description="a name of `aspect_sets`")
    rule: str | None = None
    minor: Params
    major: Params


class ReplacementRow(_Strict):
    """A DHP sentence-level replacement: the text becomes another from a pool."""

    key: str = Field(min_length=1)
    name: str = Field(min_length=1)
    aspects: str
    source: str = Field(min_length=1)


class AttackRow(_Strict):
    """One of 002's 18 attacks: the aspect it targets and the rule where one exists."""

    name: str = Field(min_length=1)
    aspect: str = Field(min_length=1)
    level: Level
    rule: str | None = None
    params: Params = Field(default_factory=dict)


class SubAspect(_Strict):
    """One of 001's decomposed sub-aspects (Tables 12-13): an error is injected against it."""

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)


class PerturbationRow(_Strict):
    """A perturbation of any benchmark beyond the seed papers' tables: `benchmark` names the kind it
    belongs to (`perturbations.keys_of`), `rule` one of `rules.RULES` (none: LLM-made, with the prompt
    named by its key in configs/perturb/prompts.yaml)."""

    key: str = Field(pattern=r"^[a-z0-9_.]+$")
    name: str = Field(min_length=1)
    benchmark: str = Field(min_length=1)
    level: Level
    aspects: str = Field(description="a name of `aspect_sets`: the aspects it should lower")
    rule: str | None = None
    degree: Degree | None = None
    params: Params = Field(default_factory=dict)


class RuleTables(_Strict):
    """configs/perturb/perturbations.yaml: every perturbation of the benchmarks, as data."""

    aspect_sets: dict[str, tuple[str, ...]]
    typo_kinds: tuple[str, ...] = ()
    dhp: tuple[DHPRow, ...]
    replacements: tuple[ReplacementRow, ...] = ()
    attacks: tuple[AttackRow, ...]
    injection_aspects: dict[str, dict[str, tuple[SubAspect, ...]]]
    perturbations: tuple[PerturbationRow, ...] = ()

    @model_validator(mode="after")
    def _names(self) -> RuleTables:
        ruled: tuple[DHPRow | AttackRow | PerturbationRow, ...] = (*self.dhp, *self.attacks, *self.perturbations)
        rules = [row.rule for row in ruled if row.rule is not None]
        unknown = [r for r in rules if r not in RULES]
        if unknown:
            raise ValueError(f"unknown rule {unknown[0]!r}; the rules are {', '.join(RULES)}")
        aspected: tuple[DHPRow | ReplacementRow | PerturbationRow, ...] = (
            *self.dhp, *self.replacements, *self.perturbations
        )  # fmt: skip
        sets = [row.aspects for row in aspected if row.aspects not in self.aspect_sets]
        if sets:
            raise ValueError(f"unknown aspect set {sets[0]!r}; the sets are {', '.join(self.aspect_sets)}")
        return self


def tables_path() -> Path:
    """The packaged configs/perturb/perturbations.yaml."""
    return configs_dir() / "perturb" / "perturbations.yaml"


@cache
def load_tables(path: Path | None = None) -> RuleTables:
    """The rule tables; a malformed file is one ConfigError naming the file and the field."""
    return load_yaml_model(RuleTables, path or tables_path())


def _slug(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def _dhp(tables: RuleTables) -> list[Perturbation]:
    """DHP (000 Tables 1-2). k values are SummEval's; `variant` gives other datasets' k."""
    out = []
    for row in tables.dhp:
        aspects = tables.aspect_sets[row.aspects]
        for degree, params in (("minor", row.minor), ("major", row.major)):
            slug = f"dhp.{row.key}.{degree}"
            rule = RULES[row.rule] if row.rule else None
            method: Method = "rule" if rule else "llm"
            template = None if rule else slug
            out.append(Perturbation(slug, row.name, "000", row.level, method, degree, aspects, params, rule, template))  # type: ignore[arg-type]
    for replacement in tables.replacements:
        aspects = tables.aspect_sets[replacement.aspects]
        params = {"source": replacement.source}
        rule = RULES["replace_from_pool"]
        out.append(Perturbation(replacement.key, replacement.name, "000", "sentence", "rule", None, aspects, params,
                                rule, None, True))  # fmt: skip
    return out


def _attacks(tables: RuleTables) -> list[Perturbation]:
    return [
        Perturbation(
            key=f"attack.{_slug(row.name)}",
            name=row.name,
            paper="002",
            level=row.level,
            method="rule" if row.rule else "llm",
            degree=None,
            aspects=(row.aspect,),
            params=row.params,
            rule=RULES[row.rule] if row.rule else None,
            template=None if row.rule else f"attack.{_slug(row.name)}",
        )
        for row in tables.attacks
    ]


def _injections(tables: RuleTables) -> list[Perturbation]:
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
        for dataset, aspects in tables.injection_aspects.items()
        for aspect in aspects
    ]


def _rows(tables: RuleTables) -> list[Perturbation]:
    """The `perturbations:` table: each row one perturbation, rule-based or LLM-made."""
    return [
        Perturbation(
            key=row.key,
            name=row.name,
            paper=row.benchmark,
            level=row.level,
            method="rule" if row.rule else "llm",
            degree=row.degree,
            aspects=tables.aspect_sets[row.aspects],
            params=row.params,
            rule=RULES[row.rule] if row.rule else None,
            template=None if row.rule else row.key,
        )
        for row in tables.perturbations
    ]


def _registry(tables: RuleTables, path: Path) -> dict[str, Perturbation]:
    registry: dict[str, Perturbation] = {}
    for perturbation in (*_dhp(tables), *_attacks(tables), *_injections(tables), *_rows(tables)):
        if perturbation.key in registry:
            raise ConfigError(path, None, f"two perturbations have the key {perturbation.key!r}")
        registry[perturbation.key] = perturbation
    return registry


_TABLES = load_tables()
PERTURBATIONS: Mapping[str, Perturbation] = MappingProxyType(_registry(_TABLES, tables_path()))
DHP_SUMMARIZATION: tuple[str, ...] = tuple(
    f"dhp.{row.key}.{degree}" for row in _TABLES.dhp if row.aspects == "summarization" for degree in ("minor", "major")
)
ATTACKS: tuple[str, ...] = tuple(f"attack.{_slug(row.name)}" for row in _TABLES.attacks)
INJECTION_ASPECTS: Mapping[str, Mapping[str, tuple[SubAspect, ...]]] = MappingProxyType(
    {dataset: MappingProxyType(aspects) for dataset, aspects in _TABLES.injection_aspects.items()}
)


def keys_of(benchmark: str) -> tuple[str, ...]:
    """The keys of the `perturbations:` rows of benchmark kind `benchmark`, in table order."""
    return tuple(row.key for row in _TABLES.perturbations if row.benchmark == benchmark)


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
