"""The demo's config: which ensemble annotates which sources, how the judge is trained, how
much is scored and meta-evaluated, and what is staged for publishing.

`configs/demo/tiny.yaml` is the default (the PyPI-shipped tiny models on a 2-core CPU, a
few minutes); `configs/demo/thesis.yaml` is the real scale (the thesis ensemble on
Ollama/vLLM, Llama 3.1 8B on a GPU). Paths are relative to the built-in `configs/` folder
unless a file of that name sits beside the demo YAML. A mistake is one line naming the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from spanjudge.core.configio import configs_dir, load_yaml_model
from spanjudge.eval.perturb.registry import KindName

DEFAULT_CONFIG = "demo/tiny.yaml"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ServerSpec(_Strict):
    """A llama.cpp server the demo starts on a free 127.0.0.1 port, and the ensemble roles it serves."""

    model: str = Field(description="@smollm2, @gemma3 or a .gguf file")
    alias: str = Field(min_length=1, description="the model name the server answers to")
    roles: tuple[str, ...] = Field(min_length=1, description="ensemble roles pointed at this server")
    n_ctx: int = Field(default=4096, gt=0)


class AnnotateSection(_Strict):
    ensemble: str = Field(description="ensemble YAML (configs/ensemble/...)")
    sources: str = Field(description="sources YAML (configs/sources/...)")
    limit_inputs: int | None = Field(default=None, ge=1, description="annotate only the first N inputs of each source")
    serve: tuple[ServerSpec, ...] = Field(
        default=(), description="llama.cpp servers to start; empty = the ensemble's own endpoints (yours to run)"
    )


class TeacherSection(_Strict):
    config: str = Field(description="import YAML (configs/import/...): teacher records read from files, no model call")
    limit: int | None = Field(default=None, ge=1, description="train on the first N imported records only")


class CompareSection(_Strict):
    """The untrained base beside the trained judge, on the same items with the same settings (the
    base held to the output contract's grammar, which it never writes unaided)."""

    base: bool = Field(
        default=True,
        description="also judge every item with the untrained base model, held to the contract's grammar",
    )
    span_tables: tuple[int, int] | None = Field(
        default=None,
        description="[first, stop) held-out quintd-1 tables whose outputs both judges rate against the human spans",
    )
    span_domains: tuple[str, ...] = ("wikidata",)


class TrainSection(_Strict):
    config: str = Field(description="training YAML (configs/train/...); data and output_dir are set by the demo")
    data: Literal["ensemble", "teacher", "both"] = Field(
        default="ensemble", description="train on the ensemble's records, the imported teacher's, or both"
    )
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted key -> value, as `--set`")


class ScoreSection(_Strict):
    held_out: int = Field(ge=1, description="outputs of inputs after the annotated ones, scored by the judge")
    max_new_tokens: int = Field(default=1536, ge=16)
    batch_size: int = Field(default=8, ge=1)
    retries: int = Field(default=3, ge=0, description="sampled retries of a reply that does not parse")


class MetaEvalSection(_Strict):
    suite: str = Field(description="meta-evaluation suite (configs/eval/...)")
    datasets: tuple[str, ...] = Field(default=(), description="sets of the suite; empty = all")
    max_items: int | None = Field(
        default=None,
        ge=1,
        description="at most N items of each set: a seeded sample of whole inputs (all their systems)",
    )
    resamples: int | None = Field(default=None, ge=0, description="bootstrap resamples (default: the suite's)")
    baselines: tuple[str, ...] = Field(default=(), description="more judges beside the distilled one, e.g. metric:bleu")
    judge_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Judge.from_pretrained options for the distilled judge"
    )


class PerturbSection(_Strict):
    benchmark: KindName = Field(description="what `spanjudge perturb` builds (a name of perturb.registry.KINDS)")
    source: str = Field(default="summeval", description="summeval, or topical_chat for dual / prompt")
    n: int | None = Field(default=None, ge=1, description="source texts to sample (default: all)")
    perturbations: tuple[str, ...] = Field(default=(), description="perturbation keys; empty = the benchmark's all")
    aspects: tuple[str, ...] = Field(default=(), description="dhp / attacks: aspects to rate; empty = all")
    perturber: str | None = Field(
        default=None, description="model for LLM-made perturbations (configs/perturb/...); served by the demo if local"
    )
    judge_options: dict[str, str | int | float | bool] = Field(
        default_factory=dict, description="Judge.from_pretrained options for the distilled judge"
    )


class PublishSection(_Strict):
    repo_id: str = Field(pattern=r"^[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*$", description="owner/name for the card")
    license: str = "other"


class DemoConfig(_Strict):
    name: str
    description: str = ""
    annotate: AnnotateSection
    teacher: TeacherSection | None = None
    train: TrainSection
    compare: CompareSection = CompareSection()
    score: ScoreSection
    meta_eval: MetaEvalSection
    perturbation: PerturbSection | None = None
    publish: PublishSection

    @model_validator(mode="after")
    def _teacher_when_trained_on(self) -> DemoConfig:
        if self.train.data != "ensemble" and self.teacher is None:
            raise ValueError(f"train.data is '{self.train.data}' but the config has no teacher section")
        return self

    @model_validator(mode="after")
    def _roles_served_once(self) -> DemoConfig:
        roles = [role for server in self.annotate.serve for role in server.roles]
        if len(set(roles)) != len(roles):
            raise ValueError(f"annotate.serve: a role is served twice ({roles})")
        return self


def default_config_path() -> Path:
    return configs_dir() / DEFAULT_CONFIG


def load_demo_config(path: Path) -> DemoConfig:
    return load_yaml_model(DemoConfig, path)
