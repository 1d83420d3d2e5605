"""`spanjudge select`'s ranking on hand-made results rows: each uncertainty, the order and ties, what is
left out, and one clear error for results that cannot be ranked that way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spanjudge.core.errors import InputError
from spanjudge.inference.score.select import select_rows


def _row(id: str, spans: list[tuple[int, int, float]], p_no_error: float | None = 0.5, score: int | None = 60) -> dict:
    row: dict[str, Any] = {
        "id": id,
        "output": "x" * 40,
        "evaluation": {
            "score": score,
            "errors": [{"start": s, "end": e, "severity": 2, "explanation": ".", "confidence": c} for s, e, c in spans],
        },
    }
    if p_no_error is not None:
        row["probabilities"] = {"p_no_error": p_no_error}
    return row


def test_confidence_ranks_by_the_least_believed_span_or_by_p_no_error_without_spans() -> None:
    rows = [
        _row("sure", [(0, 5, 0.95)], p_no_error=0.02),
        _row("doubtful span", [(0, 5, 0.9), (10, 15, 0.3)], p_no_error=0.01),
        _row("clean but unsure", [], p_no_error=0.4),
        _row("unscored", [], score=None),
    ]
    chosen = select_rows([rows], n=2, by="confidence")
    assert [r["id"] for r in chosen.rows] == ["doubtful span", "clean but unsure"]
    assert chosen.uncertainty == pytest.approx([0.7, 0.6]) and chosen.unscored == 1


def test_no_error_ranks_by_closeness_of_p_no_error_to_one_half_and_ties_keep_the_data_order() -> None:
    rows = [_row("a", [], p_no_error=0.9), _row("b", [], p_no_error=0.45), _row("c", [], p_no_error=0.55)]
    chosen = select_rows([rows], n=3, by="no-error")
    assert [r["id"] for r in chosen.rows] == ["b", "c", "a"]
    assert chosen.uncertainty == pytest.approx([0.9, 0.9, 0.2])


def test_seeds_rank_by_how_much_the_judges_spans_disagree() -> None:
    first = [_row("agree", [(0, 10, 1.0)]), _row("differ", [(0, 10, 1.0)]), _row("both clean", [])]
    second = [_row("agree", [(0, 10, 1.0)]), _row("differ", [(5, 15, 1.0)]), _row("both clean", [])]
    chosen = select_rows([first, second], n=3, by="seeds")
    assert [r["id"] for r in chosen.rows] == ["differ", "agree", "both clean"]
    assert chosen.uncertainty == pytest.approx([1 - 5 / 15, 0.0, 0.0])
    assert chosen.rows[0] is first[1]  # the first file's rows (its spans pre-annotate the campaign)


def test_random_draws_scored_rows_reproducibly() -> None:
    rows = [_row(str(i), []) for i in range(10)] + [_row("unscored", [], score=None)]
    one, again = select_rows([rows], n=4, by="random", seed=3), select_rows([rows], n=4, by="random", seed=3)
    assert [r["id"] for r in one.rows] == [r["id"] for r in again.rows] and len(one.rows) == 4
    assert "unscored" not in [r["id"] for r in one.rows] and one.unscored == 1 and one.uncertainty == []


def test_results_that_cannot_be_ranked_so_are_one_clear_error() -> None:
    rows = [_row("a", [], p_no_error=None)]
    with pytest.raises(InputError, match="score --probabilities"):
        select_rows([rows], n=1, by="confidence")
    with pytest.raises(InputError, match="two or more results files"):
        select_rows([rows], n=1, by="seeds")
    with pytest.raises(InputError, match="does not score the same outputs"):
        select_rows([[_row("a", [])], [_row("b", [])]], n=1, by="seeds")
    with pytest.raises(InputError, match="--by must be one of confidence, no-error, seeds, random"):
        select_rows([rows], n=1, by="entropy")


def test_the_command_writes_the_chosen_outputs_as_a_factgenie_campaign(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`spanjudge select` on a results file of `score --probabilities`: the campaign factgenie reads (read back
    with spanjudge's own reader of factgenie campaigns), the judge's spans pre-annotated, most uncertain first."""
    import json

    from spanjudge.app.cli import main
    from spanjudge.inference.score.interchange import read_factgenie_campaign

    rows = [
        _row("sure", [(0, 5, 0.95)], p_no_error=0.02),
        _row("doubtful", [(0, 5, 0.9), (10, 15, 0.3)], p_no_error=0.01),
        _row("clean but unsure", [], p_no_error=0.4),
        _row("unscored", [], score=None),
    ]
    for row in rows:
        row.update(task="qags_xsum", aspect="factual consistency")
        row["probabilities"] = {**row.get("probabilities", {}), "expected_errors": 1.0, "expected_score": 50.0}
    results = tmp_path / "scores.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert main(["select", str(results), "--n", "2"]) == 0
    printed = capsys.readouterr()
    assert printed.out.splitlines() == ["doubtful\t0.7000", "clean but unsure\t0.6000"]
    assert "2 outputs selected by confidence" in printed.err and "1 unscored outputs left out" in printed.err
    campaign = tmp_path / "scores-select-confidence"
    annotated = read_factgenie_campaign(campaign)
    assert [len(a.spans) for a in annotated] == [2, 0]  # the judge's spans, for people to correct
    records = [json.loads(line) for line in (campaign / "files" / "scores.jsonl").read_text().splitlines()]
    assert [(r["metadata"]["spanjudge_id"], r["metadata"]["uncertainty"]) for r in records] == [
        ("doubtful", 0.7),
        ("clean but unsure", 0.6),
    ]
    assert main(["select", str(results), "--by", "seeds"]) == 2  # one clear line, no traceback
    assert "two or more results files" in capsys.readouterr().err


