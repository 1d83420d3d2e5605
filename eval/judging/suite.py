"""The meta-evaluation suite: which human-judgment sets, which aspects, which correlation
convention per set (the one the published table used), and the bootstrap settings.

A suite names sources of `configs/sources/meta_eval_sets.yaml` (the same loaders as the
annotation stage), so a set is added by editing YAML: a source there, an entry here.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.configio import configs_dir, load_yaml_model

# the suite's words for what the correlation flow computes (eval.correlation.coefficients)
Coefficient = Literal["pearson", "spearman", "kendall"]
Level = Literal["global", "input", "item"]
KendallVariant = Literal["b", "c"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AspectSpec(_Strict):
    name: str = Field(description="The column name in reports (the published table's).")
    human: str = Field(
        description="Where the human score is in a source row: a dotted path (scores.coherence), a CSV "
        "column, or `qags_majority` (sentence-level majority vote of the raw QAGS workers, mean over sentences)."
    )
    judge: str | None = Field(default=None, description="The catalog aspect the judge is asked about (default: name).")

    @property
    def judge_aspect(self) -> str:
        return self.judge or self.name


class References(_Strict):
    """Where reference texts come from, for reference-based baselines (ROUGE, BLEU...)."""

    field: str | None = Field(default=None, description="A row field holding one reference or a list.")
    system: str | None = Field(default=None, description="The output of this system on the same input.")
    file: str | None = Field(
        default=None, description="A JSON list aligned with the source rows by position ($DATA/... allowed)."
    )
    file_field: str = "reference"
    input: str | None = Field(
        default=None,
        description="An input of the item, by its header (e.g. Article): QAGS' ROUGE rows score the summary "
        "against the article, Wiki-DA's against the source sentence.",
    )

    @model_validator(mode="after")
    def _one_kind(self) -> References:
        if sum(v is not None for v in (self.field, self.system, self.file, self.input)) != 1:
            raise ValueError("give exactly one of field, system, file, input")
        return self


class DatasetSpec(_Strict):
    name: str = Field(description="A source name in the sources file.")
    title: str = Field(default="", description="Shown in reports (default: name).")
    tables: tuple[str, ...] = Field(default=(), description="Ids of the published tables this set reproduces.")
    level: Level = Field(description="Correlation level the published table used (thesis eqs. 2.14-2.16).")
    coefficients: tuple[Coefficient, ...] = ("pearson", "spearman", "kendall")
    convention: str = Field(default="", description="Why this level: who published the table, how they computed it.")
    aspects: tuple[AspectSpec, ...] = Field(min_length=1)
    references: References | None = None
    baselines: dict[str, str] = Field(
        default_factory=dict,
        description="Published baseline row -> the `metric:` judge that computes it the published way on this "
        "set (with the set's references, level and coefficients), e.g. ROUGE-1: metric:rouge1+stem.",
    )

    @property
    def label(self) -> str:
        return self.title or self.name


class BootstrapSpec(_Strict):
    resamples: int = Field(default=1000, ge=0, description="0 turns intervals off.")
    confidence: float = Field(default=0.95, gt=0, lt=1)
    seed: int = 0


class SuiteConfig(_Strict):
    name: str
    description: str = ""
    sources: str = Field(
        default="sources/meta_eval_sets.yaml",
        description="Sources YAML; a relative path is relative to the built-in configs/ folder.",
    )
    reference_tables: str | None = Field(
        default="eval/reference_tables.yaml", description="Published numbers (relative to configs/)."
    )
    kendall_variant: KendallVariant = "b"
    bootstrap: BootstrapSpec = BootstrapSpec()
    datasets: tuple[DatasetSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_unique(self) -> SuiteConfig:
        names = [d.name for d in self.datasets]
        if len(set(names)) != len(names):
            raise ValueError(f"dataset names repeat: {names}")
        return self

    def dataset(self, name: str) -> DatasetSpec:
        for spec in self.datasets:
            if spec.name == name:
                return spec
        raise KeyError(name)


def resolve_config_path(value: str, suite_path: Path) -> Path:
    """Absolute as given; else next to the suite file if it exists there; else in configs/."""
    path = Path(value).expanduser()
    if path.is_absolute():
        return path
    beside = suite_path.parent / path
    return beside if beside.exists() else configs_dir() / path


def load_suite(path: Path) -> SuiteConfig:
    return load_yaml_model(SuiteConfig, path)
