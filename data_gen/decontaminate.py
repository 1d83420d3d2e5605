"""Keep training inputs out of the meta-evaluation sets (thesis §3.3: CNN/DailyMail inputs
were sampled so that none is a SummEval or QAGS article).

A `Blocklist` holds the digests (spanjudge.core.overlap: casefolded, whitespace collapsed,
punctuation stripped at the ends) of every input of the sets a judge will be meta-evaluated
on. `annotate` and `import` drop the examples whose inputs are in it, count them and list
them in run.json and stats; `--allow-overlap` keeps them, with a warning that run.json repeats.
A set of 1600 rows is read and hashed in well under a second, so this runs on every call.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanjudge.core.catalog import Catalog, load_catalog
from spanjudge.core.configio import configs_dir, read_yaml
from spanjudge.core.errors import ConfigError, InputError, SpanjudgeError
from spanjudge.core.overlap import RULE, input_digest
from spanjudge.core.tabular import iter_json_list, iter_jsonl

from .config import SourcesConfig, load_sources, resolve_source_path
from .sources import source_input, source_rows

DEFAULT_SUITE = "eval/thesis.yaml"  # the suite `meta-eval` reproduces the thesis tables with
SHOWN = 10  # overlaps printed on the terminal; run.json lists them all

ALLOW_WARNING = (
    "--allow-overlap: inputs that occur in the meta-evaluation sets are KEPT in the training data; "
    "a judge trained on them and meta-evaluated on those sets is scored on its own training inputs"
)


def default_target() -> Path:
    return configs_dir() / DEFAULT_SUITE


@dataclass(frozen=True)
class Blocklist:
    """Input digest -> where the meta-evaluation set has it ("summeval/<input id>")."""

    against: str
    digests: Mapping[str, str]

    def find(self, inputs: Mapping[str, str]) -> str | None:
        return self.digests.get(input_digest(inputs))


def _suite_sources(data: Mapping[str, Any], path: Path) -> tuple[Path, list[str]]:
    """The sources file of a meta-eval suite and the names of its sets (as eval/judging/suite.py resolves them)."""
    value = Path(str(data.get("sources", "sources/meta_eval_sets.yaml"))).expanduser()
    if not value.is_absolute():
        beside = path.parent / value
        value = beside if beside.exists() else configs_dir() / value
    names = [d.get("name") for d in data["datasets"] if isinstance(d, Mapping)]
    if not names or not all(isinstance(n, str) for n in names):
        raise ConfigError(path, "datasets", "expected a list of sets, each with a name")
    return value, [str(name) for name in names]


def _source_digests(
    sources: SourcesConfig, sources_path: Path, names: Sequence[str] | None, data_root: Path | None, catalog: Catalog
) -> Iterator[tuple[str, str]]:
    known = {s.name: s for s in sources.sources}
    for name in names or list(known):
        spec = known.get(name)
        if spec is None:
            raise ConfigError(sources_path, "sources", f"the meta-evaluation set '{name}' is not a source here")
        task = catalog.task(spec.task)
        for row in source_rows(spec, resolve_source_path(spec, sources_path, data_root)):
            item = source_input(spec, task, row)
            yield input_digest(item.inputs), f"{name}/{item.input_id}"


def _record_digests(path: Path) -> Iterator[tuple[str, str]]:
    """Records with an `inputs` {header: text} object: a train.jsonl, a `meta-eval --export-requests` file."""
    rows = iter_json_list(path) if path.suffix == ".json" else iter_jsonl(path)
    for where, row in rows:
        inputs = row.get("inputs") if isinstance(row, Mapping) else None
        if isinstance(inputs, list):  # Arrow's [{header, text}] shape
            inputs = {str(p.get("header")): str(p.get("text")) for p in inputs if isinstance(p, Mapping)}
        if not isinstance(inputs, Mapping):
            raise InputError(f"{where}: no 'inputs' object to decontaminate against")
        yield input_digest({str(k): str(v) for k, v in inputs.items()}), str(row.get("id", where))


def load_blocklist(
    target: Path, data_root: Path | None, catalog: Catalog | None = None, only: Sequence[str] = ()
) -> Blocklist:
    """The inputs of a meta-eval suite YAML (its sets; with `only`, those of them), a sources
    YAML (all its sources), or a JSONL / JSON file of records with `inputs`."""
    catalog = catalog or load_catalog()
    if not target.is_file():
        raise InputError(f"--decontaminate-against: {target} not found (a suite YAML, a sources YAML or a JSONL)")
    if target.suffix in (".yaml", ".yml"):
        data = read_yaml(target)
        if isinstance(data, Mapping) and "datasets" in data:
            sources_path, names = _suite_sources(data, target)
            names = [n for n in names if n in only] if only else names
            pairs = _source_digests(load_sources(sources_path), sources_path, names, data_root, catalog)
        elif isinstance(data, Mapping) and "sources" in data:
            pairs = _source_digests(load_sources(target), target, None, data_root, catalog)
        else:
            raise ConfigError(target, None, "neither a meta-eval suite (datasets:) nor a sources file (sources:)")
    else:
        pairs = _record_digests(target)
    digests: dict[str, str] = {}
    for digest, where in pairs:
        digests.setdefault(digest, where)
    return Blocklist(str(target), digests)


@dataclass
class Decontamination:
    """What `annotate` / `import` did about inputs of the meta-evaluation sets (run.json, stats)."""

    against: str | None
    allow_overlap: bool = False
    blocklist: Blocklist | None = field(default=None, repr=False)
    meta_inputs: int = 0
    overlapping_inputs: int = 0
    excluded_examples: int = 0  # rows (annotate) or records (import) dropped; 0 with allow_overlap
    overlaps: list[str] = field(default_factory=list)  # "dataset/input id (where) = set/input id", one per input
    _seen: set[tuple[str, str]] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        if self.blocklist is not None:
            self.meta_inputs = len(self.blocklist.digests)

    def excludes(self, dataset: str, input_id: str, inputs: Mapping[str, str], where: str) -> bool:
        """True when this example must be left out; every overlap is counted either way."""
        if self.blocklist is None:
            return False
        found = self.blocklist.find(inputs)
        if found is None:
            return False
        if (dataset, input_id) not in self._seen:
            self._seen.add((dataset, input_id))
            self.overlapping_inputs += 1
            self.overlaps.append(f"{dataset}/{input_id} ({where}) = {found}")
        if self.allow_overlap:
            return False
        self.excluded_examples += 1
        return True

    def as_dict(self) -> dict[str, Any]:
        return {
            "against": self.against,
            "rule": RULE,
            "allow_overlap": self.allow_overlap,
            "warning": ALLOW_WARNING if self.allow_overlap else None,
            "meta_eval_inputs": self.meta_inputs,
            "overlapping_inputs": self.overlapping_inputs,
            "excluded_examples": self.excluded_examples,
            "overlaps": self.overlaps,
        }

    def lines(self) -> list[str]:
        """What the command prints: one summary line, the first overlaps, the warning."""
        if self.allow_overlap and self.blocklist is None:
            return [f"warning: {ALLOW_WARNING} (not checked)"]
        verb = "kept (--allow-overlap)" if self.allow_overlap else "excluded"
        head = (
            f"decontamination against {self.against}: {self.overlapping_inputs} inputs occur in the "
            f"meta-evaluation sets ({self.meta_inputs} inputs); {verb}"
            + ("" if self.allow_overlap else f", {self.excluded_examples} examples left out")
        )
        out = [head, *(f"  overlap: {o}" for o in self.overlaps[:SHOWN])]
        if len(self.overlaps) > SHOWN:
            out.append(f"  ... and {len(self.overlaps) - SHOWN} more (see run.json)")
        if self.allow_overlap:
            out.append(f"warning: {ALLOW_WARNING}")
        return out


def prepare(
    target: Path | None,
    allow_overlap: bool,
    data_root: Path | None,
    catalog: Catalog | None = None,
    only: Sequence[str] = (),
) -> Decontamination:
    """The CLI's decontamination: against `target` (default: the thesis suite). With
    `allow_overlap`, overlaps are still counted when the sets can be read, never excluded."""
    path = target or default_target()
    if allow_overlap:
        try:
            blocklist: Blocklist | None = load_blocklist(path, data_root, catalog, only)
        except SpanjudgeError:
            blocklist = None  # nothing is excluded anyway; the warning says it was not checked
        return Decontamination(str(path), True, blocklist)
    try:
        return Decontamination(str(path), False, load_blocklist(path, data_root, catalog, only))
    except SpanjudgeError as exc:
        raise InputError(
            f"cannot read the meta-evaluation inputs to keep out of the training data ({exc}); give --data-dir, "
            "--decontaminate-against FILE_OR_SUITE, or --allow-overlap to skip this check"
        ) from None
