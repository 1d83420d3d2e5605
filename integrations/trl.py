"""The judge as a reward for training a generator with TRL's GRPO: a reward function with TRL's
`reward_funcs` signature, whose reward is explainable (the errors behind it are logged beside it).

    from trl import GRPOConfig, GRPOTrainer
    from spanjudge.integrations.trl import spanjudge_reward

    reward = spanjudge_reward("path/to/adapter", task="qags_xsum", aspect="factual consistency",
                              input_column="article", reward="errors")
    trainer = GRPOTrainer(model="...", reward_funcs=[reward], args=GRPOConfig(..., log_completions=True),
                          train_dataset=dataset)

TRL calls the function with the batch's `prompts`, `completions` and every other dataset column as a
list; it returns one float per completion, or None where the judge left the completion unscored
(TRL then leaves it out of that reward: never a 0 for a reply that did not parse). A completion that
cannot be judged gets None too, with its reason in the errors column, and the rest of the batch is judged:
an empty one, one that is not text, a prompt without a user turn, a `None` in the input column. The completions
are judged in one batch through `Judge.predict`. The judge's input is the completion's prompt (its
last user message when conversational), or the `input_column` of the dataset; `reference_column`
gives the task's reference input.

The reward (`reward=`), each documented in docs/guides/reward.md:
- `"score"`: the judge's score / 100, in [0, 1];
- `"errors"`: minus the errors weighted by severity, −Σ severity / 5 (a severity-5 error costs 1, an
  output without errors gets 0);
- `"expected"`: minus the judge's expected number of errors, read from its own probabilities along its
  reply (`ReplyProbabilities.expected_errors`: each error counts the probability the judge gives to writing
  it, so a "No Error" reply still costs P(an error) and a doubtful error costs little); needs a judge
  that reads its probabilities (`probabilities=True`, the transformers, llama.cpp or vLLM engine).

Each completion's errors go to TRL's completions table (the `log_extra` column `spanjudge errors`:
"severity: “quote” — explanation" per error, or the reason it is unscored), beside the reward, when
`log_completions=True`; the batch's mean number of errors and its unscored share are logged as the
metrics `spanjudge_errors` and `spanjudge_unscored` (a TRL without the `log_extra` and `log_metric` hooks
gets the same rewards, without the log). TRL is one of spanjudge's own dependencies.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from spanjudge.core.errors import InputError
from spanjudge.inference.judge import Judge
from spanjudge.inference.predictions import Prediction

from . import check_task_aspect, explained_errors

RewardKind = Literal["score", "errors", "expected"]
REWARDS: tuple[RewardKind, ...] = ("score", "errors", "expected")
ERRORS_COLUMN = "spanjudge errors"
MAX_SEVERITY = 5  # an error of this severity costs 1 in the "errors" reward
EMPTY = "an empty completion"  # why one is not judged (its reward is None)


class SpanjudgeReward:
    """A TRL reward function (`__call__(prompts, completions, **columns) -> list[float | None]`) backed by a
    `Judge`. `__name__` is what TRL calls the reward in its logs ("spanjudge")."""

    __name__ = "spanjudge"

    def __init__(
        self,
        judge: str | Path | Judge,
        task: str,
        aspect: str,
        *,
        aspect_definition: str | None = None,
        reward: RewardKind = "score",
        input_column: str | None = None,
        reference_column: str | None = None,
        batch_size: int | None = None,
        **judge_options: Any,
    ) -> None:
        """`judge`: an adapter folder, model or Hub id (loaded once, with `judge_options` as in
        `Judge.from_pretrained`), or a loaded `Judge`."""
        if isinstance(judge, Judge):
            check_reward(reward, judge.probabilities)
            self.judge = judge
        else:  # checked before the model loads
            check_reward(reward, bool(judge_options.get("probabilities")))
            self.judge = Judge.from_pretrained(judge, **judge_options)
        check_task_aspect(self.judge, task, aspect, aspect_definition)
        self.task, self.aspect, self.aspect_definition = task, aspect, aspect_definition
        self.reward, self.input_column, self.reference_column = reward, input_column, reference_column
        self.batch_size = batch_size
        self._lock = threading.Lock()  # one batch at a time: an in-process model is not shared between threads

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        log_extra: Callable[[str, list[Any]], None] | None = None,
        log_metric: Callable[[str, float], None] | None = None,
        **columns: Any,
    ) -> list[float | None]:
        _check_lengths(prompts, completions, columns)
        # each item to judge, or why it is not judged: one odd completion is left unscored, never the batch
        items = [
            self._item(i, prompt, completion, columns)
            for i, (prompt, completion) in enumerate(zip(prompts, completions, strict=True))
        ]
        judged = [i for i, item in enumerate(items) if isinstance(item, dict)]
        with self._lock:
            predictions = self.judge.predict(
                [item for item in items if isinstance(item, dict)], task=self.task, aspect=self.aspect,
                aspect_definition=self.aspect_definition, batch_size=self.batch_size,
            ) if judged else []  # fmt: skip
        found: dict[int, Prediction] = dict(zip(judged, predictions, strict=True))
        rewards = [reward_of(found[i], self.reward) if i in found else None for i in range(len(items))]
        if log_extra is not None:
            log_extra(
                ERRORS_COLUMN,
                [explained(found[i]) if i in found else f"unscored: {items[i]}" for i in range(len(items))],
            )
        if log_metric is not None:
            scored = [p for p in predictions if p.score is not None]
            log_metric("spanjudge_unscored", 1 - len(scored) / len(items) if items else 0.0)
            if scored:
                log_metric("spanjudge_errors", sum(len(p.errors) for p in scored) / len(scored))
        return rewards

    def _item(self, index: int, prompt: Any, completion: Any, columns: Mapping[str, Any]) -> dict[str, str] | str:
        """The judge's item for one completion, or why it is not judged (its reward is then None)."""
        output, why = _text(completion, "assistant")
        if why or not output.strip():
            return why or EMPTY
        item = {"id": str(index), "output": output}
        for key, column in (("input", self.input_column), ("reference", self.reference_column)):
            if column is None:
                continue
            if column not in columns:
                have = sorted(name for name, values in columns.items() if isinstance(values, list))
                raise InputError(f"{key}_column {column!r} is not a column of the dataset ({', '.join(have)})")
            value = columns[column][index]
            text = str(value) if isinstance(value, str | int | float) and not isinstance(value, bool) else ""
            if not text.strip():  # None is no text (never the text "None")
                return f"the dataset's {column!r} is {'empty' if isinstance(value, str) else repr(value)} in this row"
            item[key] = text
        if "input" not in item:
            text, why = _text(prompt, "user")
            if why or not text.strip():
                return why or "an empty prompt: nothing to judge the completion against"
            item["input"] = text
        return item


