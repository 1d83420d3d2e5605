"""Post-processing of generated outputs: what a raw model reply needs before it is evaluated.

Chat models open with "Sure! Here is a summary:" and close with "Let me know if ...";
base models run on past the answer into a new "Article:"; both wrap text in fences or
quotes. The rules strip those, cut at the configured stop sequences, and reject what is
left empty. Each step taken is reported, and the raw reply is kept beside the result, so
the evaluated text can always be traced back to what the model said.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from .generate_config import PostProcess

_FENCE = re.compile(r"\A(```|''')[^\n]*\n(?P<body>.*?)\n?\1[ \t]*\Z", re.DOTALL)
_OPEN_FENCE = re.compile(r"\A(```|''')[A-Za-z]*[ \t]*\n")
_QUOTES = (('"', '"'), ("“", "”"), ("'", "'"))
_ALNUM = re.compile(r"\w", re.UNICODE)
_GENERIC_LABELS = ("output", "your output", "response", "answer", "reply")


@dataclass(frozen=True)
class Processed:
    text: str
    steps: tuple[str, ...]  # what was removed or cut, for provenance
    rejected: str | None = None  # why the output is unusable (then `text` is what was left)


def _short(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 3] + "...")


def _label_pattern(output_header: str) -> re.Pattern[str]:
    names = "|".join(re.escape(n) for n in sorted({output_header.lower(), *_GENERIC_LABELS}, key=len, reverse=True))
    return re.compile(rf"\A(?:\*\*|#+ *)?(?:{names})(?:\*\*)? *:(?:\*\*)?[ \t]*\n?", re.IGNORECASE)


def _unwrap(text: str) -> tuple[str, str | None]:
    """A whole output inside a code fence or a pair of quotes, without them."""
    fenced = _FENCE.match(text)
    if fenced:
        return fenced.group("body").strip(), "fence"
    opened = _OPEN_FENCE.match(text)
    if opened:  # an opening fence whose closing one was cut off (max_tokens)
        return text[opened.end() :].strip(), "fence"
    for left, right in _QUOTES:
        inner = text[len(left) : -len(right)]
        wrapped = len(text) > 2 and text.startswith(left) and text.endswith(right)
        if wrapped and left not in inner and right not in inner:
            return inner.strip(), "quotes"
    return text, None


def _strip_start(text: str, patterns: Sequence[re.Pattern[str]], steps: list[str]) -> str:
    """Remove openers from the start until none matches (a reply may stack two)."""
    changed = True
    while changed and text:
        changed = False
        for pattern in patterns:
            match = pattern.match(text)
            if match and match.end() > 0:
                steps.append(f"removed opener {_short(match.group(0).strip())}")
                text = text[match.end() :].lstrip()
                changed = True
    return text


def _strip_end(text: str, patterns: Sequence[re.Pattern[str]], steps: list[str]) -> str:
    """Remove closing lines such as "Let me know if you need anything else!"."""
    changed = True
    while changed and text:
        changed = False
        lines = text.rsplit("\n", 1)
        last = lines[-1].strip()
        if len(lines) == 2 and any(p.fullmatch(last) for p in patterns):
            steps.append(f"removed closer {_short(last)}")
            text = lines[0].rstrip()
            changed = True
    return text


def _cut(text: str, stops: Sequence[str], steps: list[str]) -> str:
    hits = [(text.find(stop), stop) for stop in stops if stop and stop in text]
    if not hits:
        return text
    position, stop = min(hits)
    steps.append(f"cut at {stop!r} (char {position})")
    return text[:position].rstrip()


def postprocess(
    raw: str,
    rules: PostProcess,
    *,
    output_header: str,
    stops: Sequence[str] = (),
    strip: Sequence[str] = (),
) -> Processed:
    """The usable output in `raw`: openers, wrappers and closers removed, cut at the first
    stop sequence; `rejected` says why nothing usable is left."""
    steps: list[str] = []
    text = raw.replace("\r\n", "\n").strip()
    if not text:
        return Processed("", (), rejected="empty reply")
    flags = re.IGNORECASE
    openers = [re.compile(p, flags) for p in strip]
    if rules.strip_preamble:
        openers += [re.compile(p, flags) for p in rules.preamble_patterns]
    if rules.strip_label:
        openers.append(_label_pattern(output_header))
    closers = [re.compile(p, flags) for p in rules.postamble_patterns] if rules.strip_preamble else []
    for _ in range(3):  # opener -> fence -> label can nest: "Sure!\n```\nSummary: ...```"
        before = text
        text = _strip_start(text, openers, steps)
        if rules.strip_fences:
            text, wrapper = _unwrap(text)
            if wrapper:
                steps.append(f"removed {wrapper}")
        if text == before:
            break
    text = _cut(text, [*stops, *rules.stop], steps)
    text = _strip_end(text, closers, steps)
    if rules.strip_fences:
        text, wrapper = _unwrap(text)
        if wrapper:
            steps.append(f"removed {wrapper}")
    if len(_ALNUM.findall(text)) < rules.min_chars:
        return Processed(text, tuple(steps), rejected="empty after post-processing")
    return Processed(text, tuple(steps))
