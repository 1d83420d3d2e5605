"""The distilled judge's conversation: one function for training and for scoring.

Training encodes (prompt, completion) pairs with `judge_training_ids`; scoring encodes
`judge_prompt_ids` (or sends `judge_chat_prompt`'s text to a server). All start from
`judge_messages`, and the chat template is applied the same way in all of them, so the model sees
at inference exactly the context it was trained on (the published OpeNLGauge code does not
guarantee this). The judged text never becomes a control token on either side (`chat`).

A judge trained with its own prompt template (`data.prompt_template`, or a foreign judge such
as OpeNLGauge's released adapter) carries it on each request (`JudgeRequest.template`); the
trained adapter folder keeps a copy (`TEMPLATE_FILE`, named in spanjudge.json), which scoring
picks up (`stored_template`), so both sides render the same file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.artifacts import ADAPTER_METADATA, read_adapter_metadata
from spanjudge.core.catalog import Aspect, Catalog, Task, validate_inputs
from spanjudge.core.errors import InputError, SpanjudgeError

from .chat import Piece, chat_pieces, encode_chat, encode_pieces, encode_text, served_prompt
from .contract import Evaluation, render_judge
from .prompts import PromptTemplate, render_judge_prompt

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase


TRUNCATION_MARK = " [...]"  # where an input was cut to fit (judging and training cut alike)


@dataclass(frozen=True)
class JudgeRequest:
    """One thing to evaluate: a task, an aspect, the task's inputs by header and the output."""

    task: Task
    aspect: Aspect
    inputs: Mapping[str, str]
    output: str
    id: str | None = None
    extra_task_info: str | None = field(default=None, compare=False)
    template: PromptTemplate | None = None  # the judge's own prompt template; None: configs/prompts/judge.jinja

    def user_prompt(self) -> str:
        if self.template is not None:
            try:
                return self.template.render(
                    self.task, self.aspect, self.inputs, self.output, extra_task_info=self.extra_task_info
                )
            except InputError as exc:
                raise InputError(f"{exc} (item {self.id})" if self.id is not None else str(exc)) from None
        return render_judge_prompt(
            self.task, self.aspect, self.inputs, self.output, extra_task_info=self.extra_task_info
        )


TEMPLATE_FILE = "prompt_template.jinja"  # the copy of data.prompt_template in a trained adapter folder


def stored_template(adapter: Path | str) -> PromptTemplate | None:
    """The prompt template a spanjudge adapter folder was trained with (its spanjudge.json's
    `prompt_template`), or None: trained on the built-in prompt, or not a spanjudge folder."""
    metadata = read_adapter_metadata(Path(adapter))
    name = metadata.prompt_template if metadata is not None else None
    if not name:
        return None
    meta = Path(adapter).expanduser() / ADAPTER_METADATA
    path = meta.parent / str(name)
    if not path.is_file():
        raise InputError(f"{meta} names the prompt template '{name}', which is not in {meta.parent}")
    return PromptTemplate.load(path)


def judge_messages(request: JudgeRequest) -> list[dict[str, str]]:
    return [{"role": "user", "content": request.user_prompt()}]


def _require_template(tokenizer: PreTrainedTokenizerBase) -> None:
    if not getattr(tokenizer, "chat_template", None):
        name = getattr(tokenizer, "name_or_path", "the tokenizer")
        raise SpanjudgeError(
            f"{name} has no chat template; the judge is a chat model (use an instruct model, "
            "or set a chat template on the tokenizer before training)"
        )


def judge_chat_prompt(tokenizer: PreTrainedTokenizerBase, request: JudgeRequest) -> str:
    """The text the judge reads, for a server that takes text: the chat template with the assistant turn
    opened, any control-token spelling in the request's text defused (`chat.served_prompt`)."""
    _require_template(tokenizer)
    return served_prompt(tokenizer, judge_messages(request))


def judge_prompt_ids(tokenizer: PreTrainedTokenizerBase, request: JudgeRequest) -> list[int]:
    """The token ids the judge reads: the chat template with the assistant turn opened; the request's
    text (inputs, output, aspect definition) never becomes a control token (`chat.encode_chat`)."""
    _require_template(tokenizer)
    return encode_chat(tokenizer, judge_messages(request))


@dataclass(frozen=True)
class FittedRequest:
    """A request whose prompt fits a token budget (`fit_inputs`)."""

    request: JudgeRequest | None  # None: it cannot fit, even with its inputs cut
    cut: str | None = None  # what was cut ("Article 5000→3000 tokens"), None when nothing was
    needed: int = 0  # the tokens the prompt still needs when it cannot fit


