"""A factgenie campaign that cannot be read, or a folder named like an annotation file, is one line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from spanjudge.core.errors import InputError
from spanjudge.inference.score.interchange import read_factgenie_campaign

OUTPUT = "The café opened in 1998 and closed in 2003 after a fire."


def _campaign(folder: Path, *, metadata: Any = None, lines: list[bytes] | None = None) -> Path:
    (folder / "files").mkdir(parents=True)
    categories = {"config": {"annotation_span_categories": [{"name": "Incorrect", "color": "#f00"}]}}
    (folder / "metadata.json").write_text(json.dumps(categories if metadata is None else metadata))
    record = {"dataset": "d", "split": "test", "setup_id": "s", "example_idx": 0, "output": OUTPUT,
              "annotations": [{"text": "1998", "start": OUTPUT.index("1998"), "type": 0}]}  # fmt: skip
    (folder / "files" / "a.jsonl").write_bytes(b"\n".join(lines or [json.dumps(record).encode()]) + b"\n")
    return folder


def _record(**changes: Any) -> bytes:
    record = {"dataset": "d", "split": "test", "setup_id": "s", "example_idx": 0, "output": OUTPUT,
              "annotations": [{"text": "1998", "start": OUTPUT.index("1998"), "type": 0}], **changes}  # fmt: skip
    return json.dumps(record).encode()


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda f: _campaign(f, lines=[_record(), "caf\xe9".encode("latin-1")]), r"a\.jsonl:2: not UTF-8 text"),
        (lambda f: _campaign(f, metadata=[1, 2]), r"metadata\.json: not a factgenie campaign's metadata"),
        (
            lambda f: _campaign(f, metadata={"config": {"annotation_span_categories": [{"color": "#f00"}]}}),
            r"metadata\.json: span category 0 has no name",
        ),
        (lambda f: _campaign(f, lines=[_record(output=17)]), r"a\.jsonl:1: the record's output must be text, got int"),
        (lambda f: _campaign(f, lines=[_record(annotations=["1998"])]), r"a\.jsonl:1: a span must be an object"),
        (
            lambda f: _campaign(f, lines=[_record(annotations=[{"text": "fire.", "start": -5, "type": 0}])]),
            r"a\.jsonl:1: span 'fire\.' is not at character -5",
        ),
        (lambda f: _campaign(f, lines=[_record(metadata=[1])]), r"a\.jsonl:1: the record's metadata must be an object"),
    ],
)
def test_a_hostile_campaign_is_one_line(tmp_path: Path, build: Any, said: str) -> None:
    folder = build(tmp_path / "campaign")
    with pytest.raises(InputError, match=said):
        read_factgenie_campaign(folder)


def test_a_folder_named_like_an_annotation_file_is_one_line(tmp_path: Path) -> None:
    folder = _campaign(tmp_path / "campaign")
    (folder / "files" / "x.jsonl").mkdir()
    with pytest.raises(InputError, match=r"x\.jsonl: is not a file"):
        read_factgenie_campaign(folder)
