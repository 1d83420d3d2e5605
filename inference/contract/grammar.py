"""The judge's output contract as a grammar, for constrained decoding.

`judge_grammar()` is a GBNF grammar of exactly the replies the distilled judge is trained to
write (`render.render_judge` of a scored Evaluation with integer score)::

    Error 1:
    Location: <one line>
    Explanation: <one line>
    Severity: <1-5>

    Error 2:
    ...

    Overall score: <0-100>

with `No Error` in place of the blocks when there are none; blocks are numbered 1, 2, ... in
order, at most MAX_ERRORS of them. It is built from the renderer's own pieces (`render.py`)
and the model's bounds (`model.py`), so it cannot drift from them, and every text it accepts
reads back with `parse.parse_judge` (tests/integration/test_constrained.py checks both with a real
grammar engine).

One grammar text serves every engine:

- llama.cpp (`llama-server`, llama-cpp-python's server) reads GBNF as the request's `grammar`;
- vLLM's structured outputs (>= 0.11; 0.12 removed the older `guided_grammar`) read it as
  `structured_outputs.grammar`, offline (`StructuredOutputsParams(grammar=...)`) and served;
  its default backend, xgrammar, reads GBNF;
- transformers uses xgrammar's logits processor (`xgrammar.contrib.hf.LogitsProcessor`,
  the optional extra `spanjudge[constrained]`).

The grammar guarantees the *shape* only: a location is still whatever the model quotes, and
anchoring counts the ones not found in the output (`Evaluation.unanchored_count`).

Length: a Location or Explanation line holds 1 to `LINE_MAX_CHARS` (200) characters, so the
longest reply the grammar allows is `max_reply_chars()` characters (3,594 with 8 errors, 447
per error block). The judge allows as many error blocks as `errors_within(max_new_tokens)`
says fit at 3 characters per token (all 8 from 1,198 tokens; the default is 1,536; 1 block
at 160 tokens, 2 at 320), so a constrained reply ends before the token limit unless its
text averages fewer than 3 characters per token; a reply that is cut is unscored as before. In the teacher data of
bench/distill_quintd.py 5 of 368 explanations and 2 of 368 locations are longer than 200
characters; constrained, such a line is cut at 200 characters (a cut location still anchors,
as a prefix of the span).
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel

from spanjudge.core.errors import SpanjudgeError

from .model import MAX_ERRORS, ErrorAnnotation, Evaluation
from .render import (
    BLOCK_SEPARATOR,
    ERROR_HEADER,
    EXPLANATION_FIELD,
    LINE_BREAK,
    LOCATION_FIELD,
    NO_ERROR,
    SCORE_FIELD,
    SEVERITY_FIELD,
)

LINE_MAX_CHARS = 200
"""Characters of a Location or Explanation line at most, under constrained decoding."""

INSTALL_HINT = "constrained decoding with transformers needs xgrammar: pip install 'spanjudge[constrained]'"

# Python's str.isspace() characters: a value may not start with one (the parser strips them,
# and an explanation of whitespace alone would read as missing). Checked in the tests.
_SPACE = r"\x09-\x0D\x1C-\x20\x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000"
# Control characters and line separators may not occur in a value at all: the format is
# line-oriented and a line break inside a value would start a new line of the reply.
_CONTROL = r"\x00-\x1F\x7F-\x9F\u2028\u2029"
# An explanation may not start with `<` (a `<placeholder>` reads as a template echo) nor
# with `*` or `_` (markdown emphasis, which the parser strips and could leave empty).
_MARKUP = r"<*_"


def int_bounds(model: type[BaseModel], name: str) -> tuple[int, int]:
    """The (ge, le) bounds that the contract's pydantic model declares for a number field."""
    low = high = None
    for constraint in model.model_fields[name].metadata:
        low = getattr(constraint, "ge", low)
        high = getattr(constraint, "le", high)
    if low is None or high is None:
        raise AssertionError(f"{model.__name__}.{name} declares no ge/le bounds")
    return int(low), int(high)


