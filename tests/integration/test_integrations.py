"""spanjudge inside inspect_ai: a real `inspect_ai.eval` of a two-sample task whose outputs the
smoke judge (trained in this session, transformers on CPU) grades. The solver's model is
inspect's own mock model (`mockllm/model`, which replies with the outputs given to it): the
outputs under test are QAGS-XSum summaries, not a model's generations."""

from __future__ import annotations

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
