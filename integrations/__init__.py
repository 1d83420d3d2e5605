"""spanjudge inside the tools researchers already run: an inspect_ai scorer
(`spanjudge.integrations.inspect`), an lm-evaluation-harness `process_results`
(`spanjudge.integrations.lm_eval`) and a TRL GRPO reward function (`spanjudge.integrations.trl`).
Each module imports its tool only when it is imported."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from spanjudge.inference.judge import Judge
    from spanjudge.inference.predictions import Prediction


def check_task_aspect(judge: Judge, task: str, aspect: str, aspect_definition: str | None) -> None:
    """The task and aspect exist (a custom aspect needs only its definition): InputError otherwise. Checked
    when the judge loads, so that an InputError while judging one sample is about that sample's texts,
    which leaves that sample unscored rather than ending the whole evaluation."""
    spec = judge.catalog.task(task)
    if aspect_definition is None:
        spec.aspect(aspect)


def explained_errors(prediction: Prediction) -> str:
    """The errors one a line, "severity 3: “quote” — explanation", or "No Error": what a tool shows beside the score."""
    lines = [f"severity {e.severity}: “{e.text}” — {e.explanation}" for e in prediction.errors]
    return "\n".join(lines) or "No Error"
