"""data_gen records → tokenized (input_ids, labels) with the loss on the completion only.

The prompt is the judge's chat prompt (`judge_prompt_ids`, the very ids scoring reads), from
the built-in template or the user's `data.prompt_template`;
the completion is the merged evaluation rendered by the output contract, plus the token(s)
that close the assistant turn. Prompt and completion are tokenized separately and joined,
which is exactly how the model meets them at inference: the prompt tokenized alone, then
generated tokens. Every prompt token gets the label -100, so it adds nothing to the loss.
Record text (inputs, outputs, explanations) is encoded as text: a control token's spelling in it
never becomes the control token (`inference.chat`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from spanjudge.core.catalog import Catalog
from spanjudge.core.errors import InputError
from spanjudge.core.jsonl import Located, iter_jsonl
from spanjudge.core.overlap import input_digest
from spanjudge.inference.contract import Evaluation
from spanjudge.inference.judge_conversation import judge_training_ids, request_from_record
from spanjudge.inference.prompts import PromptTemplate

if TYPE_CHECKING:
    import datasets
    from transformers import PreTrainedTokenizerBase

IGNORE_INDEX = -100  # the label PyTorch's cross-entropy skips


@dataclass
class TokenizedSplit:
    """One split, ready for the trainer, with what was left out and why."""

    path: Path
    input_ids: list[list[int]] = field(default_factory=list)
    labels: list[list[int]] = field(default_factory=list)
    too_long: list[str] = field(default_factory=list)  # "file:line (N tokens)"
    repeated: int = 0  # extra copies of 'No Error' records (data.repeat_no_error)
    input_digests: set[str] = field(default_factory=set)  # inputs trained on (spanjudge.core.overlap)

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.input_ids)

    @property
    def completion_tokens(self) -> int:
        return sum(sum(1 for label in labels if label != IGNORE_INDEX) for labels in self.labels)

    def to_dataset(self) -> datasets.Dataset:
        import datasets

        return datasets.Dataset.from_dict({"input_ids": self.input_ids, "labels": self.labels})


def record_evaluation(record: dict[str, Any], where: str) -> Evaluation:
    if "evaluation" not in record:
        raise InputError(f"{where}: missing field 'evaluation' (unscored records cannot be trained on)")
    try:
        evaluation = Evaluation.model_validate(record["evaluation"])
    except ValidationError as exc:
        problem = exc.errors()[0]
        field_name = ".".join(str(p) for p in problem["loc"])
        raise InputError(f"{where}: evaluation.{field_name}: {problem['msg']}") from None
    if evaluation.score is None:
        raise InputError(f"{where}: the evaluation has no score (unscored records cannot be trained on)")
    return evaluation


def example_labels(prompt_ids: list[int], completion_ids: list[int]) -> tuple[list[int], list[int]]:
    """(input_ids, labels) of one example: the loss on the completion only."""
    return prompt_ids + completion_ids, [IGNORE_INDEX] * len(prompt_ids) + completion_ids


def iter_records(path: Path, catalog: Catalog) -> Iterator[Located]:
    """(where, record) from train.jsonl, or from a JSON array in OpeNLGauge's released format."""
    if path.suffix == ".json":
        from spanjudge.inference.openlgauge import iter_openlgauge

        for record in iter_openlgauge(path, catalog):
            yield record["provenance"]["source"], record
    else:
        yield from iter_jsonl(path)


def tokenize_split(
    path: Path,
    tokenizer: PreTrainedTokenizerBase,
    catalog: Catalog,
    *,
    max_length: int,
    too_long: str = "error",
    limit: int | None = None,
    repeat_no_error: int = 1,
    template: PromptTemplate | None = None,
) -> TokenizedSplit:
    """Every record of `path` as (input_ids, labels); checks lengths before any model loads.

    Records whose evaluation has no error appear `repeat_no_error` times (counted in `repeated`).
    The prompt is rendered with `template` (data.prompt_template; None: the built-in prompt).
    """
    split = TokenizedSplit(path)
    for count, (where, record) in enumerate(iter_records(path, catalog)):
        if limit is not None and count >= limit:
            break
        request = request_from_record(record, catalog, where, template)
        evaluation = record_evaluation(record, where)
        input_ids, labels = example_labels(*judge_training_ids(tokenizer, request, evaluation))
        if len(input_ids) > max_length:
            prompt_length = labels.count(IGNORE_INDEX)
            detail = f"{len(input_ids)} tokens (prompt {prompt_length}) > data.max_length {max_length}"
            if too_long == "error":
                raise InputError(
                    f"{where}: example is {detail}; raise data.max_length or set data.too_long: skip "
                    "(truncating would cut the evaluation the model must learn to finish)"
                )
            split.too_long.append(f"{where} ({len(input_ids)} tokens)")
            continue
        copies = 1 if evaluation.errors else repeat_no_error
        split.input_ids += [input_ids] * copies
        split.labels += [labels] * copies
        split.repeated += copies - 1
        split.input_digests.add(input_digest(request.inputs))
    if not split.input_ids:
        raise InputError(
            f"{path}: no trainable records" + (f" ({len(split.too_long)} too long)" if split.too_long else "")
        )
    return split


def describe(splits: Sequence[TokenizedSplit]) -> list[str]:
    lines = []
    for split in splits:
        line = (
            f"{split.path}: {len(split.input_ids)} examples, "
            f"{split.tokens} tokens ({split.completion_tokens} in completions)"
        )
        if split.repeated:
            line += f" (incl. {split.repeated} repeats of 'No Error' records)"
        if split.too_long:
            line += f"; {len(split.too_long)} skipped as too long"
        lines.append(line)
    return lines
