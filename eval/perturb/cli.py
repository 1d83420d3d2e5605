"""`spanjudge perturb` builds a perturbation benchmark (`build_folder`); `spanjudge meta-eval
--benchmark DIR` scores judges on it (`evaluate.evaluate_benchmark`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer
from pydantic import BaseModel, ConfigDict

from spanjudge.core.configio import load_yaml_model
from spanjudge.core.errors import InputError
from spanjudge.core.keyvalue import endpoint_urls
from spanjudge.core.options import option, settings_command
from spanjudge.core.progress import labelled_bars
from spanjudge.eval.perturb.benchmark import write_benchmark
from spanjudge.eval.perturb.build import BuildRequest
from spanjudge.eval.perturb.kind import all_kinds, build_request
from spanjudge.eval.perturb.llm_perturb import LLMPerturber
from spanjudge.eval.perturb.registry import KINDS
from spanjudge.inference.backends import BackendSpec, SamplingParams

if TYPE_CHECKING:
    from spanjudge.eval.perturb.benchmark import Benchmark
    from spanjudge.eval.perturb.build import BuildRequest

perturb = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


class PerturberConfig(BaseModel):
    """configs/perturb/<name>.yaml: the model that makes the LLM perturbations."""

    model_config = ConfigDict(extra="forbid")
    description: str = ""
    backend: BackendSpec
    sampling: SamplingParams = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=1024)


def open_perturber(config_path: Path, store: Path, endpoints: Sequence[str] = ()) -> tuple[Any, dict[str, Any]]:
    """The LLMPerturber a perturber YAML names (optionally on other servers: `--endpoint`
    items, NAME=URL[,URL...] with NAME its backend's model) and its description for the
    benchmark manifest."""

    config = load_yaml_model(PerturberConfig, config_path)
    spec = config.backend
    if endpoints:
        spec = spec.model_copy(update={"endpoints": endpoint_urls(endpoints, spec.model)})
    info = {"model": spec.model, "kind": spec.kind, "config": config_path.name, **config.sampling.model_dump()}
    return LLMPerturber(spec, store, sampling=config.sampling), info


def _command_help() -> str:
    """The command's help: what it does, then each registered kind's one-line summary."""

    kinds = "\n\n".join(f"{kind.name} ({', '.join(kind.sources)}): {kind.summary}." for kind in all_kinds())
    return (
        "Build a perturbation benchmark from our source data (docs/research/benchmarks.md; seeds 000-003).\n\n"
        f"{kinds}\n\n"
        "Rule-based perturbations run here; LLM-made ones need --perturber and are frozen in OUT/frozen.jsonl "
        "with provenance, so a rebuild makes no model call. Rejected perturbations are counted by reason and "
        "printed. Score a judge on the result with `spanjudge meta-eval --benchmark OUT --judge ... --out REPORT`."
    )


@dataclass(frozen=True, kw_only=True)
class PerturbSettings:
    """`spanjudge perturb`'s options."""

    benchmark: str = option(help=" | ".join(KINDS))
    source: str = option(help="The dataset to build from (each kind lists its own).")
    out: Path = option(help="Benchmark folder (created; re-running reuses frozen LLM texts).")
    n: int | None = option(None, min=1, help="Sample this many source texts (seeded; default: all).")
    seed: int = option(0, help="Seed of the sample and of every perturbation.")
    perturbation: list[str] = option(
        [], help="Only these perturbation keys (repeatable; default: the benchmark's all)."
    )
    perturber: Path | None = option(
        None, help="YAML naming the model for LLM-made perturbations (configs/perturb/tiny_local.yaml, thesis.yaml)."
    )
    endpoint: list[str] = option(
        [],
        help="Point the perturber at other servers: NAME=URL[,URL...] with NAME the model its YAML names "
        "(repeatable; a bare URL still works but is deprecated).",
    )
    steps: int | None = option(None, min=1, help="dual: errors injected per chain (default: scale size - 1).")
    aspect: list[str] = option([], help="dhp, attacks: rate only these aspects (repeatable; default: all of them).")
    data_dir: Path | None = option(None, help="Shared data folder (default ../shared/data or $SPANJUDGE_DATA).")


def perturb_command(settings: PerturbSettings) -> None:

    s = settings
    request = BuildRequest(s.source, s.data_dir, s.n, s.seed, s.perturbation or None, None, s.steps, s.aspect or None)
    built, summary = build_folder(s.benchmark, request, s.out, s.perturber, s.endpoint)
    _print_built(built, s.out, summary)


settings_command(perturb, PerturbSettings, perturb_command, help=_command_help())


def build_folder(
    kind: str, request: BuildRequest, out: Path, perturber: Path | None = None, endpoints: Sequence[str] = ()
) -> tuple[Benchmark, str | None]:
    """Build the benchmark `kind` (a `build.BuildRequest` without llm and progress) into `out`;
    LLM-made texts come from the model `perturber` names, frozen in out/frozen.jsonl. Returns
    the benchmark and the perturber's summary (None without one)."""
    from dataclasses import replace

    if kind not in KINDS:
        raise InputError(f"--benchmark must be one of {', '.join(KINDS)}, got {kind!r}")
    llm, info = open_perturber(perturber, out / "frozen.jsonl", endpoints) if perturber else (None, {})
    try:
        with labelled_bars() as progress:
            built = build_request(kind, replace(request, llm=llm, progress=progress), info)
    finally:
        if llm is not None:
            llm.close()
    write_benchmark(built, out)
    return built, str(llm.summary) if llm is not None else None


def _print_built(built: Benchmark, out: Path, summary: str | None) -> None:
    from rich.console import Console

    console = Console(stderr=True, soft_wrap=True)  # counts stay on one line, for logs and greps
    made = sum(built.info["made"].values())
    rejected = sum(sum(r.values()) for r in built.info["rejected"].values())
    console.print(f"{built.name}: {len(built.items)} texts in {out} ({made} perturbed, {rejected} rejected)")
    for key, reasons in built.info["rejected"].items():
        console.print(f"[yellow]  rejected {key}:[/yellow] " + ", ".join(f"{r} {c}" for r, c in reasons.items()))
    if summary is not None:
        console.print(f"LLM perturbations: {summary}")
