"""Published correlations (thesis Tables 5.1-5.8) from `configs/eval/reference_tables.yaml`,
looked up by (dataset, aspect, coefficient) so reports can put them beside measured rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.configio import load_yaml_model


class CopiedRows(BaseModel):
    """Rows a table copied from another paper whose columns stand in another order than the
    table's heads: their values are placed by `columns` (the source's order), not by the heads."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rows: tuple[str, ...] = Field(min_length=1)
    columns: tuple[str, ...] = Field(min_length=1, description='"dataset|aspect|coefficient" in the source order')
    note: str = Field(min_length=1, description="Printed in reports: whose order, and why.")


class ReferenceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    caption: str
    level: str
    note: str = ""
    columns: tuple[str, ...] = Field(min_length=1, description='"dataset|aspect|coefficient" per column')
    rows: dict[str, tuple[float | None, ...]]
    copied: CopiedRows | None = None
    measured_as: dict[str, str] = Field(
        default_factory=dict,
        description="Published row -> the measured judge computed the same way (e.g. ROUGE-1 -> "
        "metric:rouge1-recall). Only these pairs are compared as 'the same metric'.",
    )

    @model_validator(mode="after")
    def _shapes(self) -> ReferenceTable:
        for column in self.columns + (self.copied.columns if self.copied else ()):
            if column.count("|") != 2:
                raise ValueError(f"column {column!r} must be 'dataset|aspect|coefficient'")
        for name, values in self.rows.items():
            if len(values) != len(self.columns):
                raise ValueError(f"row {name!r} has {len(values)} values for {len(self.columns)} columns")
        if self.copied is not None:
            if sorted(self.copied.columns) != sorted(self.columns):
                raise ValueError("copied.columns must list the table's columns, in the source's order")
            unknown = [r for r in self.copied.rows if r not in self.rows]
            if unknown:
                raise ValueError(f"copied row {unknown[0]!r} is not a row of the table")
        unknown = [r for r in self.measured_as if r not in self.rows]
        if unknown:
            raise ValueError(f"measured_as row {unknown[0]!r} is not a row of the table")
        return self

    def columns_of(self, row: str) -> tuple[str, ...]:
        """Where `row`'s values belong: the source's order for copied rows, else the heads."""
        if self.copied is not None and row in self.copied.rows:
            return self.copied.columns
        return self.columns


class ReferenceTables(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    tables: tuple[ReferenceTable, ...]


@dataclass(frozen=True)
class Published:
    table: str
    row: str  # metric name as printed, e.g. "ROUGE-1", "Ensemble", "Llama-FT"
    value: float
    measured_as: str | None = None  # the measured judge computed the same way, if the table says


class ReferenceIndex:
    def __init__(self, tables: ReferenceTables) -> None:
        self.tables = tables
        self._cells: dict[tuple[str, str, str], list[Published]] = {}
        for table in tables.tables:
            for row, values in table.rows.items():
                for column, value in zip(table.columns_of(row), values, strict=True):
                    if value is not None:
                        dataset, aspect, coefficient = column.split("|")
                        self._cells.setdefault((dataset, aspect, coefficient), []).append(
                            Published(table.id, row, value, table.measured_as.get(row))
                        )

    def lookup(self, dataset: str, aspect: str, coefficient: str) -> list[Published]:
        return list(self._cells.get((dataset, aspect, coefficient), []))

    def same_metric(self, judge: str, dataset: str, aspect: str, coefficient: str) -> Published | None:
        """The published value of a row computed the way `judge` computes, if a table says so.

        Name alone is not enough: HANNA's "ROUGE-1" is recall, `metric:rouge1` is F1."""
        wanted = judge.lower()  # metric names are case-insensitive (rougeL = rougel)
        found = self.lookup(dataset, aspect, coefficient)
        return next((p for p in found if p.measured_as is not None and p.measured_as.lower() == wanted), None)

    def copied_notes(self, dataset: str) -> list[str]:
        """Notes of tables on `dataset` whose copied rows are placed by the source's column order."""
        return [
            f"Table {t.id}: {t.copied.note}"
            for t in self.tables.tables
            if t.copied is not None and any(c.split("|")[0] == dataset for c in t.columns)
        ]

    def rows_for(self, dataset: str) -> list[str]:
        """Row names with at least one value for `dataset`, in table order."""
        seen: dict[str, None] = {}
        for table in self.tables.tables:
            if any(c.split("|")[0] == dataset for c in table.columns):
                seen.update(dict.fromkeys(table.rows))
        return list(seen)


def load_reference_tables(path: Path) -> ReferenceIndex:
    return ReferenceIndex(load_yaml_model(ReferenceTables, path))
