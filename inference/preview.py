"""`spanjudge demo` for what exists so far: real SummEval summaries annotated by a real
local model (SmolLM2-135M on llama.cpp), parsed and anchored by the output contract.

The full pipeline demo (ensemble -> training -> scoring -> meta-evaluation -> publish)
replaces this once those stages exist; until then it exercises every piece that does,
on real data and a real model, and says plainly what is not there yet.
"""

from __future__ import annotations

import json
import time
from itertools import islice
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from .catalog import load_catalog
from .contract import AnnotatorEvaluation, ParseFailure, anchor_errors, parse_annotator, render_judge
from .errors import InputError
from .fileio import atomic_write_json
from .llamacpp import LlamaCppServer, smollm2_gguf
from .paths import data_dir
from .prompts import render_annotator_prompt

demo = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


def read_summeval(root: Path, first: int, count: int) -> list[dict[str, Any]]:
    path = root / "meta_eval" / "summeval" / "summeval.jsonl"
    try:
        with path.open(encoding="utf-8") as lines:
            chosen = list(islice(lines, first, first + count))
    except OSError as exc:
        raise InputError(f"{path}: cannot read SummEval ({exc})") from None
    records = []
    for number, line in enumerate(chosen, start=first + 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
    if len(records) < count:
        raise InputError(f"{path}: has fewer than {first + count} lines")
    return records


@demo.command()
def demo_command(
    out: Annotated[Path, typer.Option("--out", help="Folder for the demo's result file.")] = Path("runs/demo"),
    data: Annotated[
        Path | None,
        typer.Option("--data-dir", help="Shared data folder (default: $SPANJUDGE_DATA or ../shared/data)."),
    ] = None,
    first: Annotated[int, typer.Option("--first", min=0, help="First SummEval line to annotate.")] = 0,
    items: Annotated[int, typer.Option("--items", min=1, help="How many summaries to annotate.")] = 3,
    aspect_name: Annotated[str, typer.Option("--aspect", help="SummEval aspect to annotate.")] = "consistency",
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=16, help="Reply length limit.")] = 400,
) -> None:
    """Annotate real SummEval summaries with a real local LLM and show the parsed, anchored result."""
    from openai import OpenAI

    console = Console()
    catalog = load_catalog()
    task = catalog.task("summeval")
    aspect = task.aspect(aspect_name)
    records = read_summeval(data_dir(data), first, items)
    console.print(
        f"catalog: {len(catalog.training_tasks())} training tasks, {len(catalog.tasks)} in all; "
        f"data: {len(records)} SummEval summaries; aspect: {aspect.name}"
    )
    with console.status("starting llama.cpp with SmolLM2-135M-Instruct on 127.0.0.1 ..."):
        server = LlamaCppServer(smollm2_gguf(), alias="smollm2").start()
    results = []
    try:
        client = OpenAI(base_url=server.base_url, api_key="not-needed", max_retries=0, timeout=300)
        with Progress(console=console, transient=True) as progress:
            bar = progress.add_task("annotating", total=len(records))
            for record in records:
                prompt = render_annotator_prompt(task, aspect, {"Article": record["source"]}, record["system_output"])
                started = time.monotonic()
                reply = client.chat.completions.create(
                    model="smollm2",
                    messages=[{"role": "user", "content": prompt}],
                    temperature=0.0,
                    top_p=1.0,
                    max_tokens=max_tokens,
                    seed=0,
                )
                text = reply.choices[0].message.content or ""
                results.append(_result(record, aspect.name, text, time.monotonic() - started))
                progress.advance(bar)
    finally:
        server.stop()

    for result, record in zip(results, records, strict=True):
        _show(console, result, record["system_output"])
    unscored = [r for r in results if "parse_failure" in r]
    console.print(f"parsed {len(results) - len(unscored)} of {len(results)}; unscored {len(unscored)}")
    atomic_write_json(out / "preview.json", results)
    console.print(f"results written to {out / 'preview.json'}")
    console.print(
        "Not built yet: ensemble annotation, training, the distilled scorer, meta-evaluation and "
        "publishing (`spanjudge --help` lists them); this demo grows with them."
    )


def _result(record: dict[str, Any], aspect: str, reply: str, seconds: float) -> dict[str, Any]:
    result: dict[str, Any] = {
        "dataset": "summeval",
        "doc_id": record["doc_id"],
        "system": record["system_id"],
        "aspect": aspect,
        "human_score": record["scores"].get(aspect),
        "model": "SmolLM2-135M-Instruct.Q4_1 (llama.cpp)",
        "seconds": round(seconds, 2),
        "reply": reply,
    }
    parsed = parse_annotator(reply)
    if isinstance(parsed, ParseFailure):
        result["parse_failure"] = parsed.reason
        return result
    result.update(_evaluation(parsed, record["system_output"]))
    return result


def _evaluation(parsed: AnnotatorEvaluation, output: str) -> dict[str, Any]:
    evaluation = parsed.to_evaluation()
    evaluation = evaluation.model_copy(update={"errors": anchor_errors(evaluation.errors, output)})
    return {
        "label": parsed.label.text,
        "evaluation": evaluation.model_dump(),
        "unanchored": evaluation.unanchored_count,
        "judge_target": render_judge(evaluation),
    }


def _show(console: Console, result: dict[str, Any], output: str) -> None:
    title = f"{result['doc_id'][:20]}… / {result['system']} (human {result['human_score']:.2f}/5)"
    if "parse_failure" in result:
        console.print(f"{title}: [yellow]unscored[/yellow] — {result['parse_failure']}")
        return
    evaluation = result["evaluation"]
    table = Table(title=f"{title}: {result['label']} → {evaluation['score']:g}/100")
    for column in ("location", "offsets", "anchor", "severity", "explanation"):
        table.add_column(column, overflow="fold")
    for error in evaluation["errors"]:
        offsets = f"{error['start']}-{error['end']}" if error["start"] is not None else "-"
        table.add_row(
            error["location"] or "(none)", offsets, error["anchor"] or "-", str(error["severity"]), error["explanation"]
        )
    console.print(table)
