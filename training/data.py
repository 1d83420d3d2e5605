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
from spanjudge.inference.judge_conversation import fit_inputs, judge_training_ids, request_from_record
from spanjudge.inference.prompts import PromptTemplate

from .decision import EXAMPLE_WEIGHT

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
    too_long: list[str] = field(default_factory=list)  # left out: "file:line (N tokens)"
    cut: list[str] = field(default_factory=list)  # inputs cut to fit: "file:line (Article 3000→1800 tokens)"
    repeated: int = 0  # extra copies of 'No Error' records (data.repeat_no_error)
    weights: list[float] | None = None  # each example's loss weight (data.example_weights), mean 1; None: all 1
    input_digests: set[str] = field(default_factory=set)  # inputs trained on (spanjudge.core.overlap)

    @property
    def tokens(self) -> int:
        return sum(len(ids) for ids in self.input_ids)

    @property
    def completion_tokens(self) -> int:
        return sum(sum(1 for label in labels if label != IGNORE_INDEX) for labels in self.labels)

    def to_dataset(self) -> datasets.Dataset:
        import datasets

        columns: dict[str, list[list[int]] | list[float]] = {"input_ids": self.input_ids, "labels": self.labels}
        if self.weights is not None:
            columns[EXAMPLE_WEIGHT] = self.weights
        return datasets.Dataset.from_dict(columns)


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
    too_long: str = "cut",
    limit: int | None = None,
    repeat_no_error: int = 1,
    example_weights: str = "none",
    template: PromptTemplate | None = None,
) -> TokenizedSplit:
    """Every record of `path` as (input_ids, labels); checks lengths before any model loads.

    Records whose evaluation has no error appear `repeat_no_error` times (counted in `repeated`).
    The prompt is rendered with `template` (data.prompt_template; None: the built-in prompt). An example
    longer than `max_length` is, by `too_long`: cut to fit (its inputs, as judging cuts them:
    `judge_conversation.fit_inputs`; listed in `cut`), refused (error), or left out (skip; in `too_long`).
    With `example_weights` "agreement", each example is weighted by its record's annotator agreement
    (`record_agreement`), scaled to a mean of 1 over the split (`weights`).
    """
    split = TokenizedSplit(path)
    agreements: list[float] = []
    for count, (where, record) in enumerate(iter_records(path, catalog)):
        if limit is not None and count >= limit:
            break
        request = request_from_record(record, catalog, where, template)
        evaluation = record_evaluation(record, where)
        prompt_ids, completion_ids = judge_training_ids(tokenizer, request, evaluation)
        if too_long == "cut" and len(prompt_ids) + len(completion_ids) > max_length:
            fitted = fit_inputs(tokenizer, request, max_length - len(completion_ids))
            if fitted.request is None:
                raise InputError(
                    f"{where}: the example cannot fit data.max_length {max_length} even with its inputs cut (the "
                    f"output and the evaluation take {fitted.needed + len(completion_ids) - max_length} tokens too "
                    "many); raise data.max_length or set data.too_long: skip"
                )
            request = fitted.request
            prompt_ids, completion_ids = judge_training_ids(tokenizer, request, evaluation)
            split.cut.append(f"{where} ({fitted.cut})")
        input_ids, labels = example_labels(prompt_ids, completion_ids)
        if len(input_ids) > max_length:
            prompt_length = labels.count(IGNORE_INDEX)
            detail = f"{len(input_ids)} tokens (prompt {prompt_length}) > data.max_length {max_length}"
            if too_long == "error":
                raise InputError(
                    f"{where}: example is {detail}; raise data.max_length, or set data.too_long: cut (its inputs "
                    "cut as judging cuts them) or skip; the evaluation the model must learn to finish is never cut"
                )
            split.too_long.append(f"{where} ({len(input_ids)} tokens)")
            continue
        copies = 1 if evaluation.errors else repeat_no_error
        if example_weights == "agreement":
            agreements += [record_agreement(record, where)] * copies
        split.input_ids += [input_ids] * copies
        split.labels += [labels] * copies
        split.repeated += copies - 1
        split.input_digests.add(input_digest(request.inputs))
    if not split.input_ids:
        raise InputError(
            f"{path}: no trainable records" + (f" ({len(split.too_long)} too long)" if split.too_long else "")
        )
    if example_weights == "agreement":
        mean = sum(agreements) / len(agreements)
        if mean == 0:
            raise InputError(f"{path}: data.example_weights agreement: the annotators agree on no record")
        split.weights = [agreement / mean for agreement in agreements]
    return split


def record_agreement(record: dict[str, Any], where: str) -> float:
    """The share of the record's span clusters that every annotator marks (`data_gen.vote.agreement`), kept in
    its provenance by a vote merge (`spanjudge import` with several annotators, `annotate`'s merge: vote)."""
    agreement = record.get("provenance", {}).get("merge", {}).get("agreement")
    if not isinstance(agreement, int | float) or not 0 <= agreement <= 1:
        raise InputError(
            f"{where}: data.example_weights agreement needs records merged by vote, with provenance.merge.agreement "
            "(0 to 1): import several annotators with merge: {method: vote}, or set example_weights: none"
        )
    return float(agreement)


def describe(splits: Sequence[TokenizedSplit]) -> list[str]:
    lines = []
    for split in splits:
        line = (
            f"{split.path}: {len(split.input_ids)} examples, "
            f"{split.tokens} tokens ({split.completion_tokens} in completions)"
        )
        if split.repeated:
            line += f" (incl. {split.repeated} repeats of 'No Error' records)"
        if split.weights is not None:
            unweighted = sum(weight == 0 for weight in split.weights)
            line += f"; weighted by annotator agreement ({unweighted} at weight 0)"
        if split.cut:
            line += f"; {len(split.cut)} with their inputs cut to fit data.max_length"
        if split.too_long:
            line += f"; {len(split.too_long)} skipped as too long"
        lines.append(line)
    return lines
