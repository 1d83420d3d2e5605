"""`spanjudge demo` without running it: its help, its config's one-line errors, and the HTML
report built from small but real step outputs (real SummEval texts, spans anchored by the
contract, a real metric meta-evaluated on real SFRES items with its tables and plots).
The whole demo is run by `make demo`, not here: it takes minutes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spanjudge.app.demo.config import load_demo_config
from spanjudge.app.demo.layout import DemoLayout
from spanjudge.app.demo.report import StepRecord, markdown_html, render_report
from spanjudge.core.errors import ConfigError
from tests.support.browser import PHONE, opened

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([SPANJUDGE, "demo", *args], capture_output=True, text=True, timeout=120, env=env)


def test_help_teaches_what_runs_how_long_and_the_real_scale() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for words in ("annotate", "train", "score", "meta_eval", "publish", "minutes", "runs/demo", "thesis.yaml"):
        assert words in result.stdout


@pytest.mark.parametrize("name", ["tiny.yaml", "thesis.yaml"])
def test_shipped_demo_configs_validate(name: str) -> None:
    config = load_demo_config(REPO / "configs" / "demo" / name)
    assert config.meta_eval.suite and config.publish.repo_id


def test_a_bad_field_is_one_line_naming_it(tmp_path: Path) -> None:
    text = (REPO / "configs/demo/tiny.yaml").read_text().replace("limit_inputs: 8", "limit_input: 8")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=r"annotate\.limit_input: unknown key"):
        load_demo_config(bad)
    result = run("--config", str(bad), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "annotate.limit_input: unknown key" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_training_on_a_teacher_needs_one(tmp_path: Path) -> None:
    text = (REPO / "configs/demo/tiny.yaml").read_text()
    start, end = text.index("teacher:"), text.index("train:")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text[:start] + text[end:])  # train.data: teacher, but no teacher section
    with pytest.raises(ConfigError, match=r"train\.data is 'teacher' but the config has no teacher section"):
        load_demo_config(bad)


def test_a_missing_data_folder_is_one_line(tmp_path: Path) -> None:
    result = run("--data-dir", str(tmp_path / "nowhere"), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "data folder not found" in result.stderr and "Traceback" not in result.stderr


def test_a_server_that_cannot_start_is_one_line(tmp_path: Path) -> None:
    text = (REPO / "configs/demo/tiny.yaml").read_text().replace('model: "@gemma3"', f'model: "{tmp_path / "x.gguf"}"')
    config = tmp_path / "demo.yaml"
    config.write_text(text)
    result = run("--config", str(config), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "model file not found" in result.stderr.splitlines()[-1] and "Traceback" not in result.stderr


def test_markdown_tables_headings_and_lists() -> None:
    page = markdown_html("## SFRES (thesis table 5.4)\n\n| Judge | a ρ |\n|---|---|\n| **x** | 0.1 |\n\n- one *two*\n")
    assert "<h4>SFRES (thesis table 5.4)</h4>" in page
    assert "<th>a ρ</th>" in page and "<td><strong>x</strong></td>" in page and "<li>one <em>two</em></li>" in page


# ---------------------------------------------------------------------------------------
# The report, from step outputs made by the real stage functions on tiny inputs


def _summeval_rows(shared_data: Path, count: int) -> list[dict]:
    with (shared_data / "meta_eval/summeval/summeval.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(next(handle)) for _ in range(count)]


def _annotate(layout: DemoLayout, shared_data: Path) -> None:
    from spanjudge.data_gen.records import write_split
    from spanjudge.data_gen.stats import compute_stats, write_stats
    from spanjudge.inference.contract import ErrorAnnotation, anchor_errors

    records = []
    for number, row in enumerate(_summeval_rows(shared_data, 3)):
        summary = row["system_output"]
        quoted = " ".join(summary.split()[2:7])
        errors = anchor_errors(
            [ErrorAnnotation(location=quoted, explanation="not supported by the article", severity=4)], summary
        )
        records.append(
            {
                "id": f"r{number}", "dataset": "summeval", "input_id": row["doc_id"], "system": row["system_id"],
                "inputs": {"Article": row["source"]}, "outputs": {"Summary": summary}, "aspect_name": "consistency",
                "task_id": "summeval", "task_type": "summarization",
                "evaluation": {"errors": [e.model_dump() for e in errors], "score": 60},
                "provenance": {"annotators": []},
            }
        )  # fmt: skip
    layout.annotate.mkdir(parents=True)
    write_split(layout.annotate, records[:2], records[2:])
    write_stats(layout.annotate, compute_stats(records, [], []))
    run_json = {"requests": 4, "records": 3, "train": 2, "validation": 1, "unscored": 1, "model_calls": {"a": 5}}
    (layout.annotate / "run.json").write_text(json.dumps(run_json))
    unscored = {"id": "r9", "unscored_reason": "no annotator reply could be parsed"}
    (layout.annotate / "unscored.jsonl").write_text(json.dumps(unscored) + "\n")


def _train(layout: DemoLayout) -> None:
    layout.adapter.mkdir(parents=True)
    (layout.adapter / "spanjudge.json").write_text(json.dumps({"base_model": "@smollm2"}))
    (layout.train / "metrics.json").write_text(json.dumps({"global_step": 4, "train_loss": 1.25, "world_size": 1}))
    history = [{"step": s, "loss": 2.0 / s} for s in range(1, 5)] + [{"step": 4, "eval_loss": 1.1}]
    (layout.train / "log_history.jsonl").write_text("".join(json.dumps(h) + "\n" for h in history))


def _score(layout: DemoLayout, shared_data: Path) -> None:
    from spanjudge.inference.contract import anchor_evaluation, parse_judge
    from spanjudge.inference.judged import JudgedEvaluation
    from spanjudge.inference.probabilities import ErrorProbabilities, ReplyProbabilities
    from spanjudge.inference.score.rows import ScoreStore
    from spanjudge.inference.score.stage import result_row

    class Request:  # what result_row reads of a JudgeRequest
        def __init__(self, id: str, output: str) -> None:
            self.id, self.output = id, output
            self.task = type("T", (), {"id": "summeval"})
            self.aspect = type("A", (), {"name": "consistency"})

    rows, base_rows = [], []
    for number, row in enumerate(_summeval_rows(shared_data, 2)):
        output = row["system_output"]
        reply = f"Error 1:\nLocation: {' '.join(output.split()[:4])}\nExplanation: unsupported\nSeverity: 3\n\n"
        reply += "Overall score: 55"
        evaluation = anchor_evaluation(parse_judge(reply), output)
        read = ReplyProbabilities(
            p_no_error=0.3, expected_errors=0.8 + number, expected_score=61.5, score_distribution={55: 0.7, 70: 0.3},
            errors=[ErrorProbabilities(confidence=0.7, expected_severity=3.2, severity_distribution={3: 0.8, 4: 0.2})],
        )  # fmt: skip
        judged = JudgedEvaluation(
            errors=evaluation.errors, score=evaluation.score, raw_replies=[reply], attempts=1, probabilities=read
        )
        rows.append(result_row(Request(f"held-{number}", output), judged))
        base_reply = JudgedEvaluation(errors=[], score=100, raw_replies=["No Error\n\nOverall score: 100"], attempts=1)
        base_rows.append(result_row(Request(f"held-{number}", output), base_reply))
    unscored = JudgedEvaluation(score=None, unscored_reason="no parseable reply in 4 tries (last: no score)")
    rows.append(result_row(Request("held-2", "A summary."), unscored))
    for path, written in ((layout.scores, rows), (layout.base_scores, base_rows)):
        with ScoreStore(path) as store:
            store.append(written)


def _meta_eval(layout: DemoLayout, shared_data: Path) -> None:
    from spanjudge.eval.meta_eval import load_suite_config, open_judges, run_suite

    suite_path = REPO / "configs/eval/thesis.yaml"
    suite = load_suite_config(suite_path, resamples=20)
    with open_judges(["metric:bleu"], layout.meta_eval) as judges:  # reports, bar and scatter plots
        run_suite(suite, suite_path, judges, layout.meta_eval, data_root=shared_data, max_items=12, datasets=["sfres"])


def test_report_shows_spans_tables_and_plots(tmp_path: Path, shared_data: Path) -> None:
    layout = DemoLayout(tmp_path / "demo")
    _annotate(layout, shared_data)
    _train(layout)
    _score(layout, shared_data)
    _meta_eval(layout, shared_data)
    layout.publish.mkdir()
    (layout.publish / "README.md").write_text("---\nbase_model: HuggingFaceTB/SmolLM2-135M-Instruct\n---\n")
    from spanjudge.app.demo.compare import parse_row
    from spanjudge.eval.spans.agreement import span_agreement
    from spanjudge.eval.spans.quintd import quintd_tables

    docs = quintd_tables("human", (80, 81), root=shared_data)
    teacher = {d.id: d.gold_spans for d in quintd_tables("gpt-4", (80, 81), root=shared_data)}
    agreement = {"teacher (GPT-4)": span_agreement(docs, teacher, n_resamples=20)}
    agreement["base"] = span_agreement(docs, {d.id: None for d in docs}, n_resamples=20)
    layout.spans.mkdir()
    (layout.spans / "agreement.json").write_text(json.dumps(agreement))
    compare = [parse_row("held-out outputs", {"scored": 0, "outputs": 4}, {"scored": 3, "outputs": 4})]
    records = [
        StepRecord("annotate", "annotate", "done", 61.2, "3 records"),
        StepRecord("score", "score", "done", 5.0, "3 scored", {"compare": compare}),
        StepRecord("perturbation", "perturbation benchmark", "not built", 0.0, "`spanjudge perturb` is not built yet"),
    ]
    run_info = {"config": "configs/demo/tiny.yaml", "config_name": "tiny", "seconds": 70.0, "finished": "now"}
    page = render_report(layout, records, run_info, [{"finished": "before", "seconds": 600.0, "config_name": "tiny"}])

    assert page.count('<mark class="s4"') >= 3  # the ensemble's anchored spans
    assert page.count('<mark class="s3"') >= 2  # the judge's anchored spans
    assert "no parseable reply in 4 tries" in page and "no annotator reply could be parsed" in page
    # plots: the ensemble histogram, the loss curve, the meta-eval bars and scatter
    assert page.count('src="data:image/png;base64,') >= 4
    assert 'alt="training loss curve"' in page and 'alt="bars_sfres_spearman"' in page
    # the meta-evaluation tables of eval/correlation/report.py, published rows labelled
    assert "<th>Judge</th>" in page and "<em>(published)</em>" in page and "metric:bleu" in page
    assert "is not built yet" in page and 'href="publish/README.md"' in page
    assert "600.0" in page and "61.2" in page  # this run's and the earlier run's timings
    # base vs trained on the same items, and the span agreement (unscored base: undefined, not 0)
    assert "<th>untrained base</th>" in page and "<td>0/4</td>" in page and "<td>3/4</td>" in page
    assert "<td>teacher (GPT-4)</td><td class=num>4/4</td>" in page
    assert "<td>base</td><td class=num>0/4</td><td class=num>–</td>" in page
    # the trained judge's expected values beside the written ones; spans shaded by confidence
    assert "<th>expected score</th>" in page and "<td class=num>61.5</td>" in page
    assert "<td class=num>0.80</td>" in page and "<td class=num>1.80</td>" in page and "<td>0.70</td>" in page
    assert "confidence 0.70" in page and 'style="opacity:0.80"' in page
    # the base's own evaluations (held to the grammar), not only its counts
    assert "The untrained base, held to the contract's grammar" in page and "<p>2/2 scored.</p>" in page

    # the page as a reader opens it: every highlighted span of the judge's outputs at its
    # characters, no request and no console error, readable at a phone's width
    report = layout.out / "report.html"
    report.write_text(page, encoding="utf-8")
    judged = _jsonl_rows(layout.scores) + _jsonl_rows(layout.base_scores)
    with opened(report) as desktop:
        shown = [(s["text"], [(m["start"], m["end"]) for m in s["marks"]]) for s in desktop.spans()]
        for row in judged:  # the same output may be shown twice (the judge's and the base's)
            anchored = sorted((e["start"], e["end"]) for e in row["evaluation"]["errors"] if e.get("start") is not None)
            assert (row["output"], anchored) in shown
        assert sum(len(marks) for _, marks in shown) >= 5 and desktop.after_content("mark[data-tip]") == "none"
        assert desktop.console_errors == [] and desktop.network == []
    with opened(report, viewport=PHONE) as phone:
        assert phone.horizontal_overflow() <= 0
        phone.page.screenshot(path=str(tmp_path / "report-phone.png"), full_page=True)


def _jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
