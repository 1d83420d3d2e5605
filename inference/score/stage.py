"""The scoring stage as a function: `score_file(ScoreSettings(...)) -> ScoreRun`.

`spanjudge score` parses its options into `ScoreSettings` and prints the `ScoreRun`; the
demo calls `score_file` directly. Results are appended as soon as each is final, so a
re-run with the same settings skips what is done (see `rows`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console

from spanjudge.core.catalog import Catalog, load_catalog
from spanjudge.core.digests import file_sha256, weights_digest
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_jsonl
from spanjudge.core.keyvalue import parse_texts
from spanjudge.core.options import option
from spanjudge.core.progress import tracker_bars
from spanjudge.core.run_info import run_info
from spanjudge.core.sharding import SHARD_HELP, Shard, parse_shard

from ..backends import engine, parse_engine_args
from ..backends.registry import engines_that
from ..judge import Judge
from ..judge_conversation import JudgeRequest
from ..judge_location import resolve_prompt_template
from ..judge_options import JudgeOptions
from ..judge_setup import decision_rule_for, judge_engine
from ..judge_workers import JudgeWorkers
from ..judged import JudgedEvaluation
from ..prompts import PromptTemplate
from ..requests import FieldMapping, read_requests, score_source
from .rows import (
    ScoreRow,
    ScoreStore,
    check_results_file,
    read_results,
    resume_key,
    run_info_path,
    shard_requests,
    write_run_info,
)

CHUNK = 32  # items handed to the judge at a time (each result is written as soon as it is final)
FORMATS = ("jsonl", "html")


@dataclass(frozen=True, kw_only=True)
class ScoreSettings(JudgeOptions):
    """Everything one scoring run is given: the judge's options (`JudgeOptions`) and the run's own, each
    field declared once and also `spanjudge score`'s option (`core.options`); all of them are recorded in
    OUT.run.json (the results' provenance)."""

    model: str = option(help="Adapter folder (spanjudge train), merged model folder or hub id.")
    out: Path = option(
        help="Results JSONL (one evaluation per line; re-running resumes); what produced it (versions, git "
        "commit, options) goes beside it in OUT with .run.json."
    )
    data: str | None = option(
        None,
        help="Rows to score: .jsonl, .json, .csv, a saved HF dataset or a Hub dataset id owner/name[:split] "
        "(or see --data-format, --src/--hyp).",
    )
    data_format: str = option(
        "auto",
        help="auto (by the file), or lm-eval: the samples_*.jsonl of `lm_eval --log_samples`; the output is "
        "the sample's filtered_resps (--output-field resps: the raw generation), the id its doc_id, and "
        'inputs come from its doc: --input "Article=doc.document".',
    )
    src: Path | None = option(None, help="Plain text, one source per line: the task's first input (or --input H=src).")
    hyp: Path | None = option(None, help="Plain text, one output to evaluate per line (with --src).")
    ref: Path | None = option(
        None, help='Plain text, one reference per line, for an input mapped with --input "H=ref".'
    )
    task: str | None = option(None, help="Task id (spanjudge tasks); else each row's task_id.")
    aspect: str | None = option(None, help="Aspect name (else each row's aspect_name).")
    aspect_definition: str | None = option(None, help="Define a custom aspect.")
    engine_arg: list[str] | None = option(
        None,
        help="KEY=VALUE (repeatable; VALUE read as YAML) for the engine: vllm's LLM(...), e.g. "
        "max_model_len=8192, gpu_memory_utilization=0.8, tensor_parallel_size=2, quantization=fp8; "
        "transformers' from_pretrained(...), e.g. dtype=bfloat16, device_map=auto.",
    )
    input_field: list[str] | None = option(
        None, flag="--input", help='Map a task input to a field: "HEADER=FIELD" (repeatable).'
    )
    output_field: str = option("output", help="Field holding the text to evaluate.")
    id_field: str = option("id", help="Field with a unique id (else row number).")
    split: str = option("test", help="Split of a DatasetDict folder or Hub dataset.")
    limit: int | None = option(None, help="Score only the first N rows.", min=1)
    output_format: str = option(
        "jsonl", flag="--format", help="jsonl, or html to also write OUT with .html: highlighted spans."
    )
    refresh_unscored: bool = option(
        False,
        help="Score again the rows of OUT left unscored (no reply parsed), e.g. by a server that was "
        "broken; a plain re-run keeps them.",
    )
    shard: str | None = option(None, help=SHARD_HELP + " The N results files together hold every row.", metavar="K/N")
    workers: int = option(
        1,
        help="Judge in N processes of this machine, its cores shared out among them: the same judge's replies, "
        "faster for a small judge on a CPU that writes a few replies at a time (--decoding drafted: 1.44x with 2 "
        "on 2 cores); an engine in this process only (a server runs requests in parallel itself: --concurrency).",
        min=1,
    )


@dataclass
class ScoreRun:
    """What a scoring run left in `out`: the rows of the requested items (earlier runs' included)."""

    out: Path
    rows: list[ScoreRow]
    requested: int
    already_done: int
    failed: int = 0  # model calls that failed: written unscored with their reason; a re-run scores them again
    page: Path | None = None  # the HTML report, with output_format "html"
    scored: int = field(init=False)

    def __post_init__(self) -> None:
        self.scored = sum(1 for row in self.rows if row.evaluation.score is not None)


def result_row(
    request: JudgeRequest, evaluation: JudgedEvaluation, key: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """One line of the results file (a `rows.ScoreRow`); `key` is its resume key (`rows.resume_key`)."""

    return ScoreRow.of(request, evaluation, key).line()


def page_path(results: Path) -> Path:
    """The HTML page of a results file, beside it: scores.jsonl -> scores.html."""
    return results.with_suffix(".html")


def check_page_path(results: Path, page: Path, option: str) -> None:
    """The results file and its page are never one file (the page would overwrite the rows)."""

    if page.resolve() == results.resolve():
        raise InputError(
            f"{option} {results}: the HTML page would be written over the results; the results file is "
            f"JSONL (e.g. {results.with_suffix('.jsonl')}) and its page goes beside it with .html"
        )


def model_identity(
    model: str, base: str | None, engine: str, served_model: str | None, engine_options: Mapping[str, Any] | None = None
) -> str:
    """The judge as the resume key records it: a local folder by its absolute path (the same
    judge from another working directory) and its weights' digest (more training into the same run
    folder, or a replaced adapter, is another judge, whose rows never resume this one's), with the base
    and the served name when given, and each file an engine option names by its content (llama.cpp's
    gguf= and lora=: the same adapter folder run on the bare GGUF and with its LoRA are two judges)."""

    local = Path(model).expanduser()
    name = str(local.resolve()) if local.exists() else model
    weights = weights_digest(model)
    if weights is not None:
        name += f" (weights {weights})"
    if base:
        name += f" (base {base})"
    if served_model and _served(engine):
        name += f" (served as {served_model})"
    for key, value in sorted((engine_options or {}).items()):
        path = Path(str(value)).expanduser() if isinstance(value, str | Path) else None
        if path is not None and path.is_file():
            name += f" ({key} {path.name} sha256:{file_sha256(path)[:16]})"
    return name


def _served(name: str) -> bool:

    try:
        return engine(name).serve is not None
    except InputError:
        return False


def _check(settings: ScoreSettings) -> tuple[Shard | None, dict[str, Any]]:
    """One-line errors before anything is read; returns the shard (or None) and the engine options."""

    part = parse_shard(settings.shard)  # a bad K/N is one line before anything is read
    if settings.output_format not in FORMATS:
        raise InputError(f"--format must be jsonl or html, not '{settings.output_format}'")
    if settings.output_format == "html":
        from spanjudge.core.fileio import check_overwritable

        from .html import is_our_page

        check_page_path(settings.out, page_path(settings.out), "--out")
        check_overwritable(page_path(settings.out), "page", is_our_page, "--out (its page)")
    declared = judge_engine(settings)  # the engine's own rules, as Judge.from_pretrained checks them
    if settings.workers > 1 and not declared.in_process:
        raise InputError(
            f"--workers {settings.workers}: engine {declared.name!r} judges on a server, which runs requests in "
            "parallel itself (--concurrency); workers are processes of an engine that runs here"
        )
    engine_options = parse_engine_args(settings.engine_arg or [])
    if engine_options and not declared.takes_engine_args:
        raise InputError(
            f"--engine-arg is for --engine {engines_that('takes_engine_args')}; a server takes its own flags"
        )
    return part, engine_options


def _requests(
    settings: ScoreSettings, part: Shard | None, catalog: Catalog
) -> tuple[str, list[JudgeRequest], PromptTemplate | None]:
    """(data name, the requests of this run, the prompt template) from the settings' data."""

    s, out = settings, settings.out
    inputs = parse_texts(s.input_field or [], "--input", '"Article=source"', "HEADER=FIELD")
    mapping = FieldMapping(id_field=s.id_field, output_field=s.output_field, inputs=inputs)
    texts = {"src": s.src, "hyp": s.hyp, "ref": s.ref}
    data_name, rows, mapping = score_source(
        s.data, s.data_format, texts, mapping, catalog.task(s.task) if s.task else None
    )
    for flag, given in (("--data", s.data), *((f"--{key}", path) for key, path in texts.items())):
        if given is not None and Path(given).exists() and out.exists() and out.resolve() == Path(given).resolve():
            raise InputError(f"--out {out} is the {flag} file; write the results to another file")
    template = resolve_prompt_template(s.model, s.prompt_template)
    requests = read_requests(
        data_name, catalog, s.task, s.aspect, s.aspect_definition, mapping,
        split=s.split, limit=s.limit, rows=rows, template=template,
    )  # fmt: skip
    return data_name, shard_requests(out, requests, part), template  # with --shard K/N, shard K's rows


def _drop_to_score_again(out: Path, done: dict[str, Any], wanted: set[str], unscored: bool) -> dict[str, Any]:
    """Remove from the results file the wanted rows whose model call failed (always) or that are
    unscored (`unscored`: --refresh-unscored), so that they are scored again."""

    again = {
        i
        for i in wanted & done.keys()
        if done[i][1].get("call_failure") or (unscored and done[i][1]["evaluation"]["score"] is None)
    }
    if again:
        atomic_write_jsonl(out, [row for row in read_results(out) if str(row["id"]) not in again])
    return {i: found for i, found in done.items() if i not in again}


def _in_data_order(out: Path, rows: list[dict[str, Any]], requests: Sequence[Any]) -> list[dict[str, Any]]:
    """The results file's `rows` in the data's order, and the file rewritten (atomically) when they were not.
    Rows are appended as they finish, in the order the judge sends them (by prompt, so outputs of one input
    share its prefix); a finished run reads like its input. A killed run keeps the order it had, and the next
    run sorts it."""

    position = {str(request.id): i for i, request in enumerate(requests)}
    ordered = sorted(rows, key=lambda row: position.get(str(row["id"]), len(position)))  # others keep their order
    if ordered != rows:
        atomic_write_jsonl(out, ordered)
    return ordered


def _judge_todo(
    settings: ScoreSettings,
    store: ScoreStore,
    todo: list[JudgeRequest],
    keys: Mapping[str, Any],
    catalog: Catalog,
    template: PromptTemplate | None,
    engine_options: dict[str, Any],
    console: Console,
    started: Callable[[], None],
) -> int:
    """Score `todo`, appending each final result to the run's `ScoreStore`; returns the number of
    failed model calls. `started()` is called once the judge is loaded, before the first item."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    s, failed = settings, 0
    prepared = Judge.prepare(s.model, s, catalog=catalog, engine_options=engine_options, prompt_template=template)
    judge: Judge | JudgeWorkers = prepared.load() if s.workers == 1 else JudgeWorkers(prepared, s.workers).start()
    started()
    columns = (TextColumn("scoring"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with tracker_bars(*columns, console=console) as progress:  # log lines when not a terminal
            advance = progress("score", len(todo))
            step = CHUNK * s.workers  # each worker busy until the chunk's last groups
            for start in range(0, len(todo), step):
                chunk = todo[start : start + step]

                def write(index: int, evaluation: JudgedEvaluation, chunk: list[JudgeRequest] = chunk) -> None:
                    # each result is on disk as soon as it is final: a kill loses only those in flight;
                    # a model call that failed is written as an unscored row with its `call_failure`,
                    # which the next run scores again (the store serialises appends from a backend's
                    # worker threads)
                    request = chunk[index]
                    store.append([result_row(request, evaluation, keys[str(request.id)])])

                results = judge.score(chunk, progress=advance, on_result=write)
                failed += sum(1 for e in results if e.call_failure)
    finally:
        judge.close()
    return failed


def score_file(settings: ScoreSettings, console: Console | None = None) -> ScoreRun:
    """Score the settings' rows into `settings.out` (resuming), and return what it holds for them.

    `console` receives the progress (default: standard error)."""

    s, out = settings, settings.out
    part, engine_options = _check(s)
    console = console or Console(stderr=True, soft_wrap=True)  # log lines stay whole (greppable)
    catalog = load_catalog()
    data_name, requests, template = _requests(s, part, catalog)
    decoding: dict[str, Any] = {"max_new_tokens": s.max_new_tokens, "retries": s.retries, "constrained": s.constrained}
    rule, skipped = decision_rule_for(s, s.model)
    if s.probabilities or rule is not None:  # only when read: files scored before these options resume as they were
        decoding["probabilities"] = True
    if rule is not None:  # other thresholds decide other errors: those rows are scored again
        decoding["decisions"] = rule.thresholds()
    if s.samples:
        decoding["samples"] = s.samples
    if s.stop_at_repeat:  # other replies: their errors end at the first block written again
        decoding["stop_at_repeat"] = True
    identity = model_identity(s.model, s.base, s.engine, s.served_model, engine_options)
    keys = {str(r.id): resume_key(r, identity, decoding) for r in requests}
    store = ScoreStore(out, "spanjudge score")  # held for the run: a second run on the same --out is refused
    try:
        done = dict(store.found)
        check_results_file(out, done, keys)
        done = _drop_to_score_again(out, done, set(keys), unscored=s.refresh_unscored)
        todo = [r for r in requests if r.id not in done]
        template_used = {"path": str(template.path), "sha256": template.sha256} if template else None

        def record_run() -> None:  # once the judge is up: a run that fails before it leaves no provenance
            write_run_info(out, run_info("score", {**asdict(s), "prompt_template": template_used}, seed=None))

        console.print(f"{len(requests)} rows; {len(requests) - len(todo)} already scored in {out}; {len(todo)} to go")
        if rule is not None or skipped:
            console.print(f"decisions: {rule.describe()}" if rule is not None else f"note: {skipped}")
        failed = (
            _judge_todo(s, store, todo, keys, catalog, template, engine_options, console, record_run) if todo else 0
        )
        if not todo and not run_info_path(out).exists():
            record_run()
        rows = read_results(out)
        if todo:
            rows = _in_data_order(out, rows, requests)
        wanted = {r.id for r in requests}
        typed = [ScoreRow.model_validate(row) for row in rows if row["id"] in wanted]
        run = ScoreRun(out, typed, len(requests), len(requests) - len(todo), failed)
        if s.output_format == "html":
            from spanjudge.core.fileio import atomic_write_text

            from .html import render_html

            run.page = page_path(out)
            atomic_write_text(
                run.page, render_html([row.line() for row in run.rows], title=f"spanjudge: {Path(data_name).name}")
            )
    finally:
        store.close()
    return run


def summary_lines(rows: Sequence[ScoreRow], failed: int) -> list[str]:
    """The run's summary: scored, unscored (by reason), truncated, failed calls, spans."""
    scores = [row.evaluation.score for row in rows if row.evaluation.score is not None]
    unscored = Counter(
        str(row.unscored_reason).split(" (")[0] for row in rows if row.evaluation.score is None
    )  # fmt: skip
    truncated = sum(1 for row in rows if row.truncated)
    errors = [e for row in rows if row.evaluation.score is not None for e in row.evaluation.errors]
    unanchored = sum(1 for e in errors if e.get("location") is not None and e.get("start") is None)
    # no made-up mean (nor "nan") when nothing was scored
    mean = f"{sum(scores) / len(scores):.1f}" if scores else "- (nothing scored)"
    first = (
        f"scored {len(scores)}, unscored {len(rows) - len(scores)}, truncated inputs {truncated}"
        + (f", failed calls {failed}" if failed else "")
        + f"; mean score {mean}; {len(errors)} error spans ({unanchored} not found in their output)"
    )
    return [first, *(f"  unscored ×{count}: {reason}" for reason, count in unscored.most_common())]
