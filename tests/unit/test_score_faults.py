"""`spanjudge score` faults (issue #19): resuming under other settings, results written as they
finish, a results file with a torn or unterminated last line, `--out` that is not a results
file, and data files that are not plain UTF-8.

The judge is the scripted stand-in server of tests/support/standin.py behind the real `openai` engine
(chat API: a model name that is no folder loads no tokenizer), so every test runs the whole
command in well under a second of model time.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from support.standin import Reply, StandIn

from spanjudge.app.cli import main as cli_main

TASK, ASPECT = "qags_xsum", "factual consistency"
GOOD = "Error 1:\nLocation: on a hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"
Serve = Callable[..., tuple[StandIn, str]]


def _items(path: Path, count: int) -> Path:
    rows = [
        {"id": f"item-{n}", "article": f"The cat {n} sat on the mat.", "summary": "A cat sat on a hat."}
        for n in range(count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _score(url: str, data: Path, out: Path, *more: str) -> int:
    return cli_main(
        [
            "score", "--model", "stand-in-judge", "--engine", "openai", "--base-url", url, "--served-model", "judge",
            "--data", str(data), "--out", str(out), "--task", TASK, "--aspect", ASPECT,
            "--input", "Article=article", "--output-field", "summary", "--max-new-tokens", "96", *more,
        ]
    )  # fmt: skip


def _rows(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines and "Traceback" not in "\n".join(lines)
    return lines[-1]


# -- item 4: a resumed run must be the same run --------------------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            ["--aspect", "fluency", "--aspect-definition", "How fluent the summary is."],
            "--aspect 'factual consistency', not 'fluency' as now",
        ),
        (["--task", "qags_cnndm"], "--task 'qags_xsum', not 'qags_cnndm' as now"),
        (
            ["--model", "another-judge"],
            "judge 'stand-in-judge (served as judge)', not 'another-judge (served as judge)' as now",
        ),
        (["--max-new-tokens", "200"], "decoding max_new_tokens=96, not 200 as now"),
        (["--constrained"], "decoding constrained=False, not True as now"),
    ],
    ids=["aspect", "task", "model", "max-new-tokens", "constrained"],
)
def test_resuming_under_other_settings_is_refused(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str], expected: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data, out = _items(tmp_path / "items.jsonl", 3), tmp_path / "scores.jsonl"
    assert _score(url, data, out) == 0
    before = out.read_text(encoding="utf-8")
    capsys.readouterr()
    code = _score(url, data, out, *change)  # the option given again: its last value counts
    line = _error_line(capsys)
    assert code == 2, line
    assert f"{out}:1: id 'item-0' was scored with {expected}" in line
    assert "another --out" in line
    assert out.read_text(encoding="utf-8") == before and stand_in.hits == 3  # nothing scored again


def test_resuming_after_the_data_changed_is_refused(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _stand_in, url = serve([Reply(text=GOOD)])
    data, out = _items(tmp_path / "items.jsonl", 2), tmp_path / "scores.jsonl"
    assert _score(url, data, out) == 0
    data.write_text(data.read_text().replace("A cat sat on a hat.", "A dog sat on a hat."), encoding="utf-8")
    capsys.readouterr()
    assert _score(url, data, out) == 2
    assert f"{out}:1: id 'item-0' was scored with another prompt" in _error_line(capsys)


def test_the_same_run_resumes_and_records_its_key(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data, out = _items(tmp_path / "items.jsonl", 3), tmp_path / "scores.jsonl"
    assert _score(url, data, out) == 0
    row = _rows(out)[0]
    assert row["model"] == "stand-in-judge (served as judge)" and row["aspect"] == ASPECT
    assert row["decoding"] == {"max_new_tokens": 96, "retries": 3, "constrained": False}
    assert len(row["prompt_sha256"]) == 16
    capsys.readouterr()
    assert _score(url, data, out) == 0
    assert "3 already scored" in capsys.readouterr().err and stand_in.hits == 3


# -- item 8: results reach the file as they finish -----------------------------------------


def test_each_result_is_on_disk_before_the_next_call(serve: Serve, tmp_path: Path) -> None:
    data, out = _items(tmp_path / "items.jsonl", 4), tmp_path / "scores.jsonl"
    rows_at_call: list[int] = []

    def reply(body: dict[str, Any]) -> Reply:  # a kill at this moment keeps what the file holds
        rows_at_call.append(len(out.read_text().splitlines()) if out.exists() else 0)
        return Reply(text=GOOD)

    _stand_in, url = serve(reply)
    assert _score(url, data, out) == 0
    assert rows_at_call == [0, 1, 2, 3]  # before: nothing until the 32-item chunk finished


def test_a_last_row_without_its_newline_is_kept_and_not_glued(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    out = tmp_path / "scores.jsonl"
    assert _score(url, _items(tmp_path / "two.jsonl", 2), out) == 0
    out.write_text(out.read_text(encoding="utf-8").rstrip("\n"), encoding="utf-8")  # e.g. saved by an editor
    assert _score(url, _items(tmp_path / "three.jsonl", 3), out) == 0
    assert [row["id"] for row in _rows(out)] == ["item-0", "item-1", "item-2"]  # each on its own line
    capsys.readouterr()
    assert _score(url, tmp_path / "three.jsonl", out) == 0
    assert "3 already scored" in capsys.readouterr().err and stand_in.hits == 3


def test_a_torn_last_line_is_cut_and_the_rows_before_it_are_kept(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data, out = _items(tmp_path / "items.jsonl", 3), tmp_path / "scores.jsonl"
    assert _score(url, data, out) == 0
    lines = out.read_text(encoding="utf-8").splitlines(keepends=True)
    out.write_text(lines[0] + lines[1] + lines[2][: len(lines[2]) // 2], encoding="utf-8")  # killed mid-write
    capsys.readouterr()
    assert _score(url, data, out) == 0
    assert "2 already scored" in capsys.readouterr().err and stand_in.hits == 4
    assert out.read_text(encoding="utf-8").splitlines(keepends=True)[:2] == lines[:2]
    assert [row["id"] for row in _rows(out)] == ["item-0", "item-1", "item-2"]


# -- item 12: files that are not what they should be -------------------------------------


def test_out_that_is_the_data_file_is_one_line(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data = _items(tmp_path / "items.jsonl", 2)
    before = data.read_text()
    assert _score(url, data, data) == 2
    assert "is the --data file; write the results to another file" in _error_line(capsys)
    assert data.read_text() == before and stand_in.hits == 0


@pytest.mark.parametrize("line", ['{"text": "a row without an id"}', '{"id": "item-0", "summary": "no evaluation"}'])
def test_out_that_is_not_a_results_file_is_one_line(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    out = tmp_path / "other.jsonl"
    out.write_text(line + "\n")
    assert _score(url, _items(tmp_path / "items.jsonl", 2), out) == 2
    assert f"{out}:1: not a result of `spanjudge score`" in _error_line(capsys)
    assert out.read_text() == line + "\n" and stand_in.hits == 0


def test_render_of_a_file_that_is_not_results_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "results.jsonl"
    results.write_text('{"evaluation": {"score": 50}}\n')
    assert cli_main(["render", str(results)]) == 2
    assert f"{results}:1: not a result of `spanjudge score`" in _error_line(capsys)


def test_a_csv_with_a_byte_order_mark_keeps_its_ids(serve: Serve, tmp_path: Path) -> None:
    _stand_in, url = serve([Reply(text=GOOD)])
    data, out = tmp_path / "items.csv", tmp_path / "scores.jsonl"
    data.write_text("id,article,summary\nfirst,The cat sat on the mat.,A cat sat on a hat.\n", encoding="utf-8-sig")
    assert _score(url, data, out) == 0
    assert [row["id"] for row in _rows(out)] == ["first"]  # before: the BOM hid the id column: "0"


@pytest.mark.parametrize("suffix", ["jsonl", "csv", "json"])
def test_bytes_that_are_not_utf8_are_one_line_with_the_line(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], suffix: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data = tmp_path / f"items.{suffix}"
    latin1 = "A café sat on a hat.".encode("latin-1")
    if suffix == "jsonl":
        data.write_bytes(
            b'{"id": "a", "article": "A.", "summary": "B."}\n{"id": "b", "article": "A.", "summary": "'
            + latin1
            + b'"}\n'
        )
    elif suffix == "csv":
        data.write_bytes(b"id,article,summary\na,A.,B.\nb,A.," + latin1 + b"\n")
    else:
        data.write_bytes(
            b'[{"id": "a", "article": "A.", "summary": "B."},\n {"id": "b", "article": "A.", "summary": "'
            + latin1
            + b'"}]'
        )
    assert _score(url, data, tmp_path / "scores.jsonl") == 2
    line = _error_line(capsys)
    expected_line = 3 if suffix == "csv" else 2
    assert f"{data}:{expected_line}: not UTF-8 text (byte 0xe9" in line and "save the file as UTF-8" in line
    assert stand_in.hits == 0


def test_a_judge_is_its_weights_not_its_folder(tmp_path: Path) -> None:
    """More training into the same run folder, or a replaced adapter, is another judge: its rows never resume
    the old one's. Metadata beside the weights (a stored decision rule) leaves the judge as it was."""
    from spanjudge.core.errors import InputError
    from spanjudge.inference.score.rows import check_results_file
    from spanjudge.inference.score.stage import model_identity

    adapter = tmp_path / "run" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text('{"r": 16, "lora_alpha": 32}')
    (adapter / "adapter_model.safetensors").write_bytes(b"first weights")
    (adapter / "spanjudge.json").write_text('{"format": "spanjudge-judge/1"}')
    first = model_identity(str(adapter), None, "transformers", None)
    assert first.startswith(f"{adapter.resolve()} (weights ")
    (adapter / "spanjudge.json").write_text('{"format": "spanjudge-judge/1", "decisions": {}}')
    assert model_identity(str(adapter), None, "transformers", None) == first
    (adapter / "adapter_model.safetensors").write_bytes(b"trained further")
    second = model_identity(str(adapter), None, "transformers", None)
    assert second != first and second.startswith(f"{adapter.resolve()} (weights ")

    row = {"id": "item-0", "task": TASK, "aspect": ASPECT, "model": first, "decoding": {}, "prompt_sha256": "p"}
    key = {**row, "model": second}
    with pytest.raises(InputError, match=r"scores\.jsonl:1: id 'item-0' was scored with judge .*, not .* as now"):
        check_results_file(tmp_path / "scores.jsonl", {"item-0": ("scores.jsonl:1", row)}, {"item-0": key})
