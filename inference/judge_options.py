"""How a distilled judge is loaded and decodes: `Judge.from_pretrained`'s options, each declared once.

`JudgeOptions` is the typed spec `Judge.from_pretrained(model, options)` takes (keyword changes are
checked against its fields); `spanjudge score`'s settings extend it, so `--engine`, `--base-url`,
`--max-new-tokens` ... are these fields (`core.options` derives the command line), and meta-eval's
`--judge-option KEY=VALUE` names them too. The options only some engines take (`ENGINE_SPECIFIC`) are
declared by each engine (`Engine.judge_options`): their help names those engines, and another engine refuses them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.options import option

from .backends.registry import DEFAULT_JUDGE_ENGINE, engine_names, engines_taking


def for_engines(name: str) -> Callable[[], str]:
    """The rest of an engine option's help: the engines that take it, as their declarations say."""
    return lambda: f"(engine {' or '.join(engines_taking(name))})"


MAX_NEW_TOKENS = 1536
RETRIES = 3  # the thesis's scorer: three sampled retries of a reply that does not parse


@dataclass(frozen=True, kw_only=True)
class JudgeOptions:
    """The options of a distilled judge (see the module docstring)."""

    base: str | None = option(None, help="Base model (default: recorded in the adapter).")
    engine: str = option(DEFAULT_JUDGE_ENGINE, help=f"{' | '.join(engine_names())}.")
    base_url: str | None = option(
        None,
        help="The server, e.g. http://127.0.0.1:8080/v1 (Ollama: http://127.0.0.1:11434).",
        more_help=for_engines("base_url"),
    )
    served_model: str | None = option(None, help="The served model's name.", more_help=for_engines("served_model"))
    batch_size: int = option(8, help="Batch size.", min=1, more_help=for_engines("batch_size"))
    dtype: str = option(
        "auto", help="The weights' dtype (auto, bfloat16, float32 ...).", more_help=for_engines("dtype")
    )
    max_new_tokens: int = option(MAX_NEW_TOKENS, help="The longest reply the judge may write, in tokens.", min=16)
    retries: int = option(
        RETRIES,
        help="Sampled retries of a reply that does not parse (fewer keep a weak judge on a CPU affordable: each "
        "retry is a whole generation).",
        min=0,
    )
    reuse_prefix: bool | None = option(
        None,
        help="Run the outputs of one input together and read their shared prompt prefix (task, aspect, input) "
        "once: transformers keeps its KV cache per group, llama.cpp its prompt cache, vLLM its prefix cache; a "
        "server gets them in that order (off: llama.cpp's server is sent cache_prompt false). Default: on where "
        "greedy replies stay identical (transformers in float32, llama.cpp, vLLM, servers); off for transformers in "
        "bfloat16/float16, whose prefix, read in a pass of its own, rounds differently and can flip a near-tie "
        "(bench/results/reuse_numerics.md): --reuse-prefix turns it on there.",
        flag="--reuse-prefix/--no-reuse-prefix",
    )
    decoding: str = option(
        "batched",
        help="How greedy replies are written: batched (generate, batch_size at a time), or drafted: batch_size "
        "together, each a row of every pass, with prompt-lookup guesses and the output layer cut to the prompt's and "
        "the judge's vocabulary, every token checked against the whole layer (the same greedy replies; the "
        "probability reading reuses the writing's cache). Made for a small judge on a CPU "
        "(bench/results/drafted_judging.md).",
        more_help=for_engines("decoding"),
    )
    stop_at_repeat: bool = option(
        False,
        help="With drafted decoding: when a greedy reply writes an error block (location and explanation) again "
        "word for word, cut it there and write 'Overall score:' for the judge to finish, so a small judge's loop "
        "ends its errors instead of repeating one until its tokens run out "
        "(bench/results/repeated_errors_readings.md).",
        more_help=for_engines("stop_at_repeat"),
    )
    max_context: int | None = option(None, help="Context length to fit prompts in (default: the model's).")
    trust_remote_code: bool = option(False, help="Run the model repository's own code (off unless asked).")
    concurrency: int = option(1, help="Requests in flight.", min=1, more_help=for_engines("concurrency"))
    timeout_s: float = option(600.0, help="Seconds one call may take.", more_help=for_engines("timeout_s"))
    engine_options: Mapping[str, Any] | None = option(
        None,
        cli=False,
        help="Engine arguments: vllm's LLM(...) (max_model_len, gpu_memory_utilization ...), transformers' "
        "from_pretrained (dtype, device_map ...); they win over batch_size and dtype.",
    )
    constrained: bool = option(
        False,
        help="Hold every reply to the output contract's grammar (llama.cpp GBNF, vLLM structured outputs, "
        "transformers: xgrammar, pip install 'spanjudge[constrained]'; ollama: the contract's JSON form as the "
        "request's JSON schema, each reply rendered back to the text evaluation).",
    )
    prompt_template: Path | None = option(
        None,
        help="The judge's prompt as a Jinja file (variables: task_name, aspect_name, aspect_definition, "
        "extra_task_info, inputs, outputs), e.g. the one a foreign judge was trained with; default: the one "
        "stored in the adapter folder (data.prompt_template in training), else the built-in prompt.",
    )
    probabilities: bool = option(
        False,
        help="Also read the judge's probabilities along each written evaluation (engines transformers, "
        "llamacpp, llamacpp-server and vllm): "
        "P(no error), the expected number of errors, each error's confidence and expected severity, and the "
        "expected score over 0-100, beside the written values (`probabilities` in each row).",
    )
    samples: int = option(
        0,
        help="Self-consistency: also ask N sampled replies (temperature 0.7) per output and merge them: the "
        "spans at least half of them mark, each with the share that did as its confidence, and their scores by "
        "the thesis's Algorithm 1 (`consensus` in each row). N more generations per output.",
        min=0,
    )
    no_error_threshold: float | None = option(
        None,
        help="Say 'No Error' when the judge's P(no error) is at least this (0-1), whatever its reply wrote; "
        "default: the value fitted on a dev split and stored with the judge (spanjudge.json), if any. Reads the "
        "judge's probabilities; the written errors stay beside the decided ones.",
        min=0.0,
        max=1.0,
    )
    min_confidence: float | None = option(
        None,
        help="Keep a written error only when the judge writes it (and the errors before it) with at least this "
        "probability (0-1); default: the value stored with the judge, if any. Reads the judge's probabilities.",
        min=0.0,
        max=1.0,
    )
    written: bool = option(
        False,
        help="The written replies as they are: apply no decision rule, not even the one stored with the judge.",
    )


