"""`spanjudge score`, `spanjudge render` and `spanjudge export`: the distilled judge from the
command line."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any

import typer

from .sharding import SHARD_HELP

score = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
render = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
export = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

CHUNK = 32  # items handed to the judge at a time (each result is written as soon as it is final)


def _parse_inputs(values: list[str]) -> dict[str, str]:
    from .errors import InputError

    mapping = {}
    for value in values:
        header, sep, field = value.partition("=")
        if not sep or not header.strip() or not field.strip():
            raise InputError(f"--input expects HEADER=FIELD (e.g. --input \"Article=source\"), got '{value}'")
        mapping[header.strip()] = field.strip()
    return mapping


def _result_row(request: Any, evaluation: Any, key: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One line of the results file; `key` is its resume key (`score_data.resume_key`)."""
    return {
        "id": request.id,
        "task": request.task.id,
        "aspect": request.aspect.name,
        **(key or {}),
        "output": request.output,
        "evaluation": {"errors": [e.model_dump() for e in evaluation.errors], "score": evaluation.score},
        "unscored_reason": evaluation.unscored_reason,
        "truncated": evaluation.truncated,
        "attempts": evaluation.attempts,
        "raw_replies": evaluation.raw_replies,
    }


@score.command()
def score_command(
    model: Annotated[
        str, typer.Option("--model", help="Adapter folder (spanjudge train), merged model folder or hub id.")
    ],
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            help="Results JSONL (one evaluation per line; re-running resumes); what produced it (versions, git "
            "commit, options) goes beside it in OUT with .run.json.",
        ),
    ],
    data: Annotated[
        str | None,
        typer.Option(
            "--data",
            help="Rows to score: .jsonl, .json, .csv, a saved HF dataset or a Hub dataset id owner/name[:split] "
            "(or see --data-format, --src/--hyp).",
        ),
    ] = None,
    data_format: Annotated[
        str,
        typer.Option(
            "--data-format",
            help="auto (by the file), or lm-eval: the samples_*.jsonl of `lm_eval --log_samples`; the output is "
            "the sample's filtered_resps (--output-field resps: the raw generation), the id its doc_id, and "
            'inputs come from its doc: --input "Article=doc.document".',
        ),
    ] = "auto",
    src: Annotated[
        Path | None,
        typer.Option("--src", help="Plain text, one source per line: the task's first input (or --input H=src)."),
    ] = None,
    hyp: Annotated[
        Path | None, typer.Option("--hyp", help="Plain text, one output to evaluate per line (with --src).")
    ] = None,
    ref: Annotated[
        Path | None,
        typer.Option("--ref", help='Plain text, one reference per line, for an input mapped with --input "H=ref".'),
    ] = None,
    prompt_template: Annotated[
        Path | None,
        typer.Option(
            "--prompt-template",
            help="The judge's prompt as a Jinja file (variables: task_name, aspect_name, aspect_definition, "
            "extra_task_info, inputs, outputs), e.g. the one a foreign judge was trained with; default: the one "
            "stored in the adapter folder (data.prompt_template in training), else the built-in prompt.",
        ),
    ] = None,
    task: Annotated[
        str | None, typer.Option("--task", help="Task id (spanjudge tasks); else each row's task_id.")
    ] = None,
    aspect: Annotated[str | None, typer.Option("--aspect", help="Aspect name (else each row's aspect_name).")] = None,
    aspect_definition: Annotated[
        str | None,
        typer.Option("--aspect-definition", help="Define a custom aspect."),
    ] = None,
    base: Annotated[str | None, typer.Option("--base", help="Base model (default: recorded in the adapter).")] = None,
    engine: Annotated[str, typer.Option("--engine", help="transformers | vllm | openai.")] = "transformers",
    engine_arg: Annotated[
        list[str] | None,
        typer.Option(
            "--engine-arg",
            help="KEY=VALUE (repeatable; VALUE read as YAML) for the engine: vllm's LLM(...), e.g. "
            "max_model_len=8192, gpu_memory_utilization=0.8, tensor_parallel_size=2, quantization=fp8; "
            "transformers' from_pretrained(...), e.g. dtype=bfloat16, device_map=auto.",
        ),
    ] = None,
    base_url: Annotated[
        str | None, typer.Option("--base-url", help="engine openai: the server, e.g. http://127.0.0.1:8080/v1.")
    ] = None,
    served_model: Annotated[
        str | None, typer.Option("--served-model", help="engine openai: served model name.")
    ] = None,
    input_field: Annotated[
        list[str] | None, typer.Option("--input", help='Map a task input to a field: "HEADER=FIELD" (repeatable).')
    ] = None,
    output_field: Annotated[str, typer.Option("--output-field", help="Field holding the text to evaluate.")] = "output",
    id_field: Annotated[str, typer.Option("--id-field", help="Field with a unique id (else row number).")] = "id",
    split: Annotated[str, typer.Option("--split", help="Split of a DatasetDict folder or Hub dataset.")] = "test",
    limit: Annotated[int | None, typer.Option("--limit", min=1, help="Score only the first N rows.")] = None,
    batch_size: Annotated[int, typer.Option("--batch-size", min=1, help="transformers: batch size.")] = 8,
    max_new_tokens: Annotated[int, typer.Option("--max-new-tokens", min=16)] = 1536,
    retries: Annotated[
        int, typer.Option("--retries", min=0, help="Sampled retries of a reply that does not parse.")
    ] = 3,
    max_context: Annotated[
        int | None, typer.Option("--max-context", help="Context length to fit prompts in (default: the model's).")
    ] = None,
    output_format: Annotated[
        str, typer.Option("--format", help="jsonl, or html to also write OUT with .html: highlighted spans.")
    ] = "jsonl",
    constrained: Annotated[
        bool,
        typer.Option(
            "--constrained",
            help="Hold every reply to the output contract's grammar (llama.cpp GBNF, vLLM structured outputs, "
            "transformers: xgrammar, pip install 'spanjudge[constrained]').",
        ),
    ] = False,
    refresh_unscored: Annotated[
        bool,
        typer.Option(
            "--refresh-unscored",
            help="Score again the rows of OUT left unscored (no reply parsed), e.g. by a server that was "
            "broken; a plain re-run keeps them.",
        ),
    ] = False,
    shard: Annotated[
        str | None,
        typer.Option("--shard", metavar="K/N", help=SHARD_HELP + " The N results files together hold every row."),
    ] = None,
) -> None:
    """Score outputs with a distilled judge: error spans (anchored to character offsets),
    explanations, severities and a 0-100 score per output.

    Decoding is greedy; a reply that does not parse is retried with light sampling up to 3
    times, then reported as unscored (never given a made-up score). Inputs too long for the
    context are cut from the end (the evaluated output never is) and flagged in the results.
    Each result is appended as soon as it is final: re-running the same command skips finished
    rows; re-running into the same --out with another task, aspect, model, decoding or data is
    refused (each row records what it was scored with).

    Rows come from --data (JSONL, JSON, CSV, a saved HF dataset, or with --data-format lm-eval
    the samples lm-evaluation-harness logs) or from plain text files (--src/--hyp, one item per
    line). A judge trained on its own prompt reads it: --prompt-template, or the copy its
    adapter folder stores. OUT.run.json records what produced the results.
    """
    options = dict(locals())  # every option as given, for the results' provenance (OUT.run.json)
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    from .backends import parse_engine_args
    from .catalog import load_catalog
    from .errors import InputError
    from .judge import Judge, resolve_prompt_template
    from .progress_log import progress_bars
    from .run_info import run_info
    from .score_data import (
        FieldMapping,
        append_results,
        check_resume,
        finished_rows,
        read_requests,
        read_results,
        resume_key,
        run_info_path,
        score_source,
        shard_requests,
        write_run_info,
    )
    from .sharding import parse_shard

    part = parse_shard(shard)
    if output_format not in ("jsonl", "html"):
        raise InputError(f"--format must be jsonl or html, not '{output_format}'")
    if engine not in ("transformers", "vllm", "openai"):
        raise InputError(f"--engine must be transformers, vllm or openai, not '{engine}'")
    engine_options = parse_engine_args(engine_arg or [])
    if engine_options and engine == "openai":
        raise InputError("--engine-arg is for --engine vllm or transformers; a server takes its own flags")
    console = Console(stderr=True, soft_wrap=True)  # log lines stay whole (greppable)
    catalog = load_catalog()
    mapping = FieldMapping(id_field=id_field, output_field=output_field, inputs=_parse_inputs(input_field or []))
    texts = {"src": src, "hyp": hyp, "ref": ref}
    data_name, rows, mapping = score_source(data, data_format, texts, mapping, catalog.task(task) if task else None)
    for option, given in (("--data", data), *((f"--{key}", path) for key, path in texts.items())):
        if given is not None and Path(given).exists() and out.exists() and out.resolve() == Path(given).resolve():
            raise InputError(f"--out {out} is the {option} file; write the results to another file")
    template = resolve_prompt_template(model, prompt_template)
    requests = read_requests(
        data_name, catalog, task, aspect, aspect_definition, mapping,
        split=split, limit=limit, rows=rows, template=template,
    )  # fmt: skip
    requests = shard_requests(out, requests, part)  # with --shard K/N, the rows of shard K's inputs
    decoding = {"max_new_tokens": max_new_tokens, "retries": retries, "constrained": constrained}
    judge_identity = _model_identity(model, base, engine, served_model)
    keys = {str(r.id): resume_key(r, judge_identity, decoding) for r in requests}
    done = finished_rows(out)
    check_resume(out, done, keys)
    if refresh_unscored:
        done = _drop_unscored(out, done, set(keys))
    todo = [r for r in requests if r.id not in done]
    if todo or not run_info_path(out).exists():
        template_used = {"path": str(template.path), "sha256": template.sha256} if template else None
        write_run_info(out, run_info("score", {**options, "prompt_template": template_used}, seed=None))
    console.print(f"{len(requests)} rows; {len(requests) - len(todo)} already scored in {out}; {len(todo)} to go")
    failed = 0
    if todo:
        judge = Judge.from_pretrained(
            model,
            base,
            engine,  # type: ignore[arg-type]
            base_url=base_url,
            served_model=served_model,
            batch_size=batch_size,
            max_new_tokens=max_new_tokens,
            retries=retries,
            max_context=max_context,
            catalog=catalog,
            constrained=constrained,
            engine_options=engine_options,
            prompt_template=template,
        )
        columns = (TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with progress_bars(*columns, console=console) as progress:  # log lines when not a terminal
            bar = progress.add_task("score", total=len(todo))
            lock = threading.Lock()  # results may arrive from a backend's worker thread
            for start in range(0, len(todo), CHUNK):
                chunk = todo[start : start + CHUNK]

                def write(index: int, evaluation: Any, chunk: list[Any] = chunk) -> None:
                    # each result is on disk as soon as it is final: a kill loses only those in flight;
                    # model calls that failed are not written: the next run retries them
                    if not evaluation.call_failure:
                        request = chunk[index]
                        with lock:
                            append_results(out, [_result_row(request, evaluation, keys[str(request.id)])])

                results = judge.score(chunk, progress=lambda n: progress.advance(bar, n), on_result=write)
                failed += sum(1 for e in results if e.call_failure)
        judge.close()
    wanted = {r.id for r in requests}
    rows = [row for row in read_results(out) if row["id"] in wanted]
    _summary(console, rows, failed)
    if output_format == "html":
        from .fileio import atomic_write_text
        from .html_report import render_html

        page = out.with_suffix(".html")
        atomic_write_text(page, render_html(rows, title=f"spanjudge: {Path(data_name).name}"))
        console.print(f"HTML report: {page}")
    if failed:
        console.print(f"[red]{failed} rows could not reach the model; re-run the same command to finish them[/red]")
        raise typer.Exit(1)


def _drop_unscored(out: Path, done: dict[str, Any], wanted: set[str]) -> dict[str, Any]:
    """Remove the wanted rows that are unscored from the results file, so they are scored again."""
    from .fileio import atomic_write_jsonl
    from .score_data import read_results

    again = {i for i in wanted & done.keys() if done[i][1]["evaluation"]["score"] is None}
    if again:
        atomic_write_jsonl(out, [row for row in read_results(out) if str(row["id"]) not in again])
    return {i: found for i, found in done.items() if i not in again}


def _model_identity(model: str, base: str | None, engine: str, served_model: str | None) -> str:
    """The judge as the resume key records it: a local folder by its absolute path (the same
    judge from another working directory), with the base and the served name when given."""
    local = Path(model).expanduser()
    name = str(local.resolve()) if local.exists() else model
    if base:
        name += f" (base {base})"
    if engine == "openai" and served_model:
        name += f" (served as {served_model})"
    return name


def _summary(console: Any, rows: list[dict[str, Any]], failed: int) -> None:
    scored = [row for row in rows if row["evaluation"]["score"] is not None]
    unscored = Counter(row["unscored_reason"].split(" (")[0] for row in rows if row["evaluation"]["score"] is None)
    truncated = sum(1 for row in rows if row.get("truncated"))
    errors = [e for row in scored for e in row["evaluation"]["errors"]]
    unanchored = sum(1 for e in errors if e.get("location") is not None and e.get("start") is None)
    # no made-up mean (nor "nan") when nothing was scored
    mean = f"{sum(row['evaluation']['score'] for row in scored) / len(scored):.1f}" if scored else "- (nothing scored)"
    console.print(
        f"scored {len(scored)}, unscored {len(rows) - len(scored)}, truncated inputs {truncated}"
        + (f", failed calls {failed}" if failed else "")
        + f"; mean score {mean}; {len(errors)} error spans ({unanchored} not found in their output)"
    )
    for reason, count in unscored.most_common():
        console.print(f"  unscored ×{count}: {reason}")


@render.command()
def render_command(
    results: Annotated[Path, typer.Argument(help="Results JSONL written by `spanjudge score`.")],
    out: Annotated[Path | None, typer.Option("--out", help="HTML file (default: RESULTS with .html).")] = None,
) -> None:
    """Render score results as one self-contained HTML page: spans highlighted by severity,
    explanations on hover, the score of each output."""
    from .fileio import atomic_write_text
    from .html_report import render_html
    from .score_data import read_results

    if not results.is_file():
        from .errors import InputError

        raise InputError(f"results file not found: {results}")
    page = out or results.with_suffix(".html")
    atomic_write_text(page, render_html(read_results(results), title=f"spanjudge: {results.stem}"))
    typer.echo(str(page))


@export.command()
def export_command(
    model: Annotated[Path, typer.Option("--model", help="Adapter folder from `spanjudge train`.")],
    out: Annotated[Path, typer.Option("--out", help="Output folder (--merge) or .gguf file (--gguf-lora).")],
    merge: Annotated[bool, typer.Option("--merge", help="Fold the adapter into the base: safetensors folder.")] = False,
    gguf_lora: Annotated[
        bool, typer.Option("--gguf-lora", help="Write the adapter as a llama.cpp GGUF LoRA (Llama bases).")
    ] = False,
    base: Annotated[str | None, typer.Option("--base", help="Base model (default: recorded in the adapter).")] = None,
) -> None:
    """Export a trained judge for serving.

    --merge writes merged weights (serve with vLLM, TGI, SGLang, or convert to GGUF with
    llama.cpp's convert_hf_to_gguf.py). --gguf-lora writes a llama.cpp adapter for a GGUF of
    the same base: `llama-server -m base.gguf --lora judge.gguf`. vLLM and Ollama can also
    serve the adapter folder itself (see the README: "Serving the judge").
    """
    import json

    from .errors import InputError
    from .export import adapter_to_gguf, merge_adapter
    from .hf_models import local_folder, resolve_model_source
    from .judge import recorded_base

    if merge == gguf_lora:
        raise InputError("choose one of --merge or --gguf-lora")
    if not (model / "adapter_config.json").is_file():
        raise InputError(f"{model} is not an adapter folder (no adapter_config.json)")
    base_folder = local_folder(resolve_model_source(base or recorded_base(model)))
    if merge:
        merge_adapter(model, base_folder, out, say=typer.echo)
    else:
        config = json.loads((Path(base_folder) / "config.json").read_text(encoding="utf-8"))
        typer.echo(str(adapter_to_gguf(model, config, out)))
