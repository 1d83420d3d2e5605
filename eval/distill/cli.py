"""`spanjudge distill`: the distillation study (docs/research/distillation.md) as a command. Its options are the
study's settings (`study.StudySettings`, declared once) and where its results go; it calls `stage.run_study`, or
`stage.recompute_study` with `--recompute`."""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

import typer

from spanjudge.core.options import option, settings_command

from .study import StudySettings

distill = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@dataclass(frozen=True, kw_only=True)
class DistillSettings(StudySettings):
    """The study's settings, and where the protocol keeps what it finds."""

    results: Path = option(
        Path("bench/results/distill_quintd"), help="The results (.json rows per judge and run, .md report)."
    )
    kept: Path = option(Path("bench/results/distill_judgments"), help="Every run's judgments, compressed.")
    recompute: bool = option(
        False,
        help="No model: recompute the rows of the protocol's runs (all, or those --only names) from their kept "
        "judgments, with the decisions fitted on each run's dev judgments.",
    )
    only: list[str] = option([], help="With --recompute: only these runs (repeatable label).")


def distill_command(settings: DistillSettings) -> None:
    """Does distillation work? A teacher's quintd-1 error spans teach a small student, which then judges a
    held-out split against the humans' spans.

    The phases: import the teacher's spans on the training tables as records (no model call); train a LoRA on
    the student (Gemma 3 270M, or SmolLM2-135M); judge the held-out outputs (greedy, one sampled retry, the
    probabilities read along each reply; on the test split the untrained base too); compare with the human
    spans, beside the teacher and the mark-every-number baseline, per domain and pooled, with bootstrap
    intervals over inputs.

    Every choice is made on the dev split (tables 70-79); the test split (80-99) is judged once per seed of a
    finished recipe (--split test) and chooses nothing. A killed run resumes where it stopped, and a finished
    phase is reused only for the same settings. Run it in the checkout; bench/distill_protocol.sh runs the
    protocol's runs in order.
    """

    from .stage import recompute_study, run_study

    if settings.recompute:
        done = recompute_study(list(settings.only), results=settings.results, kept=settings.kept)
        typer.echo(f"recomputed: {', '.join(done) or 'nothing'}; {settings.results.with_suffix('.md')}")
        return
    study = StudySettings(**{f.name: getattr(settings, f.name) for f in fields(StudySettings)})
    run = run_study(study, results=settings.results, kept=settings.kept)
    typer.echo(run.report.read_text())


settings_command(distill, DistillSettings, distill_command)
