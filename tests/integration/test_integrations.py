"""spanjudge inside inspect_ai and lm-evaluation-harness: a real `inspect_ai.eval` and a real
`lm_eval.simple_evaluate` of two-sample tasks whose outputs the smoke judge (trained in this
session, transformers on CPU) grades. inspect's model under evaluation is its own mock model (the
outputs are QAGS-XSum summaries); lm-eval's is SmolLM2-135M-Instruct, run by lm-eval itself."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from inspect_ai import Task
from inspect_ai import eval as inspect_eval
from inspect_ai.dataset import Sample
from inspect_ai.model import ModelOutput, ModelUsage, get_model
from inspect_ai.solver import generate
from support.docs_examples import REPO, fenced
from support.judge_records import qags_xsum_records
from support.training_runs import TrainedRun

from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.judged import JudgedEvaluation
from spanjudge.inference.predictions import Prediction
from spanjudge.inference.shipped_models import smollm2_gguf
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


def test_the_lm_eval_how_to_runs_as_written_with_an_instruct_model(
    trained_judge: TrainedRun,
    shared_data: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """docs/howto/lm-eval.md's utils.py and task YAML, as the page shows them (the judge's path aside), run by
    lm-eval's own `simple_evaluate` with the page's command's arguments: SmolLM2-135M-Instruct (lm-eval's `hf`
    model) writes the summaries through its chat template, and the smoke judge grades them."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from spanjudge.integrations.lm_eval import scored_mean

    page = REPO / "docs" / "howto" / "lm-eval.md"
    [utils] = [code for code in fenced(page, "python") if "process_results = JudgedResults(" in code]
    [task] = fenced(page, "yaml")
    assert "runs/quickstart/judge/adapter" in utils and "--apply_chat_template" in page.read_text()
    monkeypatch.chdir(tmp_path)  # lm-eval runs in the task's folder, as the page says
    (tmp_path / "utils.py").write_text(utils.replace("runs/quickstart/judge/adapter", str(trained_judge.adapter)))
    (tmp_path / "summaries.yaml").write_text(task)
    records = qags_xsum_records(shared_data, 2, offset=20)  # after the 20 the judge trained and validated on
    articles = [r["inputs"]["Article"] for r in records]
    (tmp_path / "docs.jsonl").write_text("".join(json.dumps({"article": a}) + "\n" for a in articles))
    results = simple_evaluate(
        model="hf",
        model_args=f"pretrained={convert_gguf(smollm2_gguf())},device=cpu",
        apply_chat_template=True,
        tasks=["judged_summaries"],
        task_manager=TaskManager(include_path=str(tmp_path), include_defaults=False),  # not lm-eval's thousands
        log_samples=True,
        bootstrap_iters=0,
    )
    assert results is not None
    metrics = results["results"]["judged_summaries"]
    samples = results["samples"]["judged_summaries"]
    assert len(samples) == 2 and all(s["resps"][0][0].strip() for s in samples)  # the chat template: text written
    scored = [s["spanjudge_score"] for s in samples if s["spanjudge_score"] is not None]
    assert scored, [s["spanjudge_errors"] for s in samples]  # constrained replies always parse
    assert metrics["spanjudge_score,none"] == sum(scored) / len(scored)
    assert metrics["spanjudge_errors,none"] is not None
    for sample in samples:
        generation = sample["filtered_resps"][0]
        for error in sample["spanjudge_errors"] or []:
            if error["start"] is not None:
                assert generation[error["start"] : error["end"]] == error["text"]
    # what a run in which nothing was scored says, beside its null metric
    with caplog.at_level(logging.INFO, logger="spanjudge.lm_eval"):
        assert scored_mean([None, None]) is None and scored_mean([None, 80.0]) == 80.0
    assert "all 2 documents are unscored" in caplog.text and "--apply_chat_template" in caplog.text
    assert "1 of 2 documents are unscored" in caplog.text
