"""factgenie 1.2.1, the installed package (not a copy of its format), opens the campaigns spanjudge writes: its
campaign index and list, its statistics and its `iaa f1`; and a campaign its own writer saves after people
annotated the same outputs is read back by `meta-eval --spans factgenie:` against the judge's exported campaign.

factgenie keeps its campaigns inside its package folder (factgenie.CAMPAIGN_DIR); the test points that name at a
temporary folder, as the web app would see it. Its crowdsourcing campaigns start an idle-time timer on the app's
APScheduler, which the test stands in for (factgenie's timer, not what is tested here).
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import factgenie.campaign
import factgenie.workflows
import flask
import pytest
from factgenie.campaign import Campaign, CampaignMode
from factgenie.iaa.f1 import compute_f1

from spanjudge.app.cli import main as cli_main
from spanjudge.inference.score.interchange import FACTGENIE_CATEGORIES

OUTPUTS = ["The café opened in 1998 and closed in 2003.", "Its owner, Ana, sold it to Bo.", "It has ten tables."]
# the judge's errors (text, severity) per output; the third output is unscored
JUDGED = [[("1998", 3), ("closed in 2003", 5)], [], None]
# the people's spans (text, category index = severity - 1) on the same outputs
HUMAN = [[("1998", 2), ("2003", 1)], [("Ana", 0)], [("ten", 2)]]


class _Scheduler:
    """APScheduler's add_job, which factgenie's crowdsourcing campaign calls when it loads."""

    def add_job(self, *args: Any, **kwargs: Any) -> None:
        pass


def _scores(path: Path) -> Path:
    rows = []
    for number, (output, errors) in enumerate(zip(OUTPUTS, JUDGED, strict=True)):
        found = [{"location": t, "start": output.index(t), "end": output.index(t) + len(t), "severity": s,
                  "explanation": f"{t} is wrong", "anchor": "exact"} for t, s in errors or []]  # fmt: skip
        evaluation = {"score": None if errors is None else 100 - 10 * len(found), "errors": found}
        unscored = {"unscored_reason": "unparsed"} if errors is None else {}
        rows.append({"id": f"cafe-{number}", "task": "cafes", "aspect": "accuracy", "output": output,
                     "evaluation": evaluation, **unscored})  # fmt: skip
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    return path


def _human_campaign(campaigns: Path) -> Path:
    """A crowdsourcing campaign's metadata and db.csv as factgenie creates them, then each person's annotations
    saved by factgenie's own writer (workflows.save_record, which the annotation page's submit calls)."""
    folder = campaigns / "people"
    (folder / "files").mkdir(parents=True)
    config = {"annotation_span_categories": FACTGENIE_CATEGORIES, "annotator_instructions": "Mark errors.",
              "final_message": "Thanks.", "examples_per_batch": 1, "idle_time": 60, "annotation_granularity":
              "words", "annotation_overlap_allowed": False, "flags": [], "options": [], "sliders": [],
              "text_fields": []}  # fmt: skip
    metadata = {"id": "people", "mode": CampaignMode.CROWDSOURCING, "config": config, "created": "2024-03-25 00:00:00"}
    (folder / "metadata.json").write_text(json.dumps(metadata))
    header = ["dataset", "split", "example_idx", "setup_id", "batch_idx", "annotator_id", "annotator_group"]
    with (folder / "db.csv").open("w", newline="") as db:
        writer = csv.writer(db)
        writer.writerow([*header, "status", "start", "end"])
        for number in range(len(OUTPUTS)):
            writer.writerow(["cafes", "test", number, "gpt-4", number, f"person-{number}", 0, "finished", 1, 2])
    campaign = Campaign("people")
    for number, (output, spans) in enumerate(zip(OUTPUTS, HUMAN, strict=True)):
        annotations = [{"text": t, "start": output.index(t), "type": k, "reason": ""} for t, k in spans]
        result = {"output": output, "annotations": annotations, "flags": [], "options": [], "sliders": [],
                  "text_fields": []}  # fmt: skip
        row = campaign.db.iloc[number].to_dict()
        factgenie.workflows.save_record(mode=CampaignMode.CROWDSOURCING, campaign=campaign, row=row, result=result)
    return folder


@pytest.fixture
def campaigns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "campaigns"
    folder.mkdir()
    for module in (factgenie.workflows, factgenie.campaign):
        monkeypatch.setattr(module, "CAMPAIGN_DIR", str(folder))
    return folder


def test_factgenie_lists_compares_and_reads_back_our_campaigns(
    campaigns: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the judge's spans, exported under a results name that is no slug (factgenie would look for another folder)
    scores = _scores(tmp_path / "judge_run.jsonl")
    render = ["render", str(scores), "--to", "factgenie", "--dataset", "Cafes", "--setup", "GPT 4"]
    assert cli_main([*render, "--out", str(campaigns / "Judge_Run")]) == 2
    assert "call it 'judge-run'" in capsys.readouterr().err
    assert cli_main([*render, "--out", str(campaigns / "judge-run")]) == 0
    people = _human_campaign(campaigns)

    app = flask.Flask("factgenie-under-test")
    app.db = {"annotation_index": None, "scheduler": _Scheduler(), "running_campaigns": set()}  # type: ignore[attr-defined]
    with app.app_context():
        listed = factgenie.workflows.get_sorted_campaign_list(app, modes=[CampaignMode.EXTERNAL, "crowdsourcing"])
        assert list(listed) == ["judge-run", "people"]  # newest first, by `created` (ours: now)
        judge = listed["judge-run"]
        assert [(d["dataset"], d["setup_id"], d["example_idx"], d["status"]) for d in judge["data"]] == [
            ("cafes", "gpt-4", 0, "finished"),
            ("cafes", "gpt-4", 1, "finished"),
        ]
        # character-level agreement as factgenie computes it, categories ignored ("soft"), on the two outputs both
        # campaigns hold: spans 2 (the judge) and 3 (the people: "1998", "2003", "Ana"); factgenie measures lengths
        # only where both sides marked something, the first output: "1998" and "closed in 2003" (18 characters)
        # against "1998" and "2003" (8), 8 in common
        soft = compute_f1("people", None, "judge-run", None, match_mode="soft")
        assert (soft["hyp_count"], soft["ref_count"]) == (2, 3)
        assert (soft["hyp_length"], soft["ref_length"], soft["overlap_length"]) == (18, 8, 8)
        assert (soft["precision"], soft["recall"]) == (round(8 / 18, 3), 1.0)
        hard = compute_f1("people", None, "judge-run", None, match_mode="hard")  # severities must agree
        assert hard["overlap_length"] == 4  # "1998" is severity 3 on both sides; "2003" is 5 against 2

    # what factgenie wrote after the people annotated, read back as the gold against the judge's campaign
    out = tmp_path / "eval"
    args = ["meta-eval", "--spans", f"factgenie:{people}", "--judge", f"factgenie:{campaigns / 'judge-run'}"]
    assert cli_main([*args, "--out", str(out)]) == 0, capsys.readouterr().err
    result = json.loads((out / "spans.json").read_text())["factgenie:judge-run"]
    assert (result["documents"], result["scored"], result["unscored"]) == (3, 2, 1)  # the unscored output
    assert (result["overlap"]["tp"], result["overlap"]["fp"], result["overlap"]["fn"]) == (2, 0, 1)
