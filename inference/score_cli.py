"""`spanjudge score`, `spanjudge render` and `spanjudge export`: the distilled judge from the
command line. The work is done by `scoring.score_file`; these commands parse and print."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from .backends.registry import JUDGE_ENGINES
from .sharding import SHARD_HELP

score = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
render = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
export = typer.Typer(add_completion=False, pretty_exceptions_enable=False)

# The options of `spanjudge score`, one alias each, so that the command itself stays a short read.
ModelOption = Annotated[
    str, typer.Option("--model", help="Adapter folder (spanjudge train), merged model folder or hub id.")
]
OutOption = Annotated[
    Path,
    typer.Option(
        "--out",
        help="Results JSONL (one evaluation per line; re-running resumes); what produced it (versions, git "
        "commit, options) goes beside it in OUT with .run.json.",
    ),
]
DataOption = Annotated[
    str | None,
    typer.Option(
        "--data",
        help="Rows to score: .jsonl, .json, .csv, a saved HF dataset or a Hub dataset id owner/name[:split] "
        "(or see --data-format, --src/--hyp).",
    ),
]
DataFormatOption = Annotated[
    str,
    typer.Option(
        "--data-format",
        help="auto (by the file), or lm-eval: the samples_*.jsonl of `lm_eval --log_samples`; the output is "
        "the sample's filtered_resps (--output-field resps: the raw generation), the id its doc_id, and "
        'inputs come from its doc: --input "Article=doc.document".',
    ),
]
SrcOption = Annotated[
    Path | None,
    typer.Option("--src", help="Plain text, one source per line: the task's first input (or --input H=src)."),
]
HypOption = Annotated[
    Path | None, typer.Option("--hyp", help="Plain text, one output to evaluate per line (with --src).")
]
RefOption = Annotated[
    Path | None,
    typer.Option("--ref", help='Plain text, one reference per line, for an input mapped with --input "H=ref".'),
]
PromptTemplateOption = Annotated[
    Path | None,
    typer.Option(
        "--prompt-template",
        help="The judge's prompt as a Jinja file (variables: task_name, aspect_name, aspect_definition, "
        "extra_task_info, inputs, outputs), e.g. the one a foreign judge was trained with; default: the one "
        "stored in the adapter folder (data.prompt_template in training), else the built-in prompt.",
    ),
]
TaskOption = Annotated[str | None, typer.Option("--task", help="Task id (spanjudge tasks); else each row's task_id.")]
AspectOption = Annotated[str | None, typer.Option("--aspect", help="Aspect name (else each row's aspect_name).")]
AspectDefinitionOption = Annotated[str | None, typer.Option("--aspect-definition", help="Define a custom aspect.")]
BaseOption = Annotated[str | None, typer.Option("--base", help="Base model (default: recorded in the adapter).")]
EngineOption = Annotated[str, typer.Option("--engine", help=f"{' | '.join(JUDGE_ENGINES)}.")]
EngineArgOption = Annotated[
    list[str] | None,
    typer.Option(
        "--engine-arg",
        help="KEY=VALUE (repeatable; VALUE read as YAML) for the engine: vllm's LLM(...), e.g. "
        "max_model_len=8192, gpu_memory_utilization=0.8, tensor_parallel_size=2, quantization=fp8; "
        "transformers' from_pretrained(...), e.g. dtype=bfloat16, device_map=auto.",
    ),
]
BaseUrlOption = Annotated[
    str | None, typer.Option("--base-url", help="engine openai: the server, e.g. http://127.0.0.1:8080/v1.")
]
ServedModelOption = Annotated[str | None, typer.Option("--served-model", help="engine openai: served model name.")]
InputOption = Annotated[
    list[str] | None, typer.Option("--input", help='Map a task input to a field: "HEADER=FIELD" (repeatable).')
]
OutputFieldOption = Annotated[str, typer.Option("--output-field", help="Field holding the text to evaluate.")]
IdFieldOption = Annotated[str, typer.Option("--id-field", help="Field with a unique id (else row number).")]
SplitOption = Annotated[str, typer.Option("--split", help="Split of a DatasetDict folder or Hub dataset.")]
LimitOption = Annotated[int | None, typer.Option("--limit", min=1, help="Score only the first N rows.")]
BatchSizeOption = Annotated[int, typer.Option("--batch-size", min=1, help="transformers: batch size.")]
MaxNewTokensOption = Annotated[int, typer.Option("--max-new-tokens", min=16)]
RetriesOption = Annotated[int, typer.Option("--retries", min=0, help="Sampled retries of a reply that does not parse.")]
MaxContextOption = Annotated[
    int | None, typer.Option("--max-context", help="Context length to fit prompts in (default: the model's).")
]
FormatOption = Annotated[
    str, typer.Option("--format", help="jsonl, or html to also write OUT with .html: highlighted spans.")
]
ConstrainedOption = Annotated[
    bool,
    typer.Option(
        "--constrained",
        help="Hold every reply to the output contract's grammar (llama.cpp GBNF, vLLM structured outputs, "
        "transformers: xgrammar, pip install 'spanjudge[constrained]').",
    ),
]
ProbabilitiesOption = Annotated[
    bool,
    typer.Option(
        "--probabilities",
        help="Also read the judge's probabilities along each written evaluation (transformers engine): "
        "P(no error), the expected number of errors, each error's confidence and expected severity, and the "
        "expected score over 0-100, beside the written values (`probabilities` in each row).",
    ),
]
SamplesOption = Annotated[
    int,
    typer.Option(
        "--samples",
        min=0,
        help="Self-consistency: also ask N sampled replies (temperature 0.7) per output and merge them: the "
        "spans at least half of them mark, each with the share that did as its confidence, and their scores by "
        "the thesis's Algorithm 1 (`consensus` in each row). N more generations per output.",
    ),
]
RefreshUnscoredOption = Annotated[
    bool,
    typer.Option(
        "--refresh-unscored",
        help="Score again the rows of OUT left unscored (no reply parsed), e.g. by a server that was "
        "broken; a plain re-run keeps them.",
    ),
]
ShardOption = Annotated[
    str | None,
    typer.Option("--shard", metavar="K/N", help=SHARD_HELP + " The N results files together hold every row."),
]


@score.command()
def score_command(
    model: ModelOption,
    out: OutOption,
    data: DataOption = None,
    data_format: DataFormatOption = "auto",
    src: SrcOption = None,
    hyp: HypOption = None,
    ref: RefOption = None,
    prompt_template: PromptTemplateOption = None,
    task: TaskOption = None,
    aspect: AspectOption = None,
    aspect_definition: AspectDefinitionOption = None,
    base: BaseOption = None,
    engine: EngineOption = "transformers",
    engine_arg: EngineArgOption = None,
    base_url: BaseUrlOption = None,
    served_model: ServedModelOption = None,
    input_field: InputOption = None,
    output_field: OutputFieldOption = "output",
    id_field: IdFieldOption = "id",
    split: SplitOption = "test",
    limit: LimitOption = None,
    batch_size: BatchSizeOption = 8,
    max_new_tokens: MaxNewTokensOption = 1536,
    retries: RetriesOption = 3,
    max_context: MaxContextOption = None,
    output_format: FormatOption = "jsonl",
    constrained: ConstrainedOption = False,
    probabilities: ProbabilitiesOption = False,
    samples: SamplesOption = 0,
    refresh_unscored: RefreshUnscoredOption = False,
    shard: ShardOption = None,
) -> None:
    """Score outputs with a distilled judge: error spans (anchored to character offsets),
    explanations, severities and a 0-100 score per output.

    Decoding is greedy; a reply that does not parse is retried with light sampling up to 3
    times, then reported as unscored (never given a made-up score). --probabilities adds the
    judge's own probabilities (expected score and error count, each span's confidence) and
    --samples N a consensus of N sampled replies, beside the written evaluation. Inputs too long for the
    context are cut from the end (the evaluated output never is) and flagged in the results.
    Each result is appended as soon as it is final: re-running the same command skips finished
    rows; re-running into the same --out with another task, aspect, model, decoding or data is
    refused (each row records what it was scored with).

    Rows come from --data (JSONL, JSON, CSV, a saved HF dataset, or with --data-format lm-eval
    the samples lm-evaluation-harness logs) or from plain text files (--src/--hyp, one item per
    line). A judge trained on its own prompt reads it: --prompt-template, or the copy its
    adapter folder stores. OUT.run.json records what produced the results.
    """
    options = dict(locals())  # every option as given, also the results' provenance (OUT.run.json)
    from rich.console import Console

    from .scoring import ScoreSettings, score_file

    console = Console(stderr=True, soft_wrap=True)  # log lines stay whole (greppable)
    run = score_file(ScoreSettings(**options), console)
    _summary(console, run.rows, run.failed)
    if run.page is not None:
        console.print(f"HTML report: {run.page}")
    if run.failed:
        console.print(f"[red]{run.failed} rows could not reach the model; re-run the same command to finish them[/red]")
        raise typer.Exit(1)


def _summary(console: Any, rows: list[dict[str, Any]], failed: int) -> None:
    from .scoring import summary_lines

    for line in summary_lines(rows, failed):
        console.print(line)


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
    from .scoring import check_page_path, page_path

    if not results.is_file():
        from .errors import InputError

        raise InputError(f"results file not found: {results}")
    page = out or page_path(results)
    check_page_path(results, page, "--out" if out else "RESULTS")
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

    from .backends.adapters import check_safetensors_adapter
    from .errors import InputError
    from .export import adapter_to_gguf, check_gguf_target, check_merge_target, merge_adapter
    from .hf_models import local_folder, resolve_model_source
    from .judge import recorded_base

    if merge == gguf_lora:
        raise InputError("choose one of --merge or --gguf-lora")
    if not (model / "adapter_config.json").is_file():
        raise InputError(f"{model} is not an adapter folder (no adapter_config.json)")
    check_safetensors_adapter(model)
    if merge:  # the target is checked before any weights load
        check_merge_target(out)
    else:
        check_gguf_target(out)
    base_folder = local_folder(resolve_model_source(base or recorded_base(model)))
    if merge:
        merge_adapter(model, base_folder, out, say=typer.echo)
    else:
        config = json.loads((Path(base_folder) / "config.json").read_text(encoding="utf-8"))
        typer.echo(str(adapter_to_gguf(model, config, out)))
