"""The registry of error-span sets: what `meta-eval --spans NAME[:ARGUMENT]` and `publish --benchmark` read.

A set's module defines `SPAN_SET = SpanSetKind(...)`: how it loads its documents (the people's spans at their
offsets), the arguments it takes after a colon, whether a judge can be run on its outputs (a set without inputs is
judged by files of judgments only), the split it is when decision thresholds are fitted on it, and a human ceiling
where it has one. A new set is that module and one line in `SPAN_SETS`; another installed package adds one as an
entry point of the group `spanjudge.span_sets` (`core.registry`). Listing the names imports no set's module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from spanjudge.core.errors import InputError
from spanjudge.core.registry import Registry, one_of
from spanjudge.eval.spans.documents import Span, SpanDocument

# the judge kinds that need no inputs: a file of judgments (`scores:`) or an exported campaign (`factgenie:`)
JUDGES_WITHOUT_INPUTS = ("scores:", "factgenie:")

Loaded = tuple[list[SpanDocument], str | None]  # the documents, and their aspect (None: the task's first)
Ceiling = tuple[list[SpanDocument], dict[str, list[Span]]]  # a first person's documents, a second's spans by id


def _dev(argument: str) -> str:
    return "dev"


@dataclass(frozen=True)
class SpanSetKind:
    """One error-span set: its documents and what can be done with them.

    load:       (argument, data root, at most N documents) → the documents and their aspect
    arguments:  what may follow `NAME:` ("" is the name alone); `free_argument` instead names one the set
                requires and takes as given (a folder)
    has_inputs: whether the outputs' inputs are in the set, so a judge can be run on them
    fit_split:  the split the set is, for an argument, when decision thresholds are fitted on it
    ceiling:    (argument, data root, at most N pairs) → a second person scored against a first, or None
    """

    name: str
    summary: str  # one line: where the spans come from, as a published benchmark's card cites it
    load: Callable[[str, Path | None, int | None], Loaded]
    arguments: tuple[str, ...] = ("",)
    free_argument: str = ""
    has_inputs: bool = True
    fit_split: Callable[[str], str] = _dev
    ceiling: Callable[[str, Path | None, int | None], Ceiling | None] | None = None

    def spellings(self) -> list[str]:
        """How the set is named on the command line: `quintd1`, `quintd1:dev`, `factgenie:FOLDER`."""
        if self.free_argument:
            return [f"{self.name}:{self.free_argument}"]
        return [f"{self.name}:{argument}" if argument else self.name for argument in self.arguments]


SPAN_SETS: Registry[SpanSetKind] = Registry(
    "span set",
    "spanjudge.span_sets",
    {
        "rotowire": "spanjudge.eval.spans.rotowire:SPAN_SET",  # RotoWire accuracy (Thomson & Reiter 2021)
        "quintd1": "spanjudge.eval.spans.quintd:SPAN_SET",  # quintd-1 (Kasner & Dušek 2024), its splits
        "factgenie": "spanjudge.eval.spans.factgenie:SPAN_SET",  # any factgenie annotation campaign
    },
    SpanSetKind,
)


@dataclass(frozen=True)
class ChosenSet:
    """A span set as named on the command line: its kind and the argument after the colon."""

    kind: SpanSetKind
    argument: str

    @property
    def spec(self) -> str:
        return f"{self.kind.name}:{self.argument}" if self.argument else self.kind.name

    def load(self, data_root: Path | None, max_items: int | None) -> Loaded:
        return self.kind.load(self.argument, data_root, max_items)

    def fit_split(self) -> str:
        return self.kind.fit_split(self.argument)

    def ceiling(self, data_root: Path | None, max_items: int | None) -> Ceiling | None:
        return None if self.kind.ceiling is None else self.kind.ceiling(self.argument, data_root, max_items)

    def check_judges(self, names: Sequence[str]) -> None:
        """InputError unless every judge can judge this set: one without inputs takes judgment files only."""
        unfit = [name for name in names if not self.kind.has_inputs and not name.startswith(JUDGES_WITHOUT_INPUTS)]
        if unfit:
            raise InputError(
                f"{self.spec} holds the outputs but not their inputs, so {', '.join(unfit)} cannot judge them here: "
                "score the outputs with `spanjudge score` and give --judge scores:FILE.jsonl (or the campaign "
                "`render --to factgenie` made of it, --judge factgenie:FOLDER)"
            )


def all_spellings() -> list[str]:
    """Every registered set as it is named on the command line (imports each set's module)."""
    return [spelling for name in SPAN_SETS.names() for spelling in SPAN_SETS.load(name).spellings()]


def choose_set(spec: str, what: str = "--spans") -> ChosenSet:
    """The set `NAME[:ARGUMENT]` names; one InputError, naming every spelling, for a name or argument it lacks."""
    name, _, argument = spec.partition(":")
    if name not in SPAN_SETS.names():
        raise InputError(f"{what} must be one of {one_of(all_spellings())}, got {spec!r}")
    kind = SPAN_SETS.load(name)
    fits = bool(argument) if kind.free_argument else argument in kind.arguments
    if not fits:
        raise InputError(f"{what} {spec!r}: {kind.name} is named {one_of(kind.spellings())}")
    return ChosenSet(kind, argument)
