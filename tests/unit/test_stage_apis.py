"""The stages as plain functions (issue #16 item 1): what the commands and the demo call.

`score_file` runs against the scripted stand-in server of tests/support/standin.py behind the real
`openai` engine; the meta-evaluation functions on real SFRES items with a real metric; the
data and training stages on small real inputs. The commands' own tests stay CLI tests.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.judge_records import write_records
from support.quintd_files import GOOD as QUINTD_GOOD
from support.quintd_files import RULE, write_quintd
from support.standin import Reply
from support.training_runs import smoke_config

from spanjudge.core.errors import InputError
from spanjudge.data_gen.stage import import_records
from spanjudge.eval.meta_eval import export_requests, load_suite_config, open_judges, run_suite
from spanjudge.inference.score.stage import ScoreSettings, score_file, summary_lines
from spanjudge.training.stage import train_judge

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs/eval/thesis.yaml"
REPLY = "Error 1:\nLocation: on a hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"


def _settings(url: str, tmp_path: Path, count: int = 3, **more: object) -> ScoreSettings:
    data = tmp_path / "items.jsonl"
    rows = [
        {"id": f"i{n}", "article": f"The cat {n} sat on the mat.", "summary": "A cat sat on a hat."}
        for n in range(count)
    ]
    data.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return ScoreSettings(
        model="stand-in-judge", out=tmp_path / "scores.jsonl", data=str(data), task="qags_xsum",
        aspect="factual consistency", engine="openai", base_url=url, served_model="judge",
        input_field=["Article=article"], output_field="summary", max_new_tokens=96, **more,  # type: ignore[arg-type]
    )  # fmt: skip


# -- scoring ---------------------------------------------------------------------------------


def test_score_file_returns_the_run_resumes_and_records_its_options(serve, tmp_path: Path) -> None:
    stand_in, url = serve([Reply(text=REPLY)])
    settings = _settings(url, tmp_path, output_format="html")
    run = score_file(settings)
    assert (run.requested, run.already_done, run.scored, run.failed) == (3, 0, 3, 0)
    assert [row.id for row in run.rows] == ["i0", "i1", "i2"] and len(stand_in.bodies) == 3
    assert run.rows[0].evaluation.errors[0]["start"] == 10  # "on a hat", anchored in "A cat sat on a hat."
    assert run.page is not None and "<mark" in run.page.read_text(encoding="utf-8")
    provenance = json.loads(settings.out.with_suffix(".run.json").read_text(encoding="utf-8"))
    assert provenance["options"]["max_new_tokens"] == 96 and provenance["options"]["input_field"] == ["Article=article"]
    again = score_file(settings)  # the same settings: nothing asked again
    assert (again.already_done, again.scored, len(stand_in.bodies)) == (3, 3, 3)


def test_score_file_counts_unscored_rows_without_a_made_up_score(serve, tmp_path: Path) -> None:
    _, url = serve([Reply(text="I cannot evaluate this.")])
    run = score_file(_settings(url, tmp_path, count=2, retries=0))
    assert (run.requested, run.scored, run.failed) == (2, 0, 0)
    lines = summary_lines(run.rows, run.failed)
    assert "scored 0, unscored 2" in lines[0] and "mean score - (nothing scored)" in lines[0]
    assert lines[1].startswith("  unscored ×2: ")


def test_score_file_checks_its_settings_before_reading_anything(tmp_path: Path) -> None:
    bad = ScoreSettings(model="m", out=tmp_path / "o.jsonl", data=str(tmp_path / "nowhere.jsonl"), engine="onnx")
    with pytest.raises(InputError, match="unknown engine"):
        score_file(bad)
    with pytest.raises(InputError, match="--format must be jsonl or html"):
        score_file(ScoreSettings(model="m", out=tmp_path / "o.jsonl", output_format="pdf"))


# -- meta-evaluation -------------------------------------------------------------------------


def test_run_suite_writes_reports_and_plots(tmp_path: Path, shared_data: Path) -> None:
    config = load_suite_config(SUITE, resamples=0, datasets=["sfres"])
    with open_judges(["metric:bleu"], tmp_path) as judges:
        run = run_suite(config, SUITE, judges, tmp_path, data_root=shared_data, max_items=6, datasets=["sfres"])
    assert run.report.is_file() and (tmp_path / "results.json").is_file()
    assert any(p.suffix == ".png" for p in run.written)
    assert run.result.judges == ["metric:bleu"] and not run.result.incomplete
    assert {c.dataset for c in run.result.cells} == {"sfres"}


def test_suite_mistakes_are_one_line_before_any_judging(tmp_path: Path, shared_data: Path) -> None:
    with pytest.raises(InputError, match=r"--dataset 'sfress' is not in .*thesis\.yaml \(.*sfres"):
        load_suite_config(SUITE, datasets=["sfress"])
    config = load_suite_config(SUITE)
    with open_judges(["metric:bleu", "metric:bleu"], tmp_path) as judges, pytest.raises(InputError, match="twice"):
        run_suite(config, SUITE, judges, tmp_path, data_root=shared_data, datasets=["sfres"])
    assert not (tmp_path / "judgments").exists()


def test_open_judges_closes_every_judge(tmp_path: Path) -> None:
    closed: list[str] = []
    with open_judges(["metric:bleu"], tmp_path) as judges:
        judges[0].close = lambda: closed.append("bleu")  # type: ignore[method-assign]
    assert closed == ["bleu"]


def test_export_requests_writes_score_rows(tmp_path: Path, shared_data: Path) -> None:
    config = load_suite_config(SUITE)
    path = tmp_path / "requests.jsonl"
    count = export_requests(config, SUITE, shared_data, path, ["sfres"], max_items=4)
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert count == len(rows) > 0 and all("@" in row["id"] and row["inputs"] and row["outputs"] for row in rows)


# -- data and training -----------------------------------------------------------------------


def test_import_records_returns_its_summary(tmp_path: Path) -> None:
    root = write_quintd(tmp_path / "data", QUINTD_GOOD)
    config = {"name": "t", "source": {"format": "quintd1", "data_root": str(root), "rule": RULE}}
    (tmp_path / "import.yaml").write_text(yaml.safe_dump(config))
    warned: list[str] = []
    run = import_records(tmp_path / "import.yaml", tmp_path / "out", allow_overlap=True, warn=warned.append)
    assert run.summary.records == 2 and run.summary.rule.startswith("severity by span type")
    assert (tmp_path / "out" / "train.jsonl").is_file() and run.decontamination.lines()
    assert warned == [run.decontamination.lines()[-1]]  # said before the run as well


def test_train_judge_check_validates_without_training(tmp_path: Path, shared_data: Path) -> None:
    records = write_records(tmp_path / "annotate", shared_data)
    said: list[str] = []
    outcome = train_judge(smoke_config(tmp_path, records), [("training.max_steps", 3)], check=True, say=said.append)
    assert outcome.metrics is None and not outcome.already_trained
    assert "config and data are valid" in said and not (outcome.adapter_dir / "spanjudge.json").exists()
