"""The demo: the whole pipeline, end to end, as a list of named steps (`spanjudge demo`).

annotate (ensemble + supervisor, on llama.cpp servers the demo starts) -> train (LoRA SFT)
-> score held-out outputs -> meta-evaluate (human-correlation sets) -> perturbation
benchmark -> publish dry run -> one HTML report. Every step calls the stage's own API and
inherits its resumption (the annotation cache, a finished training run is a no-op, score and
meta-eval stores skip what is done), so a second run redoes nothing and finishes quickly.
eval/ is the last stage, so this is the one place that may import all the others. The steps
are in `steps`, the command in `cli`; this module starts the servers, runs the steps
and writes the report.
"""

from __future__ import annotations

import contextlib
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rich.console import Console

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl, atomic_write_text
from spanjudge.core.jsonl import read_jsonl
from spanjudge.core.paths import data_dir as find_data_dir
from spanjudge.inference.backends import engine
from spanjudge.inference.backends.engine import Launched
from spanjudge.inference.backends.launched import acquire, release

from .config import ServerSpec, load_demo_config
from .layout import DemoLayout
from .report import StepRecord, render_report
from .steps import (
    DemoContext,
    NotBuiltYet,
    StepOutput,
    annotate_step,
    meta_eval_step,
    perturbation_step,
    publish_step,
    score_step,
    spans_step,
    teacher_step,
    train_step,
)


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    run: Callable[[DemoContext], StepOutput]
    needs_servers: bool = False


# ---------------------------------------------------------------------------------------
# Servers


_SERVERS: list[Launched] = []  # the llama.cpp servers the demo asked for and has not released yet


def crashed_server() -> str | None:
    """Why a server the demo started died (which one, its exit signal, the end of its log), or None."""
    return next((report for server in _SERVERS if (report := server.crash_report())), None)


@contextlib.contextmanager
def serving(specs: Sequence[ServerSpec], logs: Path, console: Console) -> Iterator[dict[str, list[str]]]:
    """Start one llama.cpp server per spec on a free port (one thread each: two servers
    spinning on two cores slow each other down), yield role -> [URL], stop them all. A server
    that dies at its first completion stops the demo here, reported as a crash."""

    served = engine("llamacpp-server")  # the engine starts its servers: the demo only names them
    assert served.launch is not None
    started: list[Launched] = _SERVERS
    try:
        endpoints: dict[str, list[str]] = {}
        for spec in specs:
            with console.status(f"starting llama.cpp with {spec.model} ({spec.alias}) on 127.0.0.1 ..."):
                options = {"gguf": spec.model, "alias": spec.alias, "n_ctx": spec.n_ctx, "n_threads": 1,
                           "log": str(logs / f"{spec.alias}.log")}  # fmt: skip
                server = acquire(served.name, served.launch, options)
                started.append(server)
            console.print(f"llama.cpp {spec.alias} at {server.base_url} (roles: {', '.join(spec.roles)})")
            endpoints.update({role: [server.base_url] for role in spec.roles})
        yield endpoints
    finally:
        for server in started:
            release(server)
        started.clear()


# ---------------------------------------------------------------------------------------
# Steps


STEPS: list[Step] = [
    Step("annotate", "annotate real SummEval outputs with the ensemble, merge, build the dataset", annotate_step, True),
    Step("teacher", "import a strong teacher's error spans from files (GPT-4 on quintd-1)", teacher_step),
    Step("train", "LoRA-train the judge (on the records `train.data` names)", train_step),
    Step("score", "score held-out outputs with the trained judge and the untrained base", score_step),
    Step("spans", "both judges mark errors in held-out quintd-1 outputs, against human spans", spans_step),
    Step("meta_eval", "meta-evaluate against human judgments", meta_eval_step),
    Step("perturbation", "build a perturbation benchmark and score the judge on it", perturbation_step, True),
    Step("publish", "stage a publish dry run (model card + allow-listed files)", publish_step),
]


# ---------------------------------------------------------------------------------------
# Orchestration


def run_step(step: Step, ctx: DemoContext) -> tuple[str, dict[str, Any], str]:
    """(summary, details, status) of one step. A server the demo started that died during the step is
    the error, whatever the step says (its requests "did not answer"): which server, its exit signal and
    the end of its log."""
    try:
        summary, details = step.run(ctx)
        status = "done"
    except NotBuiltYet as exc:
        summary, details, status = str(exc), {}, "not built"
    except SpanjudgeError as exc:
        crash = crashed_server()
        if crash is not None:
            raise SpanjudgeError(f"{step.name}: {crash} (`make demo` again resumes)") from exc
        raise
    crash = crashed_server()
    if crash is not None:
        raise SpanjudgeError(f"{step.name}: {crash} (`make demo` again resumes)")
    return summary, details, status


def run_steps(ctx: DemoContext, steps: Sequence[Step]) -> list[StepRecord]:
    """Run the steps in order; servers are up from the first step that needs them until the last."""
    records: list[StepRecord] = []
    last_server_step = max((i for i, s in enumerate(steps) if s.needs_servers), default=-1)
    with contextlib.ExitStack() as servers:
        for index, step in enumerate(steps):
            ctx.console.rule(f"[bold][{index + 1}/{len(steps)}] {step.name}[/bold]: {step.title}")
            if step.needs_servers and not ctx.endpoints and ctx.config.annotate.serve:
                ctx.endpoints = servers.enter_context(serving(ctx.config.annotate.serve, ctx.layout.logs, ctx.console))
            started = time.perf_counter()
            summary, details, status = run_step(step, ctx)
            seconds = time.perf_counter() - started
            if index == last_server_step:
                servers.close()
                ctx.endpoints = {}
            records.append(StepRecord(step.name, step.title, status, round(seconds, 1), summary, details))
            mark = "[green]✓[/green]" if status == "done" else "[yellow]–[/yellow]"
            ctx.console.print(f"{mark} {step.name} ({seconds:.1f} s): {summary}")
    return records


def _machine() -> str:
    import os

    return f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPU cores, Python {platform.python_version()}"


def run_demo(config_path: Path, out: Path, data_dir: Path | None, console: Console) -> Path:

    config = load_demo_config(config_path)
    data_root = find_data_dir(data_dir)
    layout = DemoLayout(out)
    out.mkdir(parents=True, exist_ok=True)
    ctx = DemoContext(config, config_path, layout, data_root, console)
    console.print(f"spanjudge demo: config {config_path} ({config.name}); data {data_root}; output {out}")
    started = time.perf_counter()
    records = run_steps(ctx, STEPS)
    run = {
        "config": str(config_path),
        "config_name": config.name,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "seconds": round(time.perf_counter() - started, 1),
        "steps": [asdict(r) for r in records],
    }
    earlier = _earlier_runs(layout.runs_log)
    atomic_write_jsonl(layout.runs_log, [*earlier, {k: v for k, v in run.items() if k != "steps"} | {
        "steps": {r.name: r.seconds for r in records}
    }])  # fmt: skip
    atomic_write_json(layout.run_file, run)
    with console.status("writing the HTML report ..."):
        atomic_write_text(layout.report, render_report(layout, records, run, earlier))
    return layout.report


def _earlier_runs(path: Path) -> list[dict[str, Any]]:
    return read_jsonl(path, missing_ok=True)