JUDGE_OPTION_NAMES: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(JudgeOptions))
# the options only some engines take: each engine declares which (`Engine.judge_options`), the rest refuse them
ENGINE_SPECIFIC: tuple[str, ...] = (
    "base_url", "served_model", "batch_size", "dtype", "decoding", "stop_at_repeat", "concurrency", "timeout_s"
)  # fmt: skip


def not_taken(options: JudgeOptions, takes: tuple[str, ...]) -> list[str]:
    """The engine-specific options given a value other than their default that an engine taking `takes` does not
    take."""
    defaults = {f.name: f.default for f in dataclasses.fields(JudgeOptions)}
    return [name for name in ENGINE_SPECIFIC if name not in takes and getattr(options, name) != defaults[name]]


def judge_options(options: JudgeOptions | None = None, **changes: Any) -> JudgeOptions:
    """`options` (default: every default) with `changes`; an unknown name is one SpanjudgeError listing them."""
    unknown = sorted(set(changes) - set(JUDGE_OPTION_NAMES))
    if unknown:
        raise SpanjudgeError(
            f"unknown judge option(s) {', '.join(unknown)}; the options are {', '.join(JUDGE_OPTION_NAMES)}"
        )
    base = options if options is not None else JudgeOptions()
    # the judge's own options only: a subclass (spanjudge score's settings) keeps its other fields out
    return JudgeOptions(**{name: getattr(base, name) for name in JUDGE_OPTION_NAMES} | changes)
