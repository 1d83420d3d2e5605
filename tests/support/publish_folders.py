"""An imported annotation folder, as `spanjudge publish --dataset-dir` reads it."""

from __future__ import annotations

from pathlib import Path

from spanjudge.core.catalog import load_catalog
from spanjudge.data_gen.teacher import import_annotations
from support.quintd_files import GOOD, quintd_config, write_quintd

FAKE_TOKEN = "hf_fakeTOKENfakeTOKENfakeTOKEN1234567"  # a token-shaped string the secret scan must catch


def imported_folder(root: Path) -> Path:
    """What `spanjudge import` writes, plus files of an annotation folder that are never uploaded."""
    data = write_quintd(root / "data", GOOD)
    out = root / "annotated"
    import_annotations(quintd_config(data), root, out, load_catalog())
    (out / "cache.sqlite").write_bytes(b"SQLite format 3\x00 cached replies")
    (out / "unscored.jsonl").write_text("")
    (out / "notes.txt").write_text(f"token {FAKE_TOKEN}\n")  # not on the allow-list: never read
    return out
