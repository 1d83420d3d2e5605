"""The judge's decision, weighted in the loss (`training.decision_weight`).

The first token of every completion decides between `No Error` and `Error 1:`; everything
after it follows from that choice. In the plain completion loss that token is one of the
~130 tokens of an average evaluation, so a small student learns the spans long before it
learns *whether* an output has any, and greedy decoding then takes the likelier answer for
every output alike (bench/results/distill_quintd.md: 0 of 80 held-out outputs "No Error").
With a weight w, the first completion token of each example counts w times:

    loss = (Σ_completion tokens CE + (w − 1) · Σ_examples CE(first completion token)) / N

N is the trainer's own token count (across accumulation steps and processes), so w = 1 is
exactly TRL's loss and the evaluation loss stays unweighted (comparable between runs).

The extra term reuses TRL's fused loss forward: a forward hook takes the per-token
log-probabilities it already computed, so no logits are built and no second forward runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


def first_completion_tokens(label_mask: torch.Tensor) -> torch.Tensor:
    """Of each row's completion positions (True in `label_mask`, shape batch × positions), the first one."""
    return label_mask & (label_mask.long().cumsum(dim=1) == 1)


def decision_term(log_probs: torch.Tensor, label_mask: torch.Tensor, num_tokens: torch.Tensor | int) -> torch.Tensor:
    """Σ over rows of the first completion token's cross-entropy, divided by `num_tokens`."""
    first = first_completion_tokens(label_mask)
    return -(log_probs * first).sum() / num_tokens


def decision_weighted_trainer(weight: float) -> type:
    """TRL's SFTTrainer with each example's first completion token counted `weight` times in training."""
    from trl import SFTTrainer

    class DecisionWeightedSFTTrainer(SFTTrainer):
        decision_weight = weight

        def compute_loss(
            self,
            model: torch.nn.Module,
            inputs: dict[str, Any],
            return_outputs: bool = False,
            num_items_in_batch: torch.Tensor | int | None = None,
        ) -> torch.Tensor | tuple[torch.Tensor, Any]:
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
                    "training.decision_weight needs TRL's fused completion loss; leave label_smoothing_factor and "
                    "loss_type at their defaults in training.trainer_args"
                )
            count = fused.label_mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
            extra = (self.decision_weight - 1.0) * decision_term(fused.log_probs, fused.label_mask, count)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                extra = extra * (self.accelerator.num_processes // self.get_tp_size())  # as TRL scales its own loss
            if return_outputs:
                loss, outputs = result
                return loss + extra, outputs
            return result + extra

    return DecisionWeightedSFTTrainer
