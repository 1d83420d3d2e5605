"""Typed configs of the annotation stage: the ensemble (who annotates, who merges, how) and
the sources (what is annotated). Both are YAML files validated with one-line errors."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.configio import load_yaml_model
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.core.keyvalue import parse_endpoints as parse_endpoint_options  # noqa: F401  # the commands' --endpoint
from spanjudge.inference.backends.base import SamplingParams
from spanjudge.inference.backends.spec import BackendSpec

from .vote import MergeRule

ENDPOINT_ENV_PREFIX = "SPANJUDGE_ENDPOINT_"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelRole(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="Short name in stats and provenance.")
    backend: BackendSpec


class ParseRetry(_Strict):
    """Thesis §3.2.2: an unparseable reply is retried with light sampling, then recorded."""

    attempts: int = Field(default=2, ge=0)
    temperature: float = Field(default=0.3, ge=0)
    top_p: float = Field(default=0.95, gt=0, le=1)


class FieldLimits(_Strict):
    """Longest Location / Explanation a reply may carry. A model that rambles (or pads a
    parseable reply to 50 KB) would otherwise put the ramble into train.jsonl as an
    explanation. `reject` treats such a reply as unparseable (retried with light sampling,
    then recorded); `cap` cuts the field to the limit. stats.json counts both."""

    location: int = Field(default=1000, ge=1, description="Characters of one error's Location.")
    explanation: int = Field(default=1000, ge=1, description="Characters of one error's Explanation.")
    too_long: Literal["reject", "cap"] = "reject"


class EnsembleConfig(_Strict):
    name: str
    description: str = ""
    definitions: dict[str, Any] = Field(default_factory=dict, description="Free space for YAML anchors.")
    annotators: tuple[ModelRole, ...] = Field(min_length=1)
    supervisor: ModelRole | None = Field(default=None, description="The LLM that merges (merge method supervisor).")
    merge: MergeRule = Field(
        default=MergeRule(),
        description="How the annotators' errors become one set: the supervisor LLM's merge (default) or "
        "{method: vote, min_votes: K, extent: union|majority|shortest} (data_gen/vote.py; no model call).",
    )
    sampling: SamplingParams = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=1024, seed=0)
    supervisor_sampling: SamplingParams = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=1024, seed=0)
    parse_retry: ParseRetry = ParseRetry()
    field_limits: FieldLimits = FieldLimits()
    min_annotators: int = Field(
        default=1,
        ge=1,
        description="Annotators that must answer an item for it to become a record (default 1: one member never "
        "stops the ensemble; an item is merged from the annotators that answered, and its provenance names the "
        "others and why they did not). An item with fewer answers is incomplete: a re-run asks again.",
    )
    one_model_at_a_time: bool = Field(
        default=False,
        description="Annotators that share a server run one after another, each through all its prompts, "
        "instead of side by side: for an Ollama host that holds one big model at a time (side by side it "
        "would swap models on every request). Their ollama backends get options.keep_alive 30m unless set.",
    )

    @model_validator(mode="after")
    def _names_unique(self) -> EnsembleConfig:
        names = [a.name for a in self.annotators]
        if len(set(names)) != len(names):
            raise ValueError(f"annotator names repeat: {names}")
        if self.min_annotators > len(self.annotators):
            raise ValueError(f"min_annotators ({self.min_annotators}) exceeds the {len(self.annotators)} annotators")
        if self.merge.method == "supervisor" and self.supervisor is None:
            raise ValueError("merge method 'supervisor' needs a `supervisor:` model (or merge: {method: vote, ...})")
        if self.merge.method == "vote" and self.supervisor is not None:
            raise ValueError("merge method 'vote' calls no model: leave `supervisor:` out")
        if self.merge.min_votes > len(self.annotators):
            raise ValueError(f"merge.min_votes ({self.merge.min_votes}) exceeds the {len(self.annotators)} annotators")
        return self

    @property
    def roles(self) -> tuple[ModelRole, ...]:
        """Every model the ensemble calls: the annotators, then the supervisor where it merges."""
        return (*self.annotators, *([self.supervisor] if self.supervisor is not None else []))

    def with_endpoints(self, overrides: Mapping[str, Sequence[str]]) -> EnsembleConfig:
        """Point roles at other servers: {role name: [url, ...]} (a test, a cluster, ...)."""
        roles = {r.name: r for r in self.roles}
        unknown = sorted(set(overrides) - set(roles))
        if unknown:
            raise InputError(f"endpoint override for unknown model '{unknown[0]}'; models: {', '.join(roles)}")

        def swap(role: ModelRole) -> ModelRole:
            urls = overrides.get(role.name)
            if not urls:
                return role
            return role.model_copy(update={"backend": role.backend.model_copy(update={"endpoints": tuple(urls)})})

        supervisor = None if self.supervisor is None else swap(self.supervisor)
        return self.model_copy(update={"annotators": tuple(swap(a) for a in self.annotators), "supervisor": supervisor})


def env_endpoint_overrides(names: Sequence[str], environ: Mapping[str, str] = os.environ) -> dict[str, list[str]]:
    """SPANJUDGE_ENDPOINT_<NAME>=url[,url...] for each role (name upper-cased, - and . as _)."""
    found = {}
    for name in names:
        value = environ.get(ENDPOINT_ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", name).upper())
        if value:
            found[name] = [url.strip() for url in value.split(",") if url.strip()]
    return found


def load_ensemble(path: Path, endpoint_overrides: Mapping[str, Sequence[str]] | None = None) -> EnsembleConfig:
    ensemble = load_yaml_model(EnsembleConfig, path)
    roles = [r.name for r in ensemble.roles]
    merged = env_endpoint_overrides(roles) | dict(endpoint_overrides or {})
    return ensemble.with_endpoints(merged) if merged else ensemble


# ---------------------------------------------------------------------------------------
# Sources


SourceFormat = Literal["jsonl", "json", "csv", "hf", "summeval", "openlgauge", "qags_mturk"]


class FieldMap(_Strict):
    """Where each part of an example is in a source row (dotted paths into nested JSON)."""

    input_id: str | None = Field(default=None, description="Default: a hash of the inputs.")
    system: str | None = Field(default=None, description="Default: the source's `system` value.")
    output: str | None = None
    inputs: dict[str, str] = Field(default_factory=dict, description="header -> field")
    inputs_from: str | None = Field(default=None, description="A field holding {header: text} (OpeNLGauge files).")
    output_from: str | None = Field(default=None, description="A field holding {header: text} with one entry.")


class SourceSpec(_Strict):
    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$", description="The dataset name in records.")
    format: SourceFormat
    path: str = Field(
        description="File or folder; `$DATA/...` is inside the shared data folder, "
        "other relative paths are relative to this YAML file."
    )
    task: str = Field(description="Task id from the catalog (`spanjudge tasks`).")
    aspects: tuple[str, ...] = Field(default=(), description="Default: all aspects of the task.")
    system: str = Field(default="unknown", description="System name when rows do not carry one.")
    split: str = Field(default="train", description="hf only: the split to read.")
    fields: FieldMap = FieldMap()
    limit_inputs: int | None = Field(default=None, ge=1, description="Use only the first N distinct inputs.")
    n_systems: int | None = Field(default=None, ge=1)
    n_aspects: int | None = Field(default=None, ge=1)
    max_chars: int = Field(default=20000, ge=1, description="Longer inputs/outputs are skipped and reported.")


class SourcesConfig(_Strict):
    seed: int = 0
    n_systems: int = Field(default=4, ge=1, description="Systems sampled per input (thesis: 4).")
    n_aspects: int = Field(default=3, ge=1, description="Aspects sampled per (input, output) (thesis: 3).")
    validation_fraction: float = Field(default=0.05, ge=0, lt=1, description="Thesis: 5%, no shared input.")
    sources: tuple[SourceSpec, ...] = Field(min_length=1)

    @model_validator(mode="after")
    def _names_unique(self) -> SourcesConfig:
        names = [s.name for s in self.sources]
        if len(set(names)) != len(names):
            raise ValueError(f"source names repeat: {names}")
        return self


def load_sources(path: Path) -> SourcesConfig:
    return load_yaml_model(SourcesConfig, path)


def resolve_source_path(spec: SourceSpec, config_path: Path, data_root: Path | None) -> Path:
    if spec.path.startswith("$DATA/"):
        if data_root is None:
            raise ConfigError(config_path, f"sources.{spec.name}.path", "uses $DATA but no data folder was found")
        return data_root / spec.path.removeprefix("$DATA/")
    path = Path(spec.path).expanduser()
    return path if path.is_absolute() else (config_path.parent / path)
