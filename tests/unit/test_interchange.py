"""Scores files as xCOMET's error_spans and as a factgenie campaign, and factgenie campaigns read
back: the round trip keeps every located span, its category and its reason."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.inference.score.interchange import (
    XCOMET_SEVERITY,
    factgenie_campaign,
    read_factgenie_campaign,
    write_factgenie_campaign,
    xcomet_rows,
)

OUTPUT = "The café opened in 1998 and closed in 2003 after a fire."


def _error(text: str, severity: int, explanation: str, **more: Any) -> dict[str, Any]:
    start = OUTPUT.index(text)
    return {"location": text, "start": start, "end": start + len(text), "severity": severity,
            "explanation": explanation, "anchor": "exact", **more}  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    errors = [
        _error("closed in 2003", 5, "It still runs.", confidence=0.8),
        _error("1998", 3, "It opened in 1999."),
        {
            "location": None,
            "start": None,
            "end": None,
            "severity": 2,
            "explanation": "Omits the owner.",
            "anchor": None,
        },
    ]
    return [
        {
            "id": "a",
            "task": "summeval",
            "aspect": "consistency",
            "model": "/home/me/runs/judge/adapter",
            "output": OUTPUT,
            "evaluation": {"score": 35, "errors": errors},
        },
        {
            "id": "b",
            "task": "summeval",
            "aspect": "consistency",
            "output": "Fine.",
            "evaluation": {"score": 100, "errors": []},
        },
        {
            "id": "c",
            "task": "summeval",
            "aspect": "consistency",
            "output": "?",
            "unscored_reason": "no score",
            "evaluation": {"score": None, "errors": []},
        },
    ]


def test_xcomet_spans_map_severities_and_never_invent_a_confidence() -> None:
    assert [XCOMET_SEVERITY[s] for s in range(1, 6)] == ["minor", "minor", "major", "major", "critical"]
    first, clean, unscored = xcomet_rows(_rows())
    assert first["score"] == 0.35 and first["mt"] == OUTPUT and first["unlocated_errors"] == 1
    assert [(s["text"], s["severity"], s["spanjudge_severity"], s["confidence"]) for s in first["error_spans"]] == [
        ("1998", "major", 3, None),  # in the output's order
        ("closed in 2003", "critical", 5, 0.8),
    ]
    assert all(OUTPUT[s["start"] : s["end"]] == s["text"] for s in first["error_spans"])
    assert clean["error_spans"] == [] and clean["score"] == 1.0
    assert unscored["score"] is None and unscored["unscored_reason"] == "no score"


def test_a_factgenie_campaign_round_trips(tmp_path: Path) -> None:
    metadata, records = factgenie_campaign(_rows(), "judge-run", dataset="summeval", split="test", setup_id="sys")
    assert len(records) == 2  # the unscored output has no annotation
    assert records[0]["metadata"]["annotator_id"] == "adapter"  # the judge's name, not a local path
    write_factgenie_campaign(tmp_path / "judge-run", metadata, records, file_name="scores")
    read = read_factgenie_campaign(tmp_path / "judge-run")
    assert [r.key for r in read] == [("summeval", "test", "sys", 0), ("summeval", "test", "sys", 1)]
    assert read[0].categories == tuple(f"severity {s}" for s in range(1, 6))
    assert read[0].spans == (
        (OUTPUT.index("1998"), OUTPUT.index("1998") + 4, 2, "It opened in 1999."),
        (OUTPUT.index("closed"), OUTPUT.index("closed") + len("closed in 2003"), 4, "It still runs."),
    )
    assert read[0].metadata["unlocated_errors"] == 1 and read[1].spans == ()
    with pytest.raises(InputError, match="not empty"):
        write_factgenie_campaign(tmp_path / "judge-run", metadata, records, file_name="again")


def test_a_span_that_is_not_at_its_offset_is_one_error_naming_the_line(tmp_path: Path) -> None:
    metadata, records = factgenie_campaign(_rows(), "c", dataset="d", split="test", setup_id="s")
    records[1]["annotations"] = [{"reason": "", "text": "Fine", "type": 0, "start": 1}]
    write_factgenie_campaign(tmp_path / "c", metadata, records, file_name="x")
    with pytest.raises(InputError, match=r"x\.jsonl:2: span 'Fine' is not at character 1"):
        read_factgenie_campaign(tmp_path / "c")
    (tmp_path / "c" / "files" / "x.jsonl").write_text(json.dumps({**records[1], "annotations": [
        {"reason": "", "text": "Fine", "annotation_type": 7, "start": 0}]}) + "\n")  # fmt: skip
    with pytest.raises(InputError, match=r"x\.jsonl:1: span category 7 is not one of the campaign's 5"):
        read_factgenie_campaign(tmp_path / "c")
    with pytest.raises(InputError, match=r"no metadata\.json"):
        read_factgenie_campaign(tmp_path)


def test_render_writes_each_format_beside_the_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    results = tmp_path / "scores.jsonl"
    results.write_text("".join(json.dumps(row) + "\n" for row in _rows()))
    assert cli_main(["render", str(results), "--to", "xcomet"]) == 0
    written = [json.loads(line) for line in (tmp_path / "scores.xcomet.jsonl").read_text().splitlines()]
    assert [row["id"] for row in written] == ["a", "b", "c"]
    assert cli_main(["render", str(results), "--to", "factgenie", "--setup", "sys-a"]) == 0
    [read] = read_factgenie_campaign(tmp_path / "scores-factgenie")[:1]
    assert read.key == ("summeval", "test", "sys-a", 0) and len(read.spans) == 2
    assert cli_main(["render", str(results), "--to", "factgenie"]) == 2  # never over an earlier campaign
    assert cli_main(["render", str(results), "--to", "pdf"]) == 2
    assert "--to must be one of html, xcomet, factgenie" in capsys.readouterr().err


def test_a_campaign_is_named_and_listed_as_factgenie_opens_it(tmp_path: Path) -> None:
    results = tmp_path / "more_scores.jsonl"  # factgenie slugifies ids: it would look for more-scores-...
    results.write_text("".join(json.dumps(row) + "\n" for row in _rows()))
    assert cli_main(["render", str(results), "--to", "factgenie", "--dataset", "Sum Eval", "--setup", "GPT_4"]) == 0
    folder = tmp_path / "more-scores-factgenie"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["id"] == folder.name and re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", metadata["created"])
    assert [r.key for r in read_factgenie_campaign(folder)] == [
        ("sum-eval", "test", "gpt-4", 0),
        ("sum-eval", "test", "gpt-4", 1),
    ]
    db = (folder / "db.csv").read_text().splitlines()
    assert db == [
        "dataset,split,example_idx,setup_id,batch_idx,annotator_id,annotator_group,status,start,end",
        "sum-eval,test,0,gpt-4,0,adapter,0,finished,,",
        "sum-eval,test,1,gpt-4,1,spanjudge,0,finished,,",  # a row with no model: the default name
    ]


def _human_campaign(folder: Path, spans: list[str], **record_meta: Any) -> None:
    """A campaign as a human annotator's factgenie export: one output, the given spans (category 0)."""
    metadata = {"id": "humans", "mode": "crowdsourcing", "config": {"annotation_span_categories": [
        {"name": "Incorrect", "color": "#f00"}, {"name": "Misleading", "color": "#00f"}]}}  # fmt: skip
    record = {"dataset": "cafes", "split": "test", "setup_id": "gpt", "example_idx": 0, "output": OUTPUT,
              "metadata": record_meta, "annotations": [
                  {"text": s, "start": OUTPUT.index(s), "type": 0, "reason": ""} for s in spans]}  # fmt: skip
    write_factgenie_campaign(folder, metadata, [record], "humans-1")


