"""spanjudge inside inspect_ai and lm-evaluation-harness: a real `inspect_ai.eval` and a real
`lm_eval.simple_evaluate` of two-sample tasks whose outputs the smoke judge (trained in this
session, transformers on CPU) grades. The model under evaluation is a stand-in in both (inspect's
own mock model; a model class of the test for lm-eval): the outputs are QAGS-XSum summaries."""

from __future__ import annotations

import json
import math
from pathlib import Path

from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import generate
from support.judge_records import qags_xsum_records
from support.training_runs import TrainedRun

from spanjudge.inference.judge import JudgedEvaluation
from spanjudge.inference.predictions import Prediction
from spanjudge.integrations.inspect import score_of, spanjudge_scorer


def test_an_inspect_eval_scores_each_output_with_its_spans(
    trained_judge: TrainedRun, shared_data: Path, tmp_path: Path
) -> None:
    records = qags_xsum_records(shared_data, 2, offset=20)  # after the 20 the judge trained and validated on
    samples = [Sample(input=r["inputs"]["Article"], id=f"s{i}") for i, r in enumerate(records)]
    outputs = [ModelOutput.from_content(model="mockllm/model", content=r["outputs"]["Summary"]) for r in records]
    for output in outputs:  # given, or the mock model counts tokens with tiktoken, which downloads its vocabulary
        output.usage = ModelUsage()
    scorer = spanjudge_scorer(
        str(trained_judge.adapter), task="qags_xsum", aspect="factual consistency", max_new_tokens=96, retries=0
    )
    [log] = inspect_eval(
        Task(dataset=samples, solver=generate(), scorer=scorer),
        model=get_model("mockllm/model", custom_outputs=outputs),
        log_dir=str(tmp_path / "logs"),
        display="none",
    )
    assert log.status == "success", log.error
    assert log.samples is not None and len(log.samples) == 2
    for sample, record in zip(log.samples, records, strict=True):
        score = sample.scores["spanjudge"]
        assert score.answer == record["outputs"]["Summary"]  # the judge graded the model's output
        assert isinstance(score.metadata["errors"], list)
        for error in score.metadata["errors"]:
            if error["start"] is not None:
                assert score.answer[error["start"] : error["end"]] == error["text"]
        if math.isnan(score.value):  # unscored: inspect's metrics skip it
            assert score.explanation
        else:
            assert 0 <= score.value <= 100 and score.explanation
    metrics = log.results.scores[0].metrics
    assert "mean" in metrics and "stderr" in metrics


def test_an_unscored_output_is_excluded_from_the_metrics_never_a_zero() -> None:
    unscored = Prediction(
        id="x", score=None, errors=(), unscored_reason="no parseable reply in 1 try",
        evaluation=JudgedEvaluation(score=None, unscored_reason="no parseable reply in 1 try"),
    )  # fmt: skip
    score = score_of(unscored, "An output.", judge="judge")
    assert math.isnan(score.value) and score.reason == "grader_failed"
    assert score.explanation == "no parseable reply in 1 try" and score.answer == "An output."


def test_an_lm_eval_task_names_the_judge_in_its_yaml_and_logs_the_spans(
    trained_judge: TrainedRun, shared_data: Path, tmp_path: Path
) -> None:
    """lm-eval reads a task YAML whose `process_results` and aggregations are spanjudge's (through
    `!function utils.…`, as a user writes it); a model class of the test stands in for the system
    under evaluation and writes QAGS-XSum's own summaries."""
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    records = qags_xsum_records(shared_data, 2, offset=20)
    rows = [{"article": r["inputs"]["Article"], "summary": r["outputs"]["Summary"]} for r in records]
    task_dir = tmp_path / "tasks"
    task_dir.mkdir()
    (task_dir / "docs.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (task_dir / "utils.py").write_text(
        "from spanjudge.integrations.lm_eval import JudgedResults, errors_per_output, scored_mean\n"
        f"process_results = JudgedResults({str(trained_judge.adapter)!r}, task='qags_xsum',\n"
        "    aspect='factual consistency', input_field='article', max_new_tokens=96, retries=0)\n"
    )
    (task_dir / "spanjudge_summaries.yaml").write_text(
        f"task: spanjudge_summaries\ndataset_path: json\ndataset_kwargs:\n  data_files: {task_dir / 'docs.jsonl'}\n"
        "test_split: train\noutput_type: generate_until\ndoc_to_text: '{{article}}'\ndoc_to_target: ''\n"
        "process_results: !function utils.process_results\nmetric_list:\n"
        "  - {metric: spanjudge_score, aggregation: !function utils.scored_mean, higher_is_better: true}\n"
        "  - {metric: spanjudge_errors, aggregation: !function utils.errors_per_output, higher_is_better: false}\n"
    )

    class Summaries(LM):  # the system under evaluation: it "writes" each article's summary
        def generate_until(self, requests: list) -> list[str]:
            return [request.doc["summary"] for request in requests]

        def loglikelihood(self, requests: list) -> list:
            raise NotImplementedError

        def loglikelihood_rolling(self, requests: list) -> list:
            raise NotImplementedError

    results = simple_evaluate(
        model=Summaries(),
        tasks=["spanjudge_summaries"],
        task_manager=TaskManager(include_path=str(task_dir), include_defaults=False),  # not lm-eval's own thousands
        log_samples=True,
        bootstrap_iters=0,
    )
    metrics = results["results"]["spanjudge_summaries"]
    samples = results["samples"]["spanjudge_summaries"]
    assert len(samples) == 2
    for sample, row in zip(samples, rows, strict=True):
        errors = sample["spanjudge_errors"]
        assert (sample["spanjudge_score"] is None) == (errors is None)
        for error in errors or []:
            if error["start"] is not None:
                assert row["summary"][error["start"] : error["end"]] == error["text"]
    scored = [s["spanjudge_score"] for s in samples if s["spanjudge_score"] is not None]
    assert metrics["spanjudge_score,none"] == (sum(scored) / len(scored) if scored else None)