def test_seeds_compare_judges_of_the_same_outputs_judged_the_same_way() -> None:
    """As `compare` checks results: another task, aspect or prompt (output), another decoding or template, or the
    same judge twice, is one line, never a ranking."""

    def judged(model: str, **changes: Any) -> list[dict]:
        rows = [_row("a", [(0, 5, 1.0)]), _row("b", [])]
        for row in rows:
            row.update({"task": "qags_xsum", "aspect": "factual consistency", "model": model,
                        "prompt_sha256": row["id"], "decoding": {"max_new_tokens": 96}, **changes})  # fmt: skip
        return rows

    first = judged("student-s1")
    assert len(select_rows([first, judged("student-s2")], n=2, by="seeds").rows) == 2
    for changes, named in [
        ({"aspect": "fluency"}, "another aspect"),
        ({"task": "summeval"}, "another task"),
        ({"prompt_sha256": "other"}, r"another prompt \(inputs, output, aspect definition\)"),
        ({"decoding": {"max_new_tokens": 200}}, "another decoding"),
    ]:
        with pytest.raises(InputError, match=f"results file 2, id 'a': {named} than the first file's"):
            select_rows([first, judged("student-s2", **changes)], n=2, by="seeds")
    with pytest.raises(InputError, match="results file 2 holds the same judge as the first"):
        select_rows([first, judged("student-s1")], n=2, by="seeds")


@pytest.mark.parametrize("bad", [None, "0.4", float("nan"), 1.5, True])
def test_a_probability_that_is_not_one_is_one_line(bad: object) -> None:
    row = _row("a", [(0, 5, 0.9)])
    row["probabilities"]["p_no_error"] = bad
    with pytest.raises(InputError, match=r"id 'a': p_no_error is .*, not a probability from 0 to 1"):
        select_rows([[row]], n=1, by="no-error")
    row = _row("a", [(0, 5, 0.9)])
    row["evaluation"]["errors"][0]["confidence"] = bad if bad is not None else "x"
    with pytest.raises(InputError, match=r"id 'a': error 1's confidence is .*, not a probability"):
        select_rows([[row]], n=1, by="confidence")


@pytest.mark.parametrize("item", ["a\tb", "a\nb"])
def test_an_id_a_list_of_ids_cannot_carry_is_one_line(item: str) -> None:
    with pytest.raises(InputError, match="holds a tab or a line break"):
        select_rows([[_row(item, [], p_no_error=0.3)]], n=1, by="no-error")


def test_a_campaign_is_never_written_over_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import json

    from spanjudge.app.cli import main

    row = {**_row("a", [(0, 5, 0.9)]), "task": "qags_xsum", "aspect": "factual consistency"}
    results = tmp_path / "scores.jsonl"
    results.write_text(json.dumps(row) + "\n")
    taken = tmp_path / "taken"  # a slug, as a campaign folder is named
    taken.write_text("keep me\n")
    for command in (["select", str(results), "--out", str(taken)], ["render", str(results), "--to", "factgenie",
                                                                    "--out", str(taken)]):  # fmt: skip
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{taken} is a file: a campaign is a folder" in err and "Traceback" not in err
    assert taken.read_text() == "keep me\n"
    del row["task"], row["aspect"]  # rows from another tool: the page shows what they have
    results.write_text(json.dumps(row) + "\n")
    assert main(["render", str(results), "--to", "html"]) == 0, capsys.readouterr().err
    assert ">a</span>" in (tmp_path / "scores.html").read_text()
