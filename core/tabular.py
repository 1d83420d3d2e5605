"""Rows of JSONL, JSON-list and CSV files, each with where it came from ("file:line"); also
the foreign formats `spanjudge score` reads: lm-evaluation-harness samples and plain text
files line by line.

Every stage reads user data through these (JSONL through `jsonl.iter_jsonl`, re-exported
here), so a malformed line gets the same one-line message, naming the file and the line,
wherever it is read. Files are UTF-8; a byte order mark (Excel writes one at the start of
"CSV UTF-8") is dropped, not read as part of the first header or value, and bytes that are not
UTF-8 are reported with their line.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
from collections.abc import Iterator
from pathlib import Path

from .errors import InputError
from .jsonl import Located, iter_jsonl, json_object, not_utf8  # the JSONL reader (also imported from here)


def read_text(path: Path) -> str:
    """The whole file as text, without a byte order mark; InputError naming the line of the
    first byte that is not UTF-8."""
    data = path.read_bytes()
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        start = exc.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        line_start = data.rfind(b"\n", 0, start) + 1
        raise not_utf8(path, data.count(b"\n", 0, start) + 1, start - line_start + 1, data[start]) from None


def iter_json_list(path: Path) -> Iterator[Located]:
    """The objects of a file holding one JSON list."""
    try:
        value = json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    if not isinstance(value, list):
        raise InputError(f"{path}: expected a JSON list of objects")
    for index, item in enumerate(value):
        yield f"{path}[{index}]", json_object(item, f"{path}[{index}]")


def iter_csv(path: Path) -> Iterator[Located]:
    """Rows by header; line numbers count the header as line 1."""
    handle = io.StringIO(read_text(path), newline="")  # newline="": the csv module's own line handling
    for number, row in enumerate(csv.DictReader(handle), start=2):
        yield f"{path}:{number}", dict(row)


# -- foreign formats: rows in the shape `spanjudge score` reads ------------------------------


def iter_lm_eval_samples(path: Path) -> Iterator[Located]:
    """The samples lm-evaluation-harness logs with `--log_samples` (samples_<task>_<date>.jsonl),
    one per line: `doc_id`, `doc` (the dataset row), `target`, `arguments`, `resps` (per
    request, every response), `filtered_resps` (per request, after the task's filter), `filter`...

    Each row is the sample as logged plus `id` (the doc_id, with "/FILTER" when the task logs a
    filter other than "none": one document appears once per filter) and `output` (the generated
    text: `filtered_resps`, else `resps`), so `--input HEADER=doc.FIELD` maps the source."""
    for where, sample in iter_jsonl(path):
        if "doc_id" not in sample or not isinstance(sample.get("doc"), dict):
            raise InputError(
                f"{where}: not an lm-evaluation-harness sample (no 'doc_id' and 'doc'); written by --log_samples?"
            )
        output = only_value(sample.get("filtered_resps", sample.get("resps")))
        if not isinstance(output, str):
            raise InputError(
                f"{where}: the sample holds no generated text (filtered_resps is {json.dumps(output)[:60]}); "
                "only generate_until tasks have outputs to evaluate"
            )
        item = str(sample["doc_id"])
        if sample.get("filter") not in (None, "none"):
            item += f"/{sample['filter']}"
        yield where, {**sample, "id": item, "output": output}


def only_value(value: object) -> object:
    """A value with single-item lists unwrapped (lm-eval logs a response as [[text]])."""
    while isinstance(value, list) and len(value) == 1:
        value = value[0]
    return value


PARALLEL_FIELDS = ("src", "hyp", "ref")  # the row fields of `iter_parallel_text`


def iter_parallel_text(files: dict[str, Path]) -> Iterator[Located]:
    """Plain text files read in parallel, one item per line (e.g. {"src": ..., "hyp": ...}):
    row n holds line n of each file, by its key, and `id` n. Every file must have as many
    lines as the first, or InputError naming the one that differs."""
    lines = {key: _lines(path) for key, path in files.items()}
    (first_key, first), *others = lines.items()
    for key, texts in others:
        if len(texts) != len(first):
            raise InputError(
                f"{files[key]}: {len(texts)} lines, but {files[first_key]} has {len(first)}; "
                f"--{key} and --{first_key} must hold one item per line, line for line"
            )
    for number in range(len(first)):
        yield f"{files[first_key]}:{number + 1}", {"id": str(number + 1), **{k: t[number] for k, t in lines.items()}}


def _lines(path: Path) -> list[str]:
    """The lines of a text file (\\n or \\r\\n), without a final empty one; only \\n splits, so a
    text may hold other line-like characters (form feed, U+2028)."""
    if not path.is_file():
        raise InputError(f"file not found: {path}")
    text = read_text(path)
    if text.endswith("\n"):
        text = text[:-1]
    return [line.removesuffix("\r") for line in text.split("\n")] if text else []
