"""Reading quintd-1 (Kasner & Dušek, ACL 2024; factgenie's `quintd1-*`) span annotations.

The layout (../shared/data/spans/quintd1/MANIFEST.md): `outputs/test/<domain>/default/<model>.json`
holds each model's generated texts with the prompt that produced them (whose fenced block is
the input data), and `annotations/<annotator>/*.jsonl` holds one record per annotated output
with character-offset spans `{"type", "text", "start", "reason"?}`.

This module is the strict reader: every problem is one `InputError` naming the file and the
line. The teacher importer (`teacher.py`) and the span benchmark (`eval/spans/`)
both read through it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from spanjudge.core.errors import InputError
from spanjudge.core.jsonl import iter_jsonl

QUINTD_DOMAINS: tuple[str, ...] = ("gsmarena", "ice_hockey", "openweather", "owid", "wikidata")
QUINTD_MODELS: tuple[str, ...] = ("gpt-3.5", "llama2", "mistral", "zephyr")
# the LLM annotators of every output: GPT-4 (quintd's own metric), then `annotations/other/` (MANIFEST.md): a
# second GPT-4 sample at temperature 1, GPT-3.5 with GPT-4's prompt, and the open-weight Llama 3
QUINTD_LLM_ANNOTATORS: tuple[str, ...] = ("gpt-4", "gpt-4-temperature-1", "gpt-3.5", "llama3")
QUINTD_ANNOTATORS: tuple[str, ...] = ("human", "human_corr", *QUINTD_LLM_ANNOTATORS)
# Span types, from quintd's evaluation/generate_paper_results.py (quintd1/MANIFEST.md).
QUINTD_CATEGORIES: dict[int, str] = {0: "Incorrect", 1: "Not checkable", 2: "Misleading", 3: "Other"}

Mismatch = Literal["error", "relocate", "relocate_or_drop", "drop"]

_DATA_BLOCK = re.compile(r"```\n(.*)\n```", re.DOTALL)


def quintd_input(prompt: str) -> str | None:
    """The data block of a quintd generation prompt ("Based on the given data:\\n```\\n{DATA}\\n```").

    That block is quintd's own text rendering of data/<domain>/test.json (for owid it equals
    the CSV file byte for byte), i.e. exactly what the generating model and the annotators
    saw, and compact (0.5–8.5k characters), so we use it rather than re-render.
    """
    match = _DATA_BLOCK.search(prompt)
    return match.group(1) if match else None


@dataclass(frozen=True)
class QuintdSpan:
    start: int
    end: int
    category: str
    reason: str | None
    moved_from: int | None = None  # the record's offset, when `relocate` found the text elsewhere


@dataclass(frozen=True)
class QuintdOutput:
    """One annotated output with its input data and spans, and where its record came from."""

    domain: str
    model: str
    index: int
    annotator_id: str
    data: str
    output: str
    spans: tuple[QuintdSpan, ...]
    dropped: tuple[str, ...]  # spans not placeable on the output, each "text@offset" (policy `drop`)
    where: str

    @property
    def input_id(self) -> str:
        """All systems' outputs of one table share it (splits and bootstraps are by input)."""
        return f"{self.domain}/{self.index}"

    @property
    def output_id(self) -> str:
        """The output's id in the span sets (`eval.spans.quintd`): quintd1/<domain>/<model>/<table>."""
        return f"quintd1/{self.domain}/{self.model}/{self.index}"