def fit_inputs(tokenizer: PreTrainedTokenizerBase, request: JudgeRequest, budget: int) -> FittedRequest:
    """The request with its inputs cut so that its prompt (`judge_prompt_ids`) takes at most `budget`
    tokens: the longest input first, each cut one ending in `TRUNCATION_MARK`; the output and the
    aspect are never cut. Judging (the context less the reply's tokens) and training (data.max_length
    less the completion) cut the same way."""
    excess = len(judge_prompt_ids(tokenizer, request)) - budget
    if excess <= 0:
        return FittedRequest(request)
    inputs = dict(request.inputs)
    before = {header: len(encode_text(tokenizer, text)) for header, text in inputs.items()}
    lengths = dict(before)
    mark = len(encode_text(tokenizer, TRUNCATION_MARK))
    while excess > 0:
        header = max(lengths, key=lambda h: lengths[h])
        keep = lengths[header] - excess - mark
        if keep < 1:
            return FittedRequest(None, needed=budget + excess)
        inputs[header] = tokenizer.decode(encode_text(tokenizer, inputs[header])[:keep]) + TRUNCATION_MARK
        request = replace(request, inputs=dict(inputs))
        lengths[header] = len(encode_text(tokenizer, inputs[header]))
        excess = len(judge_prompt_ids(tokenizer, request)) - budget
    cut = ", ".join(f"{h} {before[h]}→{lengths[h]} tokens" for h in before if lengths[h] != before[h])
    return FittedRequest(request, cut)


def judge_training_ids(
    tokenizer: PreTrainedTokenizerBase, request: JudgeRequest, evaluation: Evaluation
) -> tuple[list[int], list[int]]:
    """(prompt ids, completion ids) of a training example: the prompt is `judge_prompt_ids`; the completion
    is the evaluation (its text, never a control token) and the template's end of the assistant turn."""
    prompt, completion = _training_pieces(tokenizer, request, evaluation)
    return encode_pieces(tokenizer, prompt), encode_pieces(tokenizer, completion)


def judge_training_texts(
    tokenizer: PreTrainedTokenizerBase, request: JudgeRequest, evaluation: Evaluation
) -> tuple[str, str]:
    """(prompt, completion) as text: the prompt is the chat template with the assistant turn opened;
    the completion is the rendered evaluation plus whatever the template closes the assistant turn
    with (so the model learns to stop). Training encodes them with `judge_training_ids`."""
    prompt, completion = _training_pieces(tokenizer, request, evaluation)
    return _text(prompt), _text(completion)


def _training_pieces(
    tokenizer: PreTrainedTokenizerBase, request: JudgeRequest, evaluation: Evaluation
) -> tuple[list[Piece], list[Piece]]:
    """The pieces (`chat.chat_pieces`) of the prompt and of the completion that follows it."""
    _require_template(tokenizer)
    messages = judge_messages(request)
    conversation = [*messages, {"role": "assistant", "content": render_judge(evaluation)}]
    prompt = chat_pieces(tokenizer, messages)
    full = chat_pieces(tokenizer, conversation, add_generation_prompt=False)
    completion = _after(full, len(_text(prompt)))
    if completion is None or not _text(full).startswith(_text(prompt)):
        raise SpanjudgeError(
            "the chat template renders the prompt differently when an answer follows it; "
            "prompt and completion cannot be split for completion-only loss"
        )
    return prompt, completion


def _text(pieces: list[Piece]) -> str:
    return "".join(text for text, _ in pieces)


def _after(pieces: list[Piece], length: int) -> list[Piece] | None:
    """The pieces of a rendered chat after its first `length` characters, which must be template text
    or whole contents (never a cut through a content)."""
    at = 0
    for index, (text, content) in enumerate(pieces):
        if at + len(text) > length:
            cut = length - at
            if content and cut:
                return None
            return [(text[cut:], content), *pieces[index + 1 :]]
        at += len(text)
    return [] if at == length else None


def request_from_record(
    record: Mapping[str, Any], catalog: Catalog, where: str, template: PromptTemplate | None = None
) -> JudgeRequest:
    """A data_gen record (or anything with the same fields) as a JudgeRequest, rendered with
    `template` (None: the built-in prompt).

    The task comes from the catalog; an aspect the task does not define is taken inline from
    the record's `aspect_definition` (a custom aspect)."""
    missing = [key for key in ("task_id", "aspect_name", "inputs", "outputs") if key not in record]
    if missing:
        raise InputError(f"{where}: missing field '{missing[0]}'")
    try:
        task = catalog.task(str(record["task_id"]))
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    name = str(record["aspect_name"])
    if name in task.aspects:
        aspect = task.aspects[name]
    elif record.get("aspect_definition"):
        aspect = Aspect.custom(name, str(record["aspect_definition"]))
    else:
        raise InputError(f"{where}: task '{task.id}' has no aspect '{name}' and the record gives no aspect_definition")
    outputs = record["outputs"]
    if not isinstance(outputs, Mapping) or len(outputs) != 1:
        raise InputError(f"{where}: 'outputs' must map the output header to the one evaluated text")
    inputs = record["inputs"]
    if not isinstance(inputs, Mapping):
        raise InputError(f"{where}: 'inputs' must map input headers to texts")
    try:
        return JudgeRequest(
            task=task,
            aspect=aspect,
            inputs=validate_inputs(task, {str(k): str(v) for k, v in inputs.items()}),
            output=str(next(iter(outputs.values()))),
            id=str(record["id"]) if "id" in record else None,
            extra_task_info=record.get("extra_task_info"),
            template=template,
        )
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
