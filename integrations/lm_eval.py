"""lm-evaluation-harness: the judge as a task's `process_results`, its spans kept in `--log_samples`.

In a task YAML (lm-eval loads `!function` names from a Python file beside the YAML)::

    # utils.py, beside the task YAML
    from spanjudge.integrations.lm_eval import JudgedResults, errors_per_output, scored_mean
    process_results = JudgedResults("path/to/adapter", task="qags_xsum", aspect="factual consistency",
                                    input_field="article")

    # the task YAML
    process_results: !function utils.process_results
    metric_list:
      - {metric: spanjudge_score, aggregation: !function utils.scored_mean, higher_is_better: true}
      - {metric: spanjudge_errors, aggregation: !function utils.errors_per_output, higher_is_better: false}

Per document the model's generation is judged against the document's input (`input_field`; and
`reference_field` for a task with a reference), giving `spanjudge_score` (0-100, or None when the
judge could not evaluate it: `scored_mean` leaves it out, never counts it as 0) and
`spanjudge_errors` (the errors, each with its offsets in the generation, text, severity and
explanation; None when unscored), which `--log_samples` writes with the sample. The judge loads on the first
document, with the keyword options of `Judge.from_pretrained`; the task and aspect are checked then. A document
the judge cannot take (no input text, an empty or missing generation) is unscored (None), never the end of the
whole lm-eval run; each reason is logged the first time it occurs (`JudgedResults.unscored` counts them), and
`scored_mean` logs how many documents were unscored, with a warning when all were: an instruct model run without
`--apply_chat_template` often writes nothing before the task's stop sequence.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.inference.judge import Judge

from . import check_task_aspect

UNSCORED = {"spanjudge_score": None, "spanjudge_errors": None}  # not an output without errors: no evaluation
ALL_UNSCORED_HINT = (
    "an instruct model run without --apply_chat_template often writes nothing before the task's stop sequence"
)
log = logging.getLogger("spanjudge.lm_eval")


class JudgedResults:
    """A `process_results(doc, results)` that judges the generation with spanjudge."""

    def __init__(
        self,
        judge: str | Path | Judge,
        task: str,
        aspect: str,
        input_field: str = "input",
        reference_field: str | None = None,
        aspect_definition: str | None = None,
        **judge_options: Any,
    ) -> None:
        self._judge, self._options = judge, judge_options
        self.task, self.aspect, self.aspect_definition = task, aspect, aspect_definition
        self.input_field, self.reference_field = input_field, reference_field
        self._checked = False  # the task and aspect, checked once before the first document
        self.unscored: Counter[str] = Counter()  # why documents were unscored, each reason logged once

    def __deepcopy__(self, memo: dict[int, Any]) -> JudgedResults:
        return self  # lm-eval copies a task's config to log it: the loaded model is shared, not copied

    def __repr__(self) -> str:
        judge = self._judge.name if isinstance(self._judge, Judge) else self._judge
        return f"JudgedResults(judge={str(judge)!r}, task={self.task!r}, aspect={self.aspect!r})"

    @property
    def judge(self) -> Judge:
        if not isinstance(self._judge, Judge):  # loaded once, on the first document
            self._judge = Judge.from_pretrained(self._judge, **self._options)
        if not self._checked:
            check_task_aspect(self._judge, self.task, self.aspect, self.aspect_definition)
            self._checked = True
        return self._judge

    def __call__(self, doc: Mapping[str, Any], results: Sequence[str | None]) -> dict[str, Any]:
        judge = self.judge
        item = {"input": doc.get(self.input_field), "output": results[0] if results else None}
        if self.reference_field is not None:
            item["reference"] = doc.get(self.reference_field)
        try:
            [prediction] = judge.predict(
                [item], task=self.task, aspect=self.aspect, aspect_definition=self.aspect_definition
            )
        except InputError as exc:  # this document's texts (the task and aspect were checked at load): unscored
            return self._unscored(str(exc))
        if prediction.score is None:  # no score and no error list (not an output without errors)
            return self._unscored(prediction.unscored_reason or "no score")
        return {"spanjudge_score": prediction.score, "spanjudge_errors": prediction.to_dict()["errors"]}

    def _unscored(self, reason: str) -> dict[str, Any]:
        if not self.unscored[reason]:
            log.warning("spanjudge: a document is unscored: %s (later ones for this reason are only counted)", reason)
        self.unscored[reason] += 1
        return dict(UNSCORED)


def scored_mean(scores: Sequence[float | None]) -> float | None:
    """The mean of the scored documents' scores (None where none was scored, with a warning)."""
    scored = [s for s in scores if s is not None]
    unscored = len(scores) - len(scored)
    if scores and not scored:
        log.warning("spanjudge: all %d documents are unscored, so the score is None: %s", unscored, ALL_UNSCORED_HINT)
    elif unscored:
        log.info("spanjudge: %d of %d documents are unscored and left out of the mean", unscored, len(scores))
    return sum(scored) / len(scored) if scored else None


def errors_per_output(errors: Sequence[Sequence[Mapping[str, Any]] | None]) -> float | None:
    """Errors per scored document (None where none was scored)."""
    scored = [e for e in errors if e is not None]
    return sum(len(e) for e in scored) / len(scored) if scored else None


METRICS = [  # metric_list of a task configured in Python
    {"metric": "spanjudge_score", "aggregation": scored_mean, "higher_is_better": True},
    {"metric": "spanjudge_errors", "aggregation": errors_per_output, "higher_is_better": False},
]
