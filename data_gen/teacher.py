"""Training records from annotations that already exist: no model is called.

Two formats, each selected by `format:` in an import config (configs/import/*.yaml):

- `quintd1`: quintd-1 / factgenie span annotations (GPT-4 or human) over quintd's LLM outputs.
  Spans keep their character offsets; their types become severities and the spans an overall
  0–100 score by the config's declared `rule`, which every record's provenance and the stats
  repeat — no score is ever invented silently.
- `openlgauge`: OpeNLGauge's released training file, a JSON array of records with `dataset,
  input_id, system, inputs, outputs, aspect_name, aspect_definition, task_type, task_name,
  extra_task_info, evaluation`, where the evaluation is structured (`errors` + `score`) or the
  judge's own text format.

Both write what `spanjudge annotate` writes (train.jsonl, validation.jsonl split by input,
hf_dataset/, stats.{json,md}, run.json), only after every record has been read and checked:
a bad input is one message naming the file and line, and nothing is half-written.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.catalog import Catalog, Task
from spanjudge.core.configio import load_yaml_model
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_json
from spanjudge.core.paths import data_dir
from spanjudge.inference.contract import MAX_ERRORS, ErrorAnnotation, Evaluation, cap_errors
from spanjudge.inference.openlgauge import iter_openlgauge

from .annotate import limit_errors
from .config import FieldLimits
from .decontaminate import Decontamination
from .quintd import QUINTD_CATEGORIES, QUINTD_DOMAINS, Mismatch, QuintdOutput, read_quintd
from .records import Record, split_by_input, task_fields, write_split
from .stats import compute_stats, write_stats
from .vote import MergeRule, Vote, agreement, vote_merge


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ScoreRule(_Strict):
    """Span types → severities, and severities → an overall score (MQM-style penalties).

    score = max(floor, start − penalty × Σ severity over all of an output's spans), rounded
    half up to a multiple of `round_to`; an output without spans gets `start`.
    """

    severity: dict[str, int] = Field(min_length=1, description="span type -> severity 1-5")
    start: float = Field(default=100.0, ge=0, le=100)
    penalty: float = Field(default=10.0, ge=0, description="score points per severity point")
    floor: float = Field(default=0.0, ge=0, le=100)
    round_to: int = Field(default=5, gt=0)

    @model_validator(mode="after")
    def _severities_in_range(self) -> ScoreRule:
        bad = {k: v for k, v in self.severity.items() if not 1 <= v <= 5}
        if bad:
            raise ValueError(f"severities must be 1-5, got {bad}")
        return self

    def severity_of(self, span_type: str, where: str) -> int:
        if span_type not in self.severity:
            known = ", ".join(self.severity)
            raise InputError(f"{where}: span type '{span_type}' has no severity in the import rule (known: {known})")
        return self.severity[span_type]

    def score(self, severities: Sequence[int]) -> float:
        raw = max(self.floor, self.start - self.penalty * sum(severities))
        return float(self.round_to * int(raw / self.round_to + 0.5))

    def describe(self) -> str:
        types = ", ".join(f"{k} {v}" for k, v in self.severity.items())
        return (
            f"severity by span type: {types}; score = max({self.floor:g}, {self.start:g} − {self.penalty:g} × "
            f"Σ severity over all spans), rounded to a multiple of {self.round_to}"
        )


QuintdAnnotator = Literal["gpt-4", "gpt-4-temperature-1", "gpt-3.5", "llama3", "human"]


class QuintdImport(_Strict):
    format: Literal["quintd1"]
    annotator: QuintdAnnotator = Field(
        default="gpt-4", description="whose spans: gpt-4, gpt-4-temperature-1, gpt-3.5, llama3 or human"
    )
    annotators: tuple[QuintdAnnotator, ...] = Field(
        default=(), description="several annotators as one teacher, their spans merged by `merge` (not `annotator`)"
    )
    merge: MergeRule | None = Field(default=None, description="with `annotators`: {method: vote, min_votes, extent}")
    domains: tuple[str, ...] = Field(default=("wikidata",), min_length=1)
    table_range: tuple[int, int] | None = Field(
        default=None, description="[first, stop) table indices to import (all systems of each); default all"
    )
    task: str = "quintd1"
    aspect: str = "accuracy"
    rule: ScoreRule
    on_mismatch: Mismatch = Field(
        default="error",
        description="a span whose text is not at its offset: error, relocate, relocate_or_drop or drop (counted)",
    )
    empty_spans: Literal["error", "drop"] = Field(
        default="error", description="a span with empty text (it marks nothing): error or drop (counted)"
    )
    data_root: Path | None = Field(default=None, description="the shared data folder (default ../shared/data)")

    @model_validator(mode="after")
    def _known(self) -> QuintdImport:
        bad = [d for d in self.domains if d not in QUINTD_DOMAINS]
        if bad:
            raise ValueError(f"unknown quintd-1 domain(s) {bad}; known: {list(QUINTD_DOMAINS)}")
        missing = [c for c in QUINTD_CATEGORIES.values() if c not in self.rule.severity]
        if missing:
            raise ValueError(f"rule.severity needs every quintd-1 span type; missing {missing}")
        if self.table_range is not None and not 0 <= self.table_range[0] < self.table_range[1]:
            raise ValueError(f"table_range {list(self.table_range)} is not [first, stop) with 0 <= first < stop")
        if self.annotators or self.merge is not None:
            self._check_ensemble()
        return self

    def _check_ensemble(self) -> None:
        if "annotator" in self.model_fields_set:
            raise ValueError("set `annotator` (one teacher) or `annotators` (merged), not both")
        if len(set(self.annotators)) < 2 or len(set(self.annotators)) != len(self.annotators):
            raise ValueError(f"`annotators` names two or more different annotators, got {list(self.annotators)}")
        if self.merge is None or self.merge.method != "vote":
            raise ValueError("`annotators` are merged by `merge: {method: vote, min_votes: K}` (import calls no model)")
        if self.merge.min_votes > len(self.annotators):
            raise ValueError(f"merge.min_votes {self.merge.min_votes} exceeds the {len(self.annotators)} annotators")

    @property
    def teacher_name(self) -> str:
        """The teacher in provenance and stats: the annotator, or the vote over several."""
        if not self.annotators or self.merge is None:
            return self.annotator
        return f"vote{self.merge.min_votes}-{self.merge.extent}({'+'.join(self.annotators)})"


class OpenlgaugeImport(_Strict):
    format: Literal["openlgauge"]
    path: Path = Field(description="the released JSON array (relative paths: from the config's folder)")
    task_map: dict[str, str] = Field(default_factory=dict, description="task_name -> catalog task id")
    field_limits: FieldLimits = Field(
        default_factory=FieldLimits,
        description="the longest Location / Explanation, as for annotate: reject (an error naming the record) or cap",
    )


class ImportConfig(_Strict):
    name: str = Field(min_length=1)
    source: Annotated[QuintdImport | OpenlgaugeImport, Field(discriminator="format")]
    validation_fraction: float = Field(default=0.05, ge=0, lt=1)
    seed: int = 42


def load_import_config(path: Path) -> ImportConfig:
    return load_yaml_model(ImportConfig, path)


@dataclass
class ImportSummary:
    out_dir: Path
    name: str
    format: str
    records: int = 0
    train: int = 0
    validation: int = 0
    spans: int = 0
    relocated: list[str] = field(default_factory=list)
    dropped: list[str] = field(default_factory=list)
    capped: list[str] = field(default_factory=list)  # records whose spans exceeded MAX_ERRORS
    rule: str | None = None
    decontamination: dict[str, Any] | None = None  # inputs of the meta-evaluation sets: excluded, or kept loudly
    ids: dict[str, Any] | None = None  # --ids: the file naming the only records imported, and how many it names

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "out_dir": str(self.out_dir)}


@dataclass(frozen=True)
class IdList:
    """`spanjudge import --ids FILE`: import only the records these ids name (e.g. the outputs `spanjudge
    select` chose for people to annotate)."""

    path: Path
    ids: tuple[str, ...]

    @classmethod
    def read(cls, path: Path) -> IdList:
        """One id a line; what follows a tab is left out (`spanjudge select` prints each id with its
        uncertainty), as are blank lines and lines starting with #."""
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise InputError(f"--ids {path}: cannot read it ({exc.__class__.__name__}: {exc})") from None
        ids = [line.split("\t", 1)[0].strip() for line in lines if line.strip() and not line.startswith("#")]
        if not ids:
            raise InputError(f"--ids {path}: names no record id (one a line)")
        return cls(path, tuple(dict.fromkeys(ids)))

    def check_found(self, found: set[str], name: str, example: str | None) -> None:
        missing = [i for i in self.ids if i not in found]
        if missing:
            like = f"; its records' ids look like {example!r}" if example else ""
            raise InputError(
                f"--ids {self.path}: {len(missing)} of {len(self.ids)} ids name no record of import '{name}', "
                f"e.g. {missing[0]!r}{like}"
            )


# --- quintd-1 -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class QuintdSpans:
    """One output's teacher errors: one annotator's spans, or several annotators' merged by vote."""

    item: QuintdOutput  # the output (the first annotator's record of it: its data, text and place)
    errors: list[ErrorAnnotation]  # in the output's order
    span_types: list[str]
    teacher: str
    annotators: tuple[str, ...]
    marked: int  # spans the annotators marked (before any vote)
    merge: dict[str, Any] | None = None  # the vote's rule and each error's votes and members
    read: tuple[QuintdOutput, ...] = ()  # every annotator's record of the output (default: `item`)


def quintd_spans(item: QuintdOutput, source: QuintdImport) -> QuintdSpans:
    """One annotator's spans as errors; the rule gives each span type its severity."""
    spans = sorted(item.spans, key=lambda s: (s.start, s.end))
    errors = [
        ErrorAnnotation(
            location=item.output[s.start : s.end],
            explanation=s.reason or s.category,
            severity=source.rule.severity_of(s.category, item.where),
            start=s.start,
            end=s.end,
            aspect=source.aspect,
            anchor="exact",
        )
        for s in spans
    ]
    return QuintdSpans(item, errors, [s.category for s in spans], item.annotator_id, (item.annotator_id,), len(spans))


def voted_spans(present: dict[str, QuintdOutput], source: QuintdImport) -> QuintdSpans:
    """The annotators' spans on one output merged by the import's vote (`data_gen.vote`)."""
    assert source.merge is not None
    item = next(iter(present.values()))
    votes = [
        Vote(
            member=name,
            start=s.start,
            end=s.end,
            severity=source.rule.severity_of(s.category, found.where),
            explanation=s.reason or s.category,
            location=found.output[s.start : s.end],
            label=s.category,
        )
        for name, found in present.items()
        for s in found.spans
    ]
    merged = vote_merge(votes, source.merge)
    errors = [
        ErrorAnnotation(
            location=item.output[m.start : m.end],
            explanation=m.explanation,
            severity=m.severity,
            start=m.start,
            end=m.end,
            aspect=source.aspect,
            anchor="exact",
        )
        for m in merged
        if m.start is not None and m.end is not None  # quintd spans are always placed
    ]
    merge = {
        "rule": source.merge.describe(),
        "annotators": list(source.annotators),
        "absent": [name for name in source.annotators if name not in present],
        "sources": [found.where for found in present.values()],
        "errors": [{"votes": m.votes, "members": list(m.members)} for m in merged],
        "agreement": agreement(votes, len(present)),
    }
    labels = [m.chosen.label or "" for m in merged]
    return QuintdSpans(
        item, errors, labels, source.teacher_name, tuple(present), len(votes), merge, tuple(present.values())
    )


def quintd_record(found: QuintdSpans, source: QuintdImport, task: Task, summary: ImportSummary) -> Record:
    """One quintd output as a training record; the rule turns its errors' severities into a score."""
    item, errors = found.item, found.errors
    score = source.rule.score([e.severity for e in errors])
    kept = cap_errors(errors)
    summary.spans += found.marked
    for record in found.read or (item,):
        summary.relocated += [
            f"{record.where}: span moved from {s.moved_from} to {s.start}"
            for s in record.spans
            if s.moved_from is not None
        ]
        summary.dropped += [f"{record.where}: {d}" for d in record.dropped]
    if len(kept) < len(errors):
        summary.capped.append(f"{item.where} ({len(errors)} spans, {MAX_ERRORS} most severe kept)")
    provenance: dict[str, Any] = {
        "source": item.where,
        "teacher": found.teacher,
        "rule": source.rule.describe(),
        "span_types": found.span_types,
        "annotators": [{"name": name, "parse_failure": None, "dropped_outlier": False} for name in found.annotators],
    }
    if found.merge is not None:
        provenance["merge"] = found.merge
    return {
        "id": quintd_record_id(item, source.aspect),
        "dataset": "quintd1",
        "input_id": item.input_id,
        "system": item.model,
        "inputs": {task.inputs[0].header: item.data},
        "outputs": {task.output: item.output},
        **task_fields(task, source.aspect),
        "evaluation": Evaluation(errors=kept, score=score).model_dump(),
        "provenance": provenance,
    }


def quintd_record_id(item: QuintdOutput, aspect: str) -> str:
    return f"{item.output_id}/{aspect}"


def _quintd_records(
    source: QuintdImport,
    catalog: Catalog,
    summary: ImportSummary,
    data_root: Path | None = None,
    wanted: set[str] | None = None,
) -> tuple[list[Record], str | None]:
    """The records (only those `wanted` names, when given) and one id of any record, for messages.
    `data_root`: --data-dir, which wins over the config's data_root."""

    task = catalog.task(source.task)
    task.aspect(source.aspect)  # unknown aspect: one clear error before reading
    if len(task.inputs) != 1:
        raise InputError(f"task '{task.id}' has {len(task.inputs)} inputs; quintd-1 gives one (the data)")
    summary.rule = source.rule.describe()
    root = data_dir(data_root or source.data_root) / "spans" / "quintd1"
    records, example = [], None
    for found in teacher_spans(root, source):
        item = found.item
        if source.table_range is not None and not source.table_range[0] <= item.index < source.table_range[1]:
            continue
        example = example or quintd_record_id(item, source.aspect)
        if wanted is None or quintd_record_id(item, source.aspect) in wanted:  # the others leave no count behind
            records.append(quintd_record(found, source, task, summary))
    return records, example


def teacher_spans(root: Path, source: QuintdImport) -> Iterator[QuintdSpans]:
    """Every output's teacher errors: the annotator's in file order, or the annotators' merged by vote in the
    order of domain, system and table (an output some annotator lacks is merged from the others, and says so)."""

    def read(annotator: str) -> Iterator[QuintdOutput]:
        return read_quintd(
            root, annotator, domains=source.domains, on_mismatch=source.on_mismatch, empty_spans=source.empty_spans
        )

    if not source.annotators:
        yield from (quintd_spans(item, source) for item in read(source.annotator))
        return
    outputs: dict[tuple[str, str, int], dict[str, QuintdOutput]] = {}
    for annotator in source.annotators:
        for item in read(annotator):
            present = outputs.setdefault((item.domain, item.model, item.index), {})
            if annotator in present:
                raise InputError(
                    f"{item.where}: {annotator} annotates {item.input_id} ({item.model}) twice "
                    f"(also {present[annotator].where}); a vote takes one record per annotator"
                )
            present[annotator] = item
    for key in sorted(outputs):
        yield voted_spans(outputs[key], source)


# --- OpeNLGauge ---------------------------------------------------------------------------------


def _limited(errors: list[ErrorAnnotation], limits: FieldLimits, where: str) -> list[ErrorAnnotation]:
    """The annotate field limits on imported errors: an over-long field stops the import naming
    the record (too_long: reject), or is cut (too_long: cap)."""
    limited = limit_errors(errors, limits)
    if limited.value is None:
        raise InputError(f"{where}: {limited.reason}; shorten it, or set source.field_limits.too_long: cap")
    return limited.value


# --- both ---------------------------------------------------------------------------------------


def build_records(
    config: ImportConfig,
    config_dir: Path,
    catalog: Catalog,
    summary: ImportSummary,
    data_root: Path | None = None,
    ids: IdList | None = None,
) -> list[Record]:
    """Every record of the import, or only those `ids` names (each of which must be one)."""
    source = config.source
    wanted = None if ids is None else set(ids.ids)
    if isinstance(source, QuintdImport):
        records, example = _quintd_records(source, catalog, summary, data_root, wanted)
    else:
        path = source.path if source.path.is_absolute() else config_dir / source.path
        limits = source.field_limits
        records = list(iter_openlgauge(path, catalog, source.task_map, lambda e, where: _limited(e, limits, where)))
        example = str(records[0]["id"]) if records else None
        records = [r for r in records if wanted is None or r["id"] in wanted]
        summary.spans = sum(len(r["evaluation"]["errors"]) for r in records)  # each imported error is a span
    if ids is not None:
        ids.check_found({str(r["id"]) for r in records}, config.name, example)
        summary.ids = {"file": str(ids.path), "count": len(ids.ids)}
    counts = Counter(r["id"] for r in records)
    repeated = [i for i, n in counts.items() if n > 1]
    if repeated:
        raise InputError(f"{len(repeated)} record id(s) repeat, e.g. {repeated[0]} (each output/aspect once)")
    if not records:
        raise InputError(f"import '{config.name}' selected no records")
    return records


def _import_stats(records: Sequence[Record], summary: ImportSummary) -> dict[str, Any]:
    types = Counter(t for r in records for t in r["provenance"].get("span_types", []))
    severities = Counter(e["severity"] for r in records for e in r["evaluation"]["errors"])
    return {
        "name": summary.name,
        "format": summary.format,
        "rule": summary.rule,
        "outputs": len(records),
        "inputs": len({(r["dataset"], r["input_id"]) for r in records}),
        "spans": summary.spans,
        "spans_per_type": dict(sorted(types.items())),
        "severity_histogram": {str(k): v for k, v in sorted(severities.items())},
        "relocated": len(summary.relocated),
        "dropped": len(summary.dropped),
        "capped": len(summary.capped),
    }


def import_annotations(
    config: ImportConfig,
    config_dir: Path,
    out_dir: Path,
    catalog: Catalog,
    decontamination: Decontamination | None = None,
    data_root: Path | None = None,
    ids: IdList | None = None,
) -> ImportSummary:
    """Read and check every record first, then write the dataset folder. With
    `decontamination`, records whose inputs occur in a meta-evaluation set are left out;
    `data_root` (--data-dir) is the shared data folder of a quintd-1 source; `ids` (--ids) names the only
    records to import."""
    summary = ImportSummary(out_dir=out_dir, name=config.name, format=config.source.format)
    records = build_records(config, config_dir, catalog, summary, data_root, ids)
    if decontamination is not None:
        records = [
            r
            for r in records
            if not decontamination.excludes(r["dataset"], r["input_id"], r["inputs"], r["provenance"]["source"])
        ]
        summary.decontamination = decontamination.as_dict()
        if not records:
            raise InputError(
                f"import '{config.name}': every record's input occurs in the meta-evaluation sets "
                f"({decontamination.against}); nothing is left to train on (--allow-overlap keeps them)"
            )
    train, validation = split_by_input(records, config.validation_fraction, config.seed)
    teachers = sorted({a["name"] for r in records for a in r["provenance"]["annotators"]})
    stats = compute_stats(records, teachers, [])
    stats["import"] = _import_stats(records, summary)
    if summary.decontamination is not None:
        stats["decontamination"] = {k: v for k, v in summary.decontamination.items() if k != "overlaps"}
    write_split(out_dir, train, validation)
    write_stats(out_dir, stats)
    summary.records, summary.train, summary.validation = len(records), len(train), len(validation)
    atomic_write_json(out_dir / "run.json", {**summary.as_dict(), "config": config.model_dump(mode="json")})
    return summary
