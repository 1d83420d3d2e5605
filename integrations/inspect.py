"""An inspect_ai scorer: spanjudge's judge grades each sample's output, with its error spans.

    from inspect_ai import Task, eval
    from spanjudge.integrations.inspect import spanjudge_scorer

    task = Task(dataset=..., solver=generate(),
                scorer=spanjudge_scorer("path/to/adapter", task="qags_xsum", aspect="factual consistency"))

Per sample: `Score(value=<0-100>, answer=<the output>, explanation=<the errors, one a line>,
metadata={"errors": [{start, end, text, severity, explanation}], "judge": ..., ...})`. The
sample's input is the task's first input, its output the model's completion, and with
`reference=True` the sample's target is the task's reference input. An output the judge cannot
evaluate is `Score.unscored(reason="grader_failed")`, which inspect's metrics skip: never a 0.
Needs `pip install 'spanjudge[inspect]'`.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

from inspect_ai.scorer import Score, Scorer, Target, mean, scorer, stderr
from inspect_ai.solver import TaskState

from spanjudge.core.errors import InputError
from spanjudge.inference.judge import Judge

from . import check_task_aspect, explained_errors

if TYPE_CHECKING:
    from spanjudge.inference.predictions import Prediction


@scorer(metrics=[mean(), stderr()], name="spanjudge")
def spanjudge_scorer(
    judge: str | Path | Judge,
    task: str,
    aspect: str,
    aspect_definition: str | None = None,
    reference: bool = False,
    **judge_options: Any,
) -> Scorer:
    """`judge`: an adapter folder, model or Hub id (loaded once, with `judge_options` as in
    `Judge.from_pretrained`), or a loaded `Judge`."""
    loaded = judge if isinstance(judge, Judge) else Judge.from_pretrained(judge, **judge_options)
    check_task_aspect(loaded, task, aspect, aspect_definition)  # so an InputError below is about one sample
    lock = asyncio.Lock()  # one judgment at a time: an in-process model is not shared between threads

    async def score(state: TaskState, target: Target) -> Score:
        item = {"id": str(state.sample_id), "input": state.input_text, "output": state.output.completion}
        if reference:
            item["reference"] = target.text
        try:
            async with lock:
                [prediction] = await asyncio.to_thread(
                    loaded.predict, [item], task=task, aspect=aspect, aspect_definition=aspect_definition
                )
        except InputError as error:  # this sample's texts (an empty input, no completion): unscored, not an error
            return Score.unscored(reason="grader_failed", answer=state.output.completion, explanation=str(error))
        return score_of(prediction, state.output.completion, judge=loaded.name)

    return score


def score_of(prediction: Prediction, output: str, judge: str) -> Score:
    """inspect's Score for one prediction: the errors in the explanation and, whole, in the metadata."""
    errors = prediction.to_dict()["errors"]  # start, end, text, severity, explanation
    metadata = {"errors": errors, "judge": judge, "expected_score": _expected(prediction)}
    if prediction.score is None:
        return Score.unscored(
            reason="grader_failed", answer=output, explanation=prediction.unscored_reason, metadata=metadata
        )
    return Score(value=prediction.score, answer=output, explanation=explained_errors(prediction), metadata=metadata)


def _expected(prediction: Prediction) -> float | None:
    """The judge's expected score, where it read its probabilities (`probabilities=True`)."""
    probabilities = prediction.evaluation.probabilities
    return None if probabilities is None else probabilities.expected_score
