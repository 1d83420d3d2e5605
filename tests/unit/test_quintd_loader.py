"""`load_quintd1` reads a quintd-1 folder once per process and state of its files: what a changed file holds is
read again, and no caller's list is another caller's."""

from __future__ import annotations

import json
from pathlib import Path

from support.quintd_files import GOOD, write_quintd

from spanjudge.eval.spans.quintd import load_quintd1


def test_a_changed_annotation_file_is_read_again_and_each_caller_gets_its_own_list(tmp_path: Path) -> None:
    root = write_quintd(tmp_path, GOOD)
    first = load_quintd1(root, annotator="gpt-4")
    assert [len(d.gold) for d in first] == [2, 0]
    first.clear()  # a caller's list is its own
    assert [len(d.gold) for d in load_quintd1(root, annotator="gpt-4")] == [2, 0]
    records = root / "spans/quintd1/annotations/gpt-4/gpt-4-wikidata-test-llama2.jsonl"
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    rows[0]["annotations"] = rows[0]["annotations"][:1]  # one span fewer: the file changes
    records.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert [len(d.gold) for d in load_quintd1(root, annotator="gpt-4")] == [1, 0]
    assert [len(d.gold) for d in load_quintd1(root, annotator="gpt-4", limit=1)] == [1]