def _read_generated(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise InputError(f"{path}: file not found (the outputs the annotations refer to)")
    try:
        payload = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    generated = payload.get("generated") if isinstance(payload, dict) else None
    if not isinstance(generated, list):
        raise InputError(f"{path}: no 'generated' list")
    for index, item in enumerate(generated):
        if not isinstance(item, dict) or not isinstance(item.get("out"), str) or not isinstance(item.get("in"), str):
            raise InputError(f"{path}: generated[{index}] lacks string 'in'/'out'")
    return generated


def _place(text: str, start: int, output: str, where: str, policy: Mismatch) -> int | None:
    """The offset of `text` in `output`: `start` when it is there, else by `policy`."""
    if start < 0 or start >= len(output):
        if policy == "error":
            raise InputError(f"{where}: span offset {start} is outside the output ({len(output)} characters)")
    elif output[start : start + len(text)] == text:
        return start
    if policy == "error":
        raise InputError(
            f"{where}: the output at offset {start} reads {output[start : start + len(text)]!r}, "
            f"not the span's text {text!r} (on_mismatch: relocate, relocate_or_drop or drop)"
        )
    if policy == "drop":
        return None
    found = [m.start() for m in re.finditer(re.escape(text), output)]
    if found:
        return min(found, key=lambda offset: abs(offset - start))
    if policy == "relocate":
        raise InputError(
            f"{where}: the span's text {text!r} occurs nowhere in the output (on_mismatch: relocate_or_drop skips it)"
        )
    return None


def _span_fields(annotation: object, where: str) -> tuple[int, str, str, str | None]:
    if not isinstance(annotation, dict):
        raise InputError(f"{where}: an annotation is not an object")
    start, text, kind = annotation.get("start"), annotation.get("text"), annotation.get("type")
    if isinstance(kind, bool) or kind not in QUINTD_CATEGORIES:
        known = ", ".join(f"{k} {v}" for k, v in QUINTD_CATEGORIES.items())
        raise InputError(f"{where}: unknown span type {kind!r} (known: {known})")
    if isinstance(start, bool) or not isinstance(start, int):
        raise InputError(f"{where}: span 'start' must be an integer character offset, got {start!r}")
    if not isinstance(text, str):
        raise InputError(f"{where}: span 'text' must be a string, got {text!r}")
    reason = annotation.get("reason")
    return start, text, QUINTD_CATEGORIES[kind], reason if isinstance(reason, str) else None


def annotator_folder(root: Path, annotator: str) -> Path:
    """Where `annotator`'s records are: annotations/<name>/, or annotations/other/<name>/ for the annotators
    added later."""
    own = root / "annotations" / annotator
    return own if annotator in ("human", "human_corr", "gpt-4") else root / "annotations" / "other" / annotator


def read_quintd(
    root: Path,
    annotator: str,
    *,
    domains: Sequence[str] = QUINTD_DOMAINS,
    on_mismatch: Mismatch = "error",
    empty_spans: Literal["error", "drop"] = "error",
) -> Iterator[QuintdOutput]:
    """Every annotated output of `annotator` in `domains`, in file and line order.

    `root` is the quintd1 folder (holding `annotations/` and `outputs/`). A span whose text is
    not at its offset is an error by default; `relocate` moves it to the nearest occurrence of
    its text (an error if there is none), `relocate_or_drop` skips spans found nowhere, and
    `drop` skips every misplaced span (skipped ones are listed in `QuintdOutput.dropped`). An
    empty span (GPT-4 marks "no errors" so, twice in wikidata) is an error unless `empty_spans`
    is `drop`.
    """
    if annotator not in QUINTD_ANNOTATORS:
        raise InputError(f"unknown quintd-1 annotator '{annotator}'; choose one of {', '.join(QUINTD_ANNOTATORS)}")
    bad = [d for d in domains if d not in QUINTD_DOMAINS]
    if bad:
        raise InputError(f"unknown quintd-1 domain(s) {', '.join(bad)}; known: {', '.join(QUINTD_DOMAINS)}")
    folder = annotator_folder(root, annotator)
    files = sorted(folder.glob("*.jsonl"))
    if not files:
        raise InputError(f"{folder}: no annotation files found")
    outputs: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for path in files:
        for where, record in iter_jsonl(path):
            domain, model, index = record.get("dataset"), record.get("model"), record.get("table_idx")
            if domain not in QUINTD_DOMAINS or model not in QUINTD_MODELS or not isinstance(index, int):
                raise InputError(f"{where}: needs a known 'dataset', 'model' and an int 'table_idx'")
            if domain not in domains:
                continue
            key = (domain, model)
            generated_path = root / "outputs" / "test" / domain / "default" / f"{model}.json"
            if key not in outputs:
                outputs[key] = _read_generated(generated_path)
            if not 0 <= index < len(outputs[key]):
                raise InputError(f"{where}: missing output: {generated_path} has no output {index}")
            output, prompt = outputs[key][index]["out"], outputs[key][index]["in"]
            data = quintd_input(prompt)
            if data is None:
                raise InputError(f"{where}: missing input: output {index} of {generated_path} has no data block")
            if not output.strip():
                raise InputError(f"{where}: missing output: output {index} of {generated_path} is empty")
            spans, dropped = [], []
            annotations = record.get("annotations") or []
            if not isinstance(annotations, list):
                raise InputError(f"{where}: 'annotations' must be a list")
            for annotation in annotations:
                start, text, category, reason = _span_fields(annotation, where)
                if not text:  # GPT-4 sometimes notes "no errors" as an empty span: it marks nothing
                    if empty_spans == "error":
                        raise InputError(f"{where}: empty span at offset {start} (empty_spans: drop skips it)")
                    dropped.append(f"(empty)@{start}")
                    continue
                placed = _place(text, start, output, where, on_mismatch)
                if placed is None:
                    dropped.append(f"{text}@{start}")
                    continue
                moved = None if placed == start else start
                spans.append(QuintdSpan(placed, placed + len(text), category, reason, moved))
            yield QuintdOutput(
                domain=domain,
                model=model,
                index=index,
                annotator_id=str(record.get("annotator_id", annotator)),
                data=data,
                output=output,
                spans=tuple(spans),
                dropped=tuple(dropped),
                where=where,
            )
