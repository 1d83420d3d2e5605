"""An error-span benchmark as an inspect_ai task: the model under evaluation is a judge, its reply to each
item's judge prompt is parsed with spanjudge's output contract, and its error spans are scored against the
humans' with MPP (match with partial overlap and partial credit, micro: `eval.spans.metrics`).

    from spanjudge.integrations.inspect_benchmark import error_span_task
    task = error_span_task("data/test.jsonl")   # the rows `spanjudge publish --benchmark` stages

A row is `{id, prompt, output, task, aspect, gold_spans: [{start, end, category, text}]}`. Per sample: the MPP
F1 of its spans as the value, with the credits in the metadata; the task's metrics are MPP's micro precision,
recall and F1 over the scored samples (`mpp_precision`, `mpp_recall`, `mpp_f1`), summed as the paper sums them,
never averaged per sample. A reply that does not parse is unscored (inspect's metrics leave it out), never "No
Error". Needs `pip install 'spanjudge[inspect]'`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from inspect_ai import Task
from inspect_ai.dataset import FieldSpec, json_dataset
from inspect_ai.model import GenerateConfig
from inspect_ai.scorer import Metric, SampleScore, Score, Scorer, Target, metric, scorer
from inspect_ai.solver import TaskState, generate

from spanjudge.eval.spans.metrics import PartialPRF, mpp
from spanjudge.inference.contract import ParseFailure, anchor_evaluation, parse_judge

MAX_REPLY_TOKENS = 512  # room for the contract's errors and score line
ROW_METADATA = ["output", "task", "aspect", "gold_spans"]


def _credits(scores: list[SampleScore]) -> PartialPRF:
    """MPP's credits summed over the scored samples (an unscored one has no `mpp` in its metadata)."""
    total = PartialPRF(0.0, 0.0, 0, 0)
    for sample in scores:
        found = (sample.score.metadata or {}).get("mpp")
        if found is not None:
            total += PartialPRF(found["tp_precision"], found["tp_recall"], found["predicted"], found["gold"])
    return total


@metric
def mpp_precision() -> Metric:
    """MPP's micro precision: the predicted spans' credit over the predicted spans."""

    def precision(scores: list[SampleScore]) -> float:
        return _credits(scores).precision

    return precision


@metric
def mpp_recall() -> Metric:
    """MPP's micro recall: the gold spans' credit over the gold spans."""

    def recall(scores: list[SampleScore]) -> float:
        return _credits(scores).recall

    return recall


@metric
def mpp_f1() -> Metric:
    """MPP's micro F1, from the micro precision and recall."""

    def f1(scores: list[SampleScore]) -> float:
        return _credits(scores).f1

    return f1


@scorer(metrics=[mpp_f1(), mpp_precision(), mpp_recall()], name="spanjudge_error_spans")
def judge_reply_spans() -> Scorer:
    """The judge's reply, parsed and its errors placed in the sample's output, against the sample's gold spans."""

    async def score(state: TaskState, target: Target) -> Score:
        reply, output = state.output.completion, str(state.metadata["output"])
        parsed = parse_judge(reply)
        if isinstance(parsed, ParseFailure):
            return Score.unscored(reason="grader_failed", answer=reply, explanation=f"unparsed reply: {parsed.reason}")
        placed = anchor_evaluation(parsed, output).errors
        spans = [(e.start, e.end) for e in placed if e.start is not None and e.end is not None and e.end > e.start]
        gold = [(int(g["start"]), int(g["end"])) for g in state.metadata["gold_spans"]]
        found = mpp(spans, gold)
        metadata: dict[str, Any] = {"mpp": found.as_dict(), "spans": spans, "unplaced": len(placed) - len(spans)}
        explanation = "\n".join(f"“{output[start:end]}”" for start, end in spans) or "No Error"
        return Score(value=found.f1, answer=reply, explanation=explanation, metadata=metadata)

    return score


def error_span_task(data: str | Path) -> Task:
    """The benchmark's rows (a JSON Lines file) as an inspect task: the judge prompt in, the reply scored."""
    dataset = json_dataset(str(data), FieldSpec(input="prompt", id="id", metadata=ROW_METADATA))
    return Task(
        dataset=dataset,
        solver=generate(),
        scorer=judge_reply_spans(),
        # no temperature here: inspect's `hf/` provider refuses temperature 0 (it decodes greedily without one)
        config=GenerateConfig(max_tokens=MAX_REPLY_TOKENS),
    )
