"""The one JSONL reader, the one append-only store (issue #16 item 2) and the typed score row
(item 3): a second writer is refused naming the holder, a torn last line is repaired, done rows
are skipped, a store re-opens where it left off; the reader drops a byte order mark and names
file:line for a bad line. Real files and a real second process, no mocks."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from spanjudge.core.errors import InputError
from spanjudge.core.jsonl import JsonlStore, iter_jsonl, jsonl_lines, lock_path, read_jsonl
from spanjudge.core.locks import Busy
from spanjudge.core.progress import tracker_bars
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.judging.store import JudgmentStore
from spanjudge.eval.perturb.llm_perturb import FrozenStore
from spanjudge.inference.score.rows import ScoreRow, ScoreStore, finished_rows, read_results, read_score_rows


def _by_id(where: str, row: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    if "id" not in row:
        raise InputError(f"{where}: no id")
    return str(row["id"]), row


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True)


# -- the reader ------------------------------------------------------------------------------


def test_the_reader_drops_a_byte_order_mark_and_skips_blank_lines(tmp_path: Path) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_text('{"id": "a", "text": "é"}\n\n   \n{"id": "b"}\n', encoding="utf-8-sig")
    assert list(jsonl_lines(path)) == [(1, {"id": "a", "text": "é"}), (4, {"id": "b"})]
    assert [where for where, _ in iter_jsonl(path)] == [f"{path}:1", f"{path}:4"]
    assert read_jsonl(tmp_path / "absent.jsonl", missing_ok=True) == []


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"id": "a"}\n{"id": \n', ":2: not valid JSON"),
        ('{"id": "a"}\n[1, 2]\n', ":2: expected a JSON object, got list"),
        ('{"id": "a"}\n{"id": "\xe9"}\n'.encode("latin-1"), ":2: not UTF-8 text (byte 0xe9"),
    ],
)
def test_a_bad_line_is_one_error_naming_file_and_line(tmp_path: Path, content: str | bytes, message: str) -> None:
    path = tmp_path / "rows.jsonl"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with pytest.raises(InputError) as error:
        read_jsonl(path)
    assert f"{path}{message}" in str(error.value) and "\n" not in str(error.value)
    with pytest.raises(InputError, match="file not found"):
        read_jsonl(tmp_path / "absent.jsonl")


# -- the store -------------------------------------------------------------------------------


def test_a_torn_last_line_is_cut_and_a_whole_one_gets_its_newline(tmp_path: Path) -> None:
    path = tmp_path / "store.jsonl"
    with JsonlStore(path, _by_id) as store:
        store.append([{"id": "a"}, {"id": "b"}])
    kept = path.read_bytes()
    path.write_bytes(kept + b'{"id": "c", "te')  # killed mid-write
    with JsonlStore(path, _by_id) as store:
        assert set(store.found) == {"a", "b"}
        assert path.read_bytes() == kept  # the rows before it are untouched
        store.append([{"id": "c"}])
    assert [json.loads(line)["id"] for line in _lines(path)] == ["a", "b", "c"]

    path.write_bytes(path.read_bytes().rstrip(b"\n"))  # saved by an editor without the last newline
    with JsonlStore(path, _by_id) as store:
        assert set(store.found) == {"a", "b", "c"}
        store.append([{"id": "d"}])
    assert [json.loads(line)["id"] for line in _lines(path)] == ["a", "b", "c", "d"]


def test_done_rows_are_found_and_a_reopened_store_goes_on(tmp_path: Path) -> None:
    path = tmp_path / "store.jsonl"
    with JsonlStore(path, _by_id) as store:
        assert store.found == {} and "a" not in store
        store.append([{"id": "a", "v": 1}])
        assert "a" in store and store.get("a") == {"id": "a", "v": 1}
    path.write_text(path.read_text() + "\n")  # a blank line still counts for the line numbers
    with JsonlStore(path, _by_id) as again:
        assert again.found == {"a": {"id": "a", "v": 1}}
        again.append([{"id": "a", "v": 2}, {"id": "b"}])  # the last row of a key wins
        assert again.get("a") == {"id": "a", "v": 2}
    with ScoreStore(tmp_path / "scores.jsonl") as scores:
        scores.append([{"id": "x", "evaluation": {"score": 50}}, {"id": "y", "evaluation": {"score": None}}])
        assert scores.found["y"][0] == f"{tmp_path / 'scores.jsonl'}:2"  # where each row is
    assert set(finished_rows(tmp_path / "scores.jsonl")) == {"x", "y"}


def test_a_damaged_line_before_the_last_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "store.jsonl"
    path.write_text('{"id": "a"}\n{not json\n{"id": "b"}\n')
    with pytest.raises(InputError, match=r"store\.jsonl:2: not valid JSON"):
        JsonlStore(path, _by_id)
    path.write_text('{"id": "a"}\n{"other": 1}\n')
    with pytest.raises(InputError, match=r"store\.jsonl:2: no id"):
        JsonlStore(path, _by_id)
    assert not lock_path(path).exists()  # a refused open holds nothing


HOLDER = """
import sys
from pathlib import Path
from spanjudge.core.jsonl import JsonlStore
store = JsonlStore(Path(sys.argv[1]), lambda where, row: (row["id"], row), command="spanjudge score")
print("holding", flush=True)
sys.stdin.readline()  # hold until the test says so
"""


def _hold_in_another_process(path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "holding"
    return holder


def _release(holder: subprocess.Popen[str]) -> None:
    holder.communicate("\n", timeout=30)


def test_a_second_writer_is_refused_naming_the_holder(tmp_path: Path) -> None:
    path = tmp_path / "scores.jsonl"
    path.write_text('{"id": "a", "evaluation": {"score": 50}}\n')
    holder = _hold_in_another_process(path)
    try:
        for opening in (lambda: JsonlStore(path, _by_id), lambda: ScoreStore(path), lambda: finished_rows(path)):
            with pytest.raises(Busy) as refused:
                opening()
            message = str(refused.value)
            assert f"{path} is in use by `spanjudge score` (pid {holder.pid}" in message
            assert "choose another --out" in message and "\n" not in message
    finally:
        _release(holder)
    with JsonlStore(path, _by_id) as store:  # the lock went with the holder
        store.append([{"id": "b"}])
    assert not lock_path(path).exists()  # and no lock file is left beside the data


def test_a_second_score_run_on_the_same_out_is_refused_before_any_model_loads(tmp_path: Path) -> None:
    from spanjudge.inference.score.stage import ScoreSettings, score_file

    data, out = tmp_path / "items.jsonl", tmp_path / "scores.jsonl"
    data.write_text('{"id": "1", "article": "The cat sat on the mat.", "summary": "A cat sat on a hat."}\n')
    settings = ScoreSettings(
        model="stand-in-judge", out=out, data=str(data), task="qags_xsum", aspect="factual consistency",
        engine="openai", base_url="http://127.0.0.1:9/v1", input_field=["Article=article"], output_field="summary",
    )  # fmt: skip
    holder = _hold_in_another_process(out)
    try:
        with pytest.raises(Busy, match=rf"{out} is in use by `spanjudge score` \(pid {holder.pid}"):
            score_file(settings, Console(file=io.StringIO()))
    finally:
        _release(holder)
    assert not out.exists()  # nothing was written, no model was asked


def test_judgment_and_frozen_stores_refuse_a_second_writer(tmp_path: Path) -> None:
    for path in (tmp_path / "judgments" / "j.jsonl", tmp_path / "frozen.jsonl"):
        holder = _hold_in_another_process(path)
        try:
            with pytest.raises(Busy, match="is in use by"):
                JudgmentStore(path) if path.parent.name == "judgments" else FrozenStore(path)
        finally:
            _release(holder)


def test_one_process_shares_its_lock(tmp_path: Path) -> None:
    path = tmp_path / "judgments" / "j.jsonl"
    first = JudgmentStore(path)
    second = JudgmentStore(path)  # a step that reopens its own store is not another run
    first.add("summeval", "coherence", [("1", Judgment(50.0, None, None))])
    second.add("summeval", "coherence", [("2", Judgment(None, "no reply parsed", None))])
    first.close()
    assert lock_path(path).exists()  # still held by `second`
    second.close()
    assert not lock_path(path).exists()
    again = JudgmentStore(path)
    assert again.found == {
        ("summeval", "coherence", "1"): Judgment(50.0, None, None),
        ("summeval", "coherence", "2"): Judgment(None, "no reply parsed", None),
    }
    again.close()


# -- the typed score row ---------------------------------------------------------------------


class _Named:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


def test_a_score_row_is_written_and_read_back_typed(tmp_path: Path) -> None:
    request = _Named(id="item-0", task=_Named(id="summarization"), aspect=_Named(name="coherence"), output="A cat.")
    error = _Named(
        model_dump=lambda: {"location": "A cat.", "explanation": "Not a cat.", "severity": 2, "start": 0, "end": 6}
    )
    evaluation = _Named(
        errors=[error], score=60, unscored_reason=None, truncated=None, attempts=1, raw_replies=["reply"]
    )
    key = {"task": "summarization", "aspect": "coherence", "model": "m", "decoding": {"retries": 3}}
    line = ScoreRow.of(request, evaluation, key | {"prompt_sha256": "abc"}).line()
    assert list(line) == ["id", "task", "aspect", "model", "decoding", "prompt_sha256", "output", "evaluation",
                          "unscored_reason", "truncated", "attempts", "raw_replies"]  # fmt: skip
    assert line["evaluation"] == {"errors": [error.model_dump()], "score": 60}  # an int stays an int
    assert "model" not in ScoreRow.of(request, evaluation).line()  # no key given: none written
    out = tmp_path / "scores.jsonl"
    with ScoreStore(out) as store:
        store.append([line])
    [row] = read_score_rows(out)
    assert row.id == "item-0" and row.evaluation.score == 60 and row.decoding == {"retries": 3}
    assert read_results(out) == [line]

    out.write_text('{"id": 7, "evaluation": {"score": "high"}}\n')
    with pytest.raises(InputError) as error_line:
        read_results(out)
    assert f"{out}:1: not a result of `spanjudge score` (evaluation.score:" in str(error_line.value)


# -- the progress protocol -------------------------------------------------------------------


def test_a_tracker_row_resumes_and_keeps_its_tallies() -> None:
    log = Console(file=io.StringIO(), force_terminal=False)
    with tracker_bars("{task.description}", console=log) as tracker:
        advance = tracker("summeval/coherence", 4, done=2, failed=0)
        advance(1)
        advance(1, failed=1)
    lines = log.file.getvalue().splitlines()
    assert lines[0].startswith("summeval/coherence: 3/4 (") and lines[0].endswith("failed 0)")
    assert lines[-1].startswith("summeval/coherence: 4/4 (") and lines[-1].endswith("failed 1)")