def _literal(text: str) -> str:
    """A GBNF string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'


def _integers(low: int, high: int) -> str:
    return " | ".join(_literal(str(n)) for n in range(low, high + 1))


def _line_rule(first_excluded: str, line_max_chars: int) -> str:
    return f"[^{_CONTROL}{_SPACE}{first_excluded}] [^{_CONTROL}]{{0,{line_max_chars - 1}}}"


@functools.cache
def judge_grammar(*, max_errors: int = MAX_ERRORS, line_max_chars: int = LINE_MAX_CHARS) -> str:
    """The GBNF grammar of the judge's replies (see the module docstring)."""
    if not 1 <= max_errors <= MAX_ERRORS:
        raise ValueError(f"max_errors must be 1-{MAX_ERRORS}, got {max_errors}")
    if line_max_chars < 1:
        raise ValueError(f"line_max_chars must be at least 1, got {line_max_chars}")
    severity = int_bounds(ErrorAnnotation, "severity")
    score = int_bounds(Evaluation, "score")
    rules = [
        ("root", f"verdict {_literal(BLOCK_SEPARATOR + SCORE_FIELD)} score"),
        ("verdict", f"{_literal(NO_ERROR)} | error-1"),
    ]
    for number in range(1, max_errors + 1):
        more = f" ({_literal(BLOCK_SEPARATOR)} error-{number + 1})?" if number < max_errors else ""
        rules.append((f"error-{number}", f"{_literal(ERROR_HEADER.format(number=number) + LINE_BREAK)} body{more}"))
    body = (
        f"{_literal(LOCATION_FIELD)} location {_literal(LINE_BREAK + EXPLANATION_FIELD)} explanation "
        f"{_literal(LINE_BREAK + SEVERITY_FIELD)} severity"
    )
    rules += [
        ("body", body),
        ("location", _line_rule("", line_max_chars)),
        ("explanation", _line_rule(_MARKUP, line_max_chars)),
        ("severity", _integers(*severity)),
        ("score", _integers(*score)),
    ]
    return "".join(f"{name} ::= {definition}\n" for name, definition in rules)


def max_reply_chars(*, max_errors: int = MAX_ERRORS, line_max_chars: int = LINE_MAX_CHARS) -> int:
    """Characters of the longest reply `judge_grammar(...)` accepts."""
    severity = len(str(int_bounds(ErrorAnnotation, "severity")[1]))
    score = len(str(int_bounds(Evaluation, "score")[1]))
    blocks = sum(
        len(ERROR_HEADER.format(number=n) + LINE_BREAK + LOCATION_FIELD + LINE_BREAK + EXPLANATION_FIELD + LINE_BREAK)
        + len(SEVERITY_FIELD)
        + severity
        + 2 * line_max_chars
        for n in range(1, max_errors + 1)
    )
    blocks += len(BLOCK_SEPARATOR) * (max_errors - 1)
    return max(blocks, len(NO_ERROR)) + len(BLOCK_SEPARATOR + SCORE_FIELD) + score


CHARS_PER_TOKEN = 3.0
"""The text density `errors_within` assumes: English averages about 4 characters per token."""


def errors_within(max_new_tokens: int, *, line_max_chars: int = LINE_MAX_CHARS) -> int:
    """The most error blocks (up to MAX_ERRORS) whose longest reply fits `max_new_tokens` at
    `CHARS_PER_TOKEN`, so that a constrained reply ends before the token limit; SpanjudgeError
    when not even one fits."""
    budget = max_new_tokens * CHARS_PER_TOKEN
    for count in range(MAX_ERRORS, 0, -1):
        if max_reply_chars(max_errors=count, line_max_chars=line_max_chars) <= budget:
            return count
    needed = max_reply_chars(max_errors=1, line_max_chars=line_max_chars) / CHARS_PER_TOKEN
    raise SpanjudgeError(
        f"max_new_tokens {max_new_tokens} is too small for constrained decoding: one error block with "
        f"{line_max_chars}-character lines needs up to {needed:.0f} tokens"
    )


def server_grammar_fields(grammar: str) -> dict[str, Any]:
    """Request fields that hold an OpenAI-compatible server to `grammar`: llama.cpp reads
    `grammar`, vLLM (>= 0.11) reads `structured_outputs.grammar`; each ignores the other's
    field. A server that reads neither (e.g. Ollama) ignores both and decodes unconstrained:
    the replies are then parsed, and retried, as without constraints."""
    return {"grammar": grammar, "structured_outputs": {"grammar": grammar}}


def import_xgrammar() -> Any:
    """The `xgrammar` module, or a clear error naming the extra that installs it."""
    try:
        import xgrammar
    except ModuleNotFoundError as error:
        if error.name is None or error.name.split(".")[0] != "xgrammar":
            raise
        raise SpanjudgeError(INSTALL_HINT) from None
    return xgrammar


def grammar_accepts(grammar: str, text: str) -> bool:
    """Whether `grammar` accepts exactly `text` (the whole of it), by xgrammar's matcher."""
    xgr = import_xgrammar()
    compiled = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False).compile_grammar(grammar)
    # without a stop token, "terminated" means the grammar's root is complete at the end of the text
    matcher = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
    return bool(matcher.accept_string(text)) and bool(matcher.is_terminated())
