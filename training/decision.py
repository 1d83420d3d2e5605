"""The training loss, weighted: the judge's decision (`training.decision_weight`) and each example
(`data.example_weights`).

The first token of every completion decides between `No Error` and `Error 1:`; everything
after it follows from that choice. In the plain completion loss that token is one of the
~130 tokens of an average evaluation, so a small student learns the spans long before it
learns *whether* an output has any, and greedy decoding then takes the likelier answer for
every output alike (bench/results/distill_quintd.md: 0 of 80 held-out outputs "No Error").
With a decision weight d, the first completion token of each example counts d times; with
example weights w_r (a record's annotator agreement, `training.data`), example r counts w_r times:

    loss = Σ_r w_r (Σ_completion tokens CE + (d − 1) CE(first completion token)) / N

N is the trainer's own token count (across accumulation steps and processes), so d = 1 and w = 1
are exactly TRL's loss, and the evaluation loss stays unweighted (comparable between runs).

The extra terms reuse TRL's fused loss forward: a forward hook takes the per-token
log-probabilities it already computed, so no logits are built and no second forward runs.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

EXAMPLE_WEIGHT = "example_weight"  # the dataset column and batch key of each example's weight


def first_completion_tokens(label_mask: torch.Tensor) -> torch.Tensor:
    """Of each row's completion positions (True in `label_mask`, shape batch × positions), the first one."""
    return label_mask & (label_mask.long().cumsum(dim=1) == 1)


def decision_term(log_probs: torch.Tensor, label_mask: torch.Tensor, num_tokens: torch.Tensor | int) -> torch.Tensor:
    """Σ over rows of the first completion token's cross-entropy, divided by `num_tokens`."""
    first = first_completion_tokens(label_mask)
    return -(log_probs * first).sum() / num_tokens


def extra_loss(
    log_probs: torch.Tensor,
    label_mask: torch.Tensor,
    num_tokens: torch.Tensor | int,
    decision_weight: float,
    example_weights: torch.Tensor | None,
) -> torch.Tensor:
    """What the weights add to TRL's loss (see the module): Σ_r [(w_r − 1) Σ CE + w_r (d − 1) CE(first)] / N."""
    if example_weights is None:
        return (decision_weight - 1.0) * decision_term(log_probs, label_mask, num_tokens)
    weights = example_weights.to(log_probs.dtype)
    rows = -(log_probs * label_mask).sum(dim=1)
    firsts = -(log_probs * first_completion_tokens(label_mask)).sum(dim=1)
    return ((weights - 1.0) * rows + weights * (decision_weight - 1.0) * firsts).sum() / num_tokens


def weighted_trainer(decision_weight: float = 1.0, example_weights: bool = False) -> type:
    """TRL's SFTTrainer with each example's first completion token counted `decision_weight` times, and with
    `example_weights` each example counted as its `example_weight` column says, in training."""
    from trl import SFTTrainer

    class WeightedSFTTrainer(SFTTrainer):
        data_collator: Callable[[list[dict[str, Any]]], dict[str, Any]]  # transformers' Trainer attributes
        _signature_columns: list[str] | None

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            if example_weights:  # TRL's collator knows nothing of the weights: they join its batch here
                self.data_collator = _with_example_weights(self.data_collator)

        def _set_signature_columns_if_needed(self) -> None:
            super()._set_signature_columns_if_needed()
            columns = self._signature_columns or []
            if example_weights and EXAMPLE_WEIGHT not in columns:
                self._signature_columns = [*columns, EXAMPLE_WEIGHT]  # kept, not pruned

        def compute_loss(
            self,
            model: torch.nn.Module,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: torch.Tensor | int | None = None,
        ) -> torch.Tensor | tuple[torch.Tensor, Any]:
            weights = inputs.pop(EXAMPLE_WEIGHT, None)
            if not self.model.training:  # evaluation: the plain loss, comparable across runs
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            captured: list[Any] = []
            handle = model.register_forward_hook(lambda _module, _args, output: captured.append(output))
            try:
                result = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            finally:
                handle.remove()
            fused = captured[0] if captured else None
            if getattr(fused, "log_probs", None) is None or getattr(fused, "label_mask", None) is None:
                raise RuntimeError(  # another loss path (label smoothing, a custom loss): nothing to weigh
                    "training.decision_weight and data.example_weights need TRL's fused completion loss; leave "
                    "label_smoothing_factor and loss_type at their defaults in training.trainer_args"
                )
            assert fused is not None  # checked just above
            count = fused.label_mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            extra = extra_loss(fused.log_probs, fused.label_mask, count, decision_weight, weights)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                extra = extra * (self.accelerator.num_processes // self.get_tp_size())  # as TRL scales its own loss
            if return_outputs:
                loss, outputs = result
                return loss + extra, outputs
            return result + extra

    return WeightedSFTTrainer


def _with_example_weights(collate: Callable[[list[dict[str, Any]]], dict[str, Any]]) -> Callable[..., Any]:
    import torch

    def collate_weighted(examples: list[dict[str, Any]]) -> dict[str, Any]:
        batch = collate([{k: v for k, v in e.items() if k != EXAMPLE_WEIGHT} for e in examples])
        if examples and EXAMPLE_WEIGHT in examples[0]:
            batch[EXAMPLE_WEIGHT] = torch.tensor([float(e[EXAMPLE_WEIGHT]) for e in examples])
        return batch

    return collate_weighted