spanjudge_reward = SpanjudgeReward  # the documented name: GRPOTrainer(reward_funcs=[spanjudge_reward(...)])


def check_reward(kind: str, reads_probabilities: bool) -> None:
    """A reward kind this judge can give, or one InputError (before a judge is loaded, where it can be)."""
    if kind not in REWARDS:
        raise InputError(f"reward must be one of {', '.join(REWARDS)}, not {kind!r}")
    if kind == "expected" and not reads_probabilities:
        raise InputError(
            "reward='expected' weighs each error by the judge's own probabilities: load the judge with "
            "probabilities=True (the transformers, llama.cpp or vLLM engine), or use reward='errors'"
        )


def reward_of(prediction: Prediction, kind: RewardKind) -> float | None:
    """The reward of one judged completion (see the module), None when it is unscored."""
    if prediction.score is None:
        return None
    if kind == "score":
        return prediction.score / 100
    if kind == "errors":
        return -sum(error.severity for error in prediction.errors) / MAX_SEVERITY
    probabilities = prediction.evaluation.probabilities
    if probabilities is None:  # the reading failed for this reply: no belief to weigh by
        return None
    return -probabilities.expected_errors


def explained(prediction: Prediction) -> str:
    """A completion's errors, one a line ("severity 3: “quote” — explanation"), "No Error", or why it is unscored."""
    if prediction.score is None:
        return f"unscored: {prediction.unscored_reason}"
    return explained_errors(prediction)


def _text(message: Any, role: str) -> tuple[str, str | None]:
    """A standard prompt or completion as it is; a conversational one as its last `role` message's content
    (a list of content parts: their text joined). The second value says why there is no text to judge."""
    if isinstance(message, str):
        return message, None
    what = "prompt" if role == "user" else "completion"
    if not isinstance(message, Sequence) or not all(isinstance(turn, Mapping) for turn in message):
        return "", f"a {what} that is neither text nor a list of messages ({type(message).__name__})"
    contents = [turn.get("content") for turn in message if turn.get("role") == role]
    if not contents:
        return "", f"no {role} message in the {what}"
    content = contents[-1]
    if isinstance(content, str):
        return content, None
    if isinstance(content, list):  # content parts ({"type": "text", "text": ...}; images and the like carry none)
        texts = [part.get("text") for part in content if isinstance(part, Mapping)]
        return "\n".join(text for text in texts if isinstance(text, str)), None
    return "", f"the {role} message's content is {content!r}"


def _check_lengths(prompts: Sequence[Any], completions: Sequence[Any], columns: Mapping[str, Any]) -> None:
    """TRL gives one prompt, one completion and one value of every column per completion; anything else is a
    caller's mistake, said in one line (zip would pair the wrong rows, or stop short)."""
    if len(prompts) != len(completions):
        raise InputError(f"the reward got {len(prompts)} prompts for {len(completions)} completions: one each")
    for name, values in columns.items():
        if isinstance(values, list) and len(values) != len(completions):
            raise InputError(
                f"the dataset column {name!r} has {len(values)} values for {len(completions)} completions: one each"
            )
