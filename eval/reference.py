"""Published correlations (thesis Tables 5.1-5.8) from `configs/eval/reference_tables.yaml`,
looked up by (dataset, aspect, coefficient) so reports can put them beside measured rows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.inference.configio import load_yaml_model


class ReferenceTable(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str
    caption: str
    level: str
    note: str = ""
    columns: tuple[str, ...] = Field(min_length=1, description='"dataset|aspect|coefficient" per column')
    rows: dict[str, tuple[float | None, ...]]

    @model_validator(mode="after")
    def _shapes(self) -> ReferenceTable:
        for column in self.columns:
            if column.count("|") != 2:
                raise ValueError(f"column {column!r} must be 'dataset|aspect|coefficient'")
        for name, values in self.rows.items():
            if len(values) != len(self.columns):
                raise ValueError(f"row {name!r} has {len(values)} values for {len(self.columns)} columns")
        return self


class ReferenceTables(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    source: str
    tables: tuple[ReferenceTable, ...]


@dataclass(frozen=True)
class Published:
    table: str
    row: str  # metric name as printed, e.g. "ROUGE-1", "Ensemble", "Llama-FT"
    value: float


class ReferenceIndex:
    def __init__(self, tables: ReferenceTables) -> None:
        self.tables = tables
        self._cells: dict[tuple[str, str, str], list[Published]] = {}
        for table in tables.tables:
            for position, column in enumerate(table.columns):
                dataset, aspect, coefficient = column.split("|")
                for row, values in table.rows.items():
                    value = values[position]
                    if value is not None:
                        self._cells.setdefault((dataset, aspect, coefficient), []).append(
                            Published(table.id, row, value)
                        )

    def lookup(self, dataset: str, aspect: str, coefficient: str) -> list[Published]:
        return list(self._cells.get((dataset, aspect, coefficient), []))

    def rows_for(self, dataset: str) -> list[str]:
        """Row names with at least one value for `dataset`, in table order."""
        seen: dict[str, None] = {}
        for table in self.tables.tables:
            if any(c.split("|")[0] == dataset for c in table.columns):
                seen.update(dict.fromkeys(table.rows))
        return list(seen)


def load_reference_tables(path: Path) -> ReferenceIndex:
    return ReferenceIndex(load_yaml_model(ReferenceTables, path))