def test_a_factgenie_campaign_is_gold_for_a_scores_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scores = tmp_path / "scores.jsonl"
    scores.write_text(json.dumps(_rows()[0]) + "\n")  # the judge marked "closed in 2003" and "1998"
    # a campaign exported from the scores file and annotated in factgenie keeps spanjudge's id, task and aspect
    gold = tmp_path / "humans"
    _human_campaign(gold, ["closed in 2003", "after a fire"], spanjudge_id="a", task="summeval", aspect="consistency")
    out = tmp_path / "eval"
    args = ["meta-eval", "--spans", f"factgenie:{gold}", "--judge", f"scores:{scores}", "--out", str(out)]
    assert cli_main(args) == 0, capsys.readouterr().err
    result = json.loads((out / "spans.json").read_text())[f"scores:{scores.name}"]
    assert result["scored"] == 1 and result["documents"] == 1
    assert (result["overlap"]["tp"], result["overlap"]["fp"], result["overlap"]["fn"]) == (1, 1, 1)
    assert result["per_category_recall"]["Incorrect"]["exact"] == 0.5
    # a campaign of factgenie's own names its outputs dataset/split/setup/index; a judge that needs inputs cannot run
    native = tmp_path / "native"
    _human_campaign(native, ["1998"])
    unmatched = ["meta-eval", "--spans", f"factgenie:{native}", "--judge", f"scores:{scores}", "--out", str(out / "n")]
    assert cli_main(unmatched) == 0
    unscored = json.loads((out / "n" / "spans.json").read_text())[f"scores:{scores.name}"]
    assert (unscored["scored"], unscored["unscored"]) == (0, 1)  # not in the scores file: nothing invented
    judged = ["meta-eval", "--spans", f"factgenie:{native}", "--judge", "distilled:some/adapter", "--out", str(out)]
    assert cli_main(judged) == 2
    assert "holds the outputs but not their inputs" in capsys.readouterr().err

    # scored with the judge's probabilities (#49): their calibration against the campaign, and thresholds fitted
    # on it (a scores file has no folder to keep them in: recorded in spans.json)
    row = _rows()[0]
    row["probabilities"] = {"p_no_error": 0.3, "expected_errors": 1.4}
    for error, confidence in zip(row["evaluation"]["errors"], (0.8, 0.5, 0.9), strict=True):
        error["confidence"] = confidence
    scores.write_text(json.dumps(row) + "\n")
    assert cli_main([*args[:-1], str(out / "p"), "--fit-decisions"]) == 0, capsys.readouterr().err
    result = json.loads((out / "p" / "spans.json").read_text())[f"scores:{scores.name}"]
    spans = result["calibration"]["span_confidence"]
    # "closed in 2003" (0.8) overlaps a human span; "1998" (0.8 · 0.5 = 0.4) does not; the unplaced one is no span
    assert spans["n"] == 2 and spans["ece"] == pytest.approx((0.2 + 0.4) / 2)
    assert result["calibration"]["no_error"]["ece"] == pytest.approx(0.3)  # the humans marked two errors
    assert result["calibration"]["expected_count"]["ece"] == pytest.approx(0.6)
    assert result["decisions"]["fitted_on"]["split"] == "dev" and result["decisions"]["stored_in"] is None
    assert result["decisions"]["min_confidence"] is not None  # dropping "1998" alone is the best rule here
    assert (out / "p" / f"calibration-scores-{scores.name}.png").is_file()
    assert not (Path.cwd() / "spanjudge.json").exists()  # nothing stored anywhere else
