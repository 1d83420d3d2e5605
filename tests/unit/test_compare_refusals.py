"""`compare` refuses apples against oranges (another aspect or judge, a score outside the contract, repeated ids,
string severities, a bad alpha), never writes over a file it did not write, and keeps a many-category plot readable."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from support.faults import one_line, results_row

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.eval.compare import compare_systems, markdown


def _system(scores: list[Any], **settings: Any) -> list[dict]:
    return [results_row(f"i{n}", score, **settings) for n, score in enumerate(scores)]


def test_compare_refuses_results_of_another_aspect_or_judge_unless_allowed() -> None:
    a = _system([40, 50, 60, 70])
    with pytest.raises(InputError, match=r"different aspects \(A: relevance; B: coherence\).*--allow-mixed"):
        compare_systems({"A": a, "B": _system([50, 60, 70, 80], aspect="coherence")}, resamples=100)
    with pytest.raises(InputError, match="different judges"):
        compare_systems({"A": a, "B": _system([50, 60, 70, 80], model="judge-b")}, resamples=100)
    mixed = compare_systems(
        {"A": a, "B": _system([50, 60, 70, 80], aspect="coherence")}, resamples=100, allow_mixed=True
    )
    assert mixed.mixed == {"aspect": {"A": "relevance", "B": "coherence"}}
    assert markdown(mixed).startswith("**Mixed settings (--allow-mixed)**: the systems differ in aspect")
    with pytest.raises(InputError, match="system 'A' mixes rows of several aspects"):
        compare_systems({"A": [*a, results_row("i9", 10, aspect="coherence")], "B": a}, resamples=100)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (math.nan, "score nan is not a number within 0-100"),
        (math.inf, "score inf is not a number within 0-100"),
        (1e9, "score 1000000000.0 is not a number within 0-100"),
        ("70", "score '70' is not a number within 0-100"),
    ],
)
def test_compare_refuses_a_score_outside_the_contract(bad: Any, said: str) -> None:
    a, b = _system([40, 50, 60, 70]), _system([50, 60, 70, 80])
    b[2]["evaluation"]["score"] = bad
    with pytest.raises(InputError, match=rf"system 'B', id 'i2' \(row 3\): {said}"):
        compare_systems({"A": a, "B": b}, resamples=100)


def test_compare_refuses_repeated_ids_string_severities_and_a_bad_alpha() -> None:
    a, b = _system([40, 50, 60, 70]), _system([50, 60, 70, 80])
    with pytest.raises(InputError, match=r"system 'B': id 'i1' appears twice \(row 5\)"):
        compare_systems({"A": a, "B": [*b, results_row("i1", 99)]}, resamples=100)
    with pytest.raises(InputError, match="severity 'major' is not a number within 1-5"):
        compare_systems({"A": a, "B": _system([50, 60, 70, 80], severity="major")}, resamples=100)
    for alpha in (1.5, 0, -0.1):
        with pytest.raises(InputError, match="alpha must be between 0 and 1"):
            compare_systems({"A": a, "B": b}, resamples=100, alpha=alpha)


def _results(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_compare_cli_never_writes_over_its_results_or_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _results(tmp_path / "a.jsonl", _system([40, 50, 60, 70]))
    b = _results(tmp_path / "b.json", _system([50, 60, 70, 80]))
    before = b.read_bytes()
    args = ["compare", "--results", str(a), "--results", str(b), "--resamples", "100"]
    assert cli_main([*args, "--out", str(b)]) == 2
    assert "is one of this command's inputs" in one_line(capsys) and b.read_bytes() == before
    (tmp_path / "notes.md").write_text("my notes\n")
    assert cli_main([*args, "--out", str(tmp_path / "notes.json")]) == 2
    assert "the file exists and is not spanjudge's comparison table" in one_line(capsys)
    assert (tmp_path / "notes.md").read_text() == "my notes\n"
    assert cli_main([*args, "--out", str(tmp_path / "cmp.json")]) == 0
    assert cli_main([*args, "--out", str(tmp_path / "cmp.json")]) == 0  # its own files: overwritten
    assert cli_main([*args, "--alpha", "1.5"]) == 2 and "alpha must be between 0 and 1" in one_line(capsys)


def test_the_plot_of_many_categories_stays_a_readable_size(tmp_path: Path) -> None:
    from PIL import Image

    def with_categories(score: float) -> list[dict]:
        rows = _system([score, score + 5, score + 10])
        for row in rows:
            row["evaluation"]["errors"] = [
                {"location": "x", "start": 0, "end": 1, "severity": 2, "explanation": "e", "category": f"c{k}"}
                for k in range(800)
            ]
        return rows

    args = ["compare", "--results", str(_results(tmp_path / "a.jsonl", with_categories(40)))]
    args += ["--results", str(_results(tmp_path / "b.jsonl", with_categories(60))), "--resamples", "100"]
    assert cli_main([*args, "--out", str(tmp_path / "cmp.json")]) == 0
    width, height = Image.open(tmp_path / "cmp.png").size
    assert width <= 8 * 4 * 110 and height <= 4 * 110  # at most 8 panels of 4 inches at 110 dpi
    assert "'c799' errors per output" in (tmp_path / "cmp.md").read_text()  # every category is in the table
