"""Results files that cannot mean what they say: `render` and `score` never write over a file they did not write,
foreign rows are checked and no impossible offset is copied, and a scores row judged on another text is refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.faults import one_line, results_row

from spanjudge.app.cli import main as cli_main

OUTPUT = "The café opened in 1998 and closed in 2003 after a fire."


def _results(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _scores(path: Path, rows: list[dict] | None = None) -> Path:
    return _results(path, rows or [results_row("a", 60)])


@pytest.mark.parametrize("to", ["xcomet", "html"])
def test_render_never_overwrites_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], to: str
) -> None:
    results = _scores(tmp_path / "scores.jsonl")
    other = tmp_path / "other.jsonl"
    other.write_text('{"my": "data"}\n')
    assert cli_main(["render", str(results), "--to", to, "--out", str(other)]) == 2
    assert "the file exists and is not spanjudge's" in one_line(capsys) and other.read_text() == '{"my": "data"}\n'
    mine = tmp_path / f"mine.{to}"
    assert cli_main(["render", str(results), "--to", to, "--out", str(mine)]) == 0
    assert cli_main(["render", str(results), "--to", to, "--out", str(mine)]) == 0  # again: its own file
    assert cli_main(["render", str(results), "--to", to, "--out", str(results)]) == 2
    assert "is one of this command's inputs" in one_line(capsys)


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda row: row.pop("task"), "the row has no task"),
        (lambda row: row["evaluation"]["errors"][0].pop("explanation"), "error 1: has no explanation text"),
        (lambda row: row["evaluation"]["errors"][0].update(severity=None), "severity None is not an integer 1-5"),
        (lambda row: row["evaluation"]["errors"][0].update(severity=9), "severity 9 is not an integer 1-5"),
        (lambda row: row["evaluation"]["errors"][0].update(start="0"), "offsets '0', 1 are not both integers"),
        (lambda row: row["evaluation"]["errors"][0].update(end=99), r"offsets \[0, 99\) are not a range inside"),
        (lambda row: row["evaluation"]["errors"][0].update(start=-2), r"offsets \[-2, 1\) are not a range inside"),
    ],
)
@pytest.mark.parametrize("to", ["xcomet", "factgenie"])
def test_render_checks_foreign_rows_and_copies_no_impossible_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, said: str, to: str
) -> None:
    row = results_row("a", 60)
    change(row)
    results = _scores(tmp_path / "scores.jsonl", [row])
    assert cli_main(["render", str(results), "--to", to]) == 2
    line = one_line(capsys)
    assert f"{results}:1" in line and __import__("re").search(said, line), line
    assert not (tmp_path / "scores.xcomet.jsonl").exists() and not (tmp_path / "scores-factgenie").exists()


def test_a_scores_row_judged_on_another_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spanjudge.inference.score.interchange import write_factgenie_campaign

    start = OUTPUT.index("1998")
    row = {"id": "a", "task": "summeval", "aspect": "consistency", "output": OUTPUT,
           "evaluation": {"score": 60, "errors": [{"location": "1998", "start": start, "end": start + 4,
                                                   "severity": 3, "explanation": "e"}]}}  # fmt: skip
    scores = _results(tmp_path / "scores.jsonl", [row])

    def campaign(folder: Path, output: str) -> Path:
        metadata = {"id": "humans", "config": {"annotation_span_categories": [{"name": "Incorrect"}]}}
        record = {"dataset": "cafes", "split": "test", "setup_id": "gpt", "example_idx": 0, "output": output,
                  "metadata": {"spanjudge_id": "a", "task": "summeval", "aspect": "consistency"},
                  "annotations": [{"text": output[start : start + 4], "start": start, "type": 0}]}  # fmt: skip
        write_factgenie_campaign(folder, metadata, [record], "humans-1")
        return folder

    same = campaign(tmp_path / "same", OUTPUT)
    args = ["meta-eval", "--judge", f"scores:{scores}", "--spans"]
    assert cli_main([*args, f"factgenie:{same}", "--out", str(tmp_path / "e1")]) == 0
    other = campaign(tmp_path / "other", OUTPUT.replace("1998", "2001").replace("café", "shop"))  # ids match, texts not
    assert cli_main([*args, f"factgenie:{other}", "--out", str(tmp_path / "e2")]) == 2
    line = one_line(capsys)
    assert f"{scores}:1: id 'a' was judged on another text" in line and "they part at character 4" in line, line


def test_score_never_writes_its_page_over_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "scores.html"
    page.write_text("<p>my notes</p>")
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "x", "summary": "y"}) + "\n")
    args = ["score", "--model", "judge", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1",
            "--data", str(data), "--out", str(tmp_path / "scores.jsonl"), "--task", "qags_xsum",
            "--aspect", "factual consistency", "--input", "Article=article", "--output-field", "summary",
            "--format", "html"]  # fmt: skip
    assert cli_main(args) == 2
    assert "the file exists and is not spanjudge's page" in one_line(capsys)
    assert page.read_text() == "<p>my notes</p>" and not (tmp_path / "scores.jsonl").exists()
