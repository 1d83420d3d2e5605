"""`spanjudge demo`: the command; the demo itself is `demo.run_demo`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import typer
from rich.console import Console

from spanjudge.core.options import option, settings_command

demo = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@dataclass(frozen=True, kw_only=True)
class DemoSettings:
    """`spanjudge demo`'s options."""

    config: Path | None = option(
        None, help="Demo YAML (default: configs/demo/tiny.yaml; the real scale: configs/demo/thesis.yaml)."
    )
    out: Path = option(Path("runs/demo"), help="Output folder (re-running reuses everything in it).")
    data_dir: Path | None = option(None, help="Shared data folder (default $SPANJUDGE_DATA or ../shared/data).")


def demo_command(settings: DemoSettings) -> None:
    """Run the whole pipeline end to end and write one HTML report.

    \b
    Steps (each shows its progress):
      1 annotate      serve SmolLM2-135M + Gemma 3 270M with llama.cpp on
                      127.0.0.1, annotate real SummEval outputs, merge,
                      build the dataset
      2 teacher       import GPT-4's quintd-1 error spans (no model call)
      3 train         LoRA-train SmolLM2-135M on the teacher's records (CPU)
      4 score         score held-out outputs: trained judge and untrained base
      5 spans         both mark errors in held-out quintd-1 outputs, compared
                      with the human spans (quintd-1's agreement measure)
      6 meta_eval     correlate both with human scores (samples of SFRES
                      and SFHOT), beside the thesis's rows
      7 perturbation  a small DHP benchmark, rated by both
      8 publish       stage a publish dry run (card + allow-listed files)
    then OUT/report.html: timings, base vs trained side by side,
    highlighted error spans, tables, plots and the training loss; its
    path is printed at the end.

    \b
    Time: about 11 minutes on a 2-core CPU the first time (whether or not it
    computes bf16 natively: without, training runs in float32). A second run
    reuses the annotation cache, the imported records, the finished
    training run and every judgment store, and takes under a minute.
    Outputs: OUT (default runs/demo): annotate/, teacher/, train_data/,
    train/, score/, spans/, meta_eval/, perturbation/, publish/, logs/,
    demo_run.json, report.html.

    \b
    The tiny models are poor judges: the numbers mean nothing, and what
    they fail to produce is counted as unscored with its reason, never
    given an invented score. The real scale (thesis ensemble on
    Ollama/vLLM, Llama 3.1 8B LoRA on a GPU, all eight sets):
      spanjudge demo --config configs/demo/thesis.yaml --out runs/thesis
    """
    import warnings

    from .config import default_config_path
    from .run import run_demo

    warnings.filterwarnings("ignore", category=FutureWarning)  # library deprecation notes would drown the steps
    console = Console(stderr=True, soft_wrap=True)
    report = run_demo(settings.config or default_config_path(), settings.out, settings.data_dir, console)
    console.print(f"[bold]report:[/bold] {report.resolve()}")
    typer.echo(str(report.resolve()))


settings_command(demo, DemoSettings, demo_command)
