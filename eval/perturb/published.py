"""Published numbers of the four perturbation-benchmark seeds (`configs/perturb/published.yaml`).

Reports show them as labelled reference rows beside our judge: they were measured by the papers on
THEIR official data, never by us. `load_published` validates the file strictly (unknown keys, bad
benchmark names, attack perturbations / aspects outside the paper's sets are config errors) and
`rows_for` selects rows by benchmark and any other field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.configio import configs_dir, load_yaml_model
from spanjudge.core.errors import ConfigError
from spanjudge.eval.perturb.registry import KINDS, KindName
from spanjudge.eval.perturb.statistics import ATTACK_ASPECTS, ATTACK_PERTURBATIONS


class PublishedRow(BaseModel):
    """One published number: who (judge) scored what (dataset / aspect / perturbation) how (metric)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    benchmark: KindName
    table: str = Field(min_length=1, description='table number as printed, e.g. "2"')
    judge: str = Field(min_length=1)
    dataset: str | None = None
    perspective: Literal["global", "local"] | None = None
    aspect: str | None = None
    perturbation: str | None = None
    strategy: str | None = None
    metric: str = Field(min_length=1)
    value: float
    note: str | None = None

    @model_validator(mode="after")
    def _attack_names(self) -> PublishedRow:
        if self.benchmark == "attacks":
            if self.perturbation is not None and self.perturbation not in ATTACK_PERTURBATIONS:
                raise ValueError(f"perturbation {self.perturbation!r} is not one of the 18 attack perturbations")
            if self.aspect is not None and self.aspect not in ATTACK_ASPECTS:
                raise ValueError(f"aspect {self.aspect!r} is not one of the attack aspects {', '.join(ATTACK_ASPECTS)}")
        return self


class PublishedSource(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    paper: str = Field(min_length=1, description="seed file stem, e.g. 001_7863ef7b3769cc25")
    title: str = Field(min_length=1)
    tables: dict[str, str] = Field(description="table number -> caption words")


class PublishedFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    sources: dict[KindName, PublishedSource]
    rows: list[PublishedRow]


def default_published_path() -> Path:
    """The packaged `configs/perturb/published.yaml`."""
    return configs_dir() / "perturb" / "published.yaml"


def load_published(path: Path | None = None) -> list[PublishedRow]:
    """Rows of `path` (default: the packaged file), in file order.

    Raises `ConfigError` (one line: file, `rows[i].field`, problem) for a malformed file, and for a row
    whose table is not listed under its benchmark's `sources` entry.
    """
    path = default_published_path() if path is None else path
    published = load_yaml_model(PublishedFile, path)
    for index, row in enumerate(published.rows):
        source = published.sources.get(row.benchmark)
        if source is None:
            raise ConfigError(path, f"rows[{index}].benchmark", f"no sources entry for benchmark {row.benchmark!r}")
        if row.table not in source.tables:
            raise ConfigError(
                path, f"rows[{index}].table", f"table {row.table!r} is not listed in sources.{row.benchmark}.tables"
            )
    return list(published.rows)


_FILTERABLE = frozenset(PublishedRow.model_fields) - {"benchmark", "value"}


def rows_for(rows: list[PublishedRow], benchmark: str, **filters: Any) -> list[PublishedRow]:
    """Rows of `benchmark` whose fields equal every filter (`None` matches a field left out).

    >>> rows_for(load_published(), "dual", judge="Themis-8B", perspective="global", aspect="coherence")
    """
    if benchmark not in KINDS:
        raise ValueError(f"unknown benchmark {benchmark!r}; expected one of {', '.join(KINDS)}")
    unknown = sorted(set(filters) - _FILTERABLE)
    if unknown:
        raise ValueError(
            f"unknown filter field(s) {', '.join(unknown)}; expected some of {', '.join(sorted(_FILTERABLE))}"
        )
    return [
        row
        for row in rows
        if row.benchmark == benchmark and all(getattr(row, key) == value for key, value in filters.items())
    ]
