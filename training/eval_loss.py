"""The evaluation loss weighted by tokens: the mean cross-entropy over every completion token of the
validation set, whatever the batch size.

transformers' evaluation loop averages the loss of each batch (a mean over that batch's tokens), weighted
by the batch's examples: a batch of short completions counts as much as one of long ones, so the
validation loss moved with `per_device_batch_size` (0.5594 at batch 4 against 0.6163 at batch 2 for one
model, #49). Here each batch's loss is turned back into its sum (TRL's loss is the sum over the batch's
completion tokens divided by their count), and the split's loss is the sum of the sums over the count of
the tokens, both added up over processes. The training loss is TRL's own (already token-weighted across
accumulation steps and processes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.utils.data import DataLoader
    from transformers import Trainer
    from transformers.trainer_utils import EvalLoopOutput

IGNORE_INDEX = -100


def completion_tokens(labels: torch.Tensor) -> int:
    """The tokens a batch's loss averages over: labels after the first position that are not ignored."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


def token_weighted_eval(trainer_class: type[Trainer]) -> type[Trainer]:
    """`trainer_class` whose evaluation loss is weighted by tokens (see the module)."""

    class TokenWeightedEval(trainer_class):
        _eval_sums: list[float]

        def evaluation_loop(
            self,
            dataloader: DataLoader[Any],
            description: str,
            prediction_loss_only: bool | None = None,
            ignore_keys: list[str] | None = None,
            metric_key_prefix: str = "eval",
        ) -> EvalLoopOutput:
            import torch

            self._eval_sums = [0.0, 0.0]  # Σ loss × tokens, Σ tokens, on this process
            output = super().evaluation_loop(
                dataloader, description, prediction_loss_only, ignore_keys, metric_key_prefix
            )
            sums = torch.tensor(self._eval_sums, dtype=torch.float64, device=self.accelerator.device)
            loss_sum, tokens = self.accelerator.reduce(sums, reduction="sum").tolist()
            if tokens > 0 and f"{metric_key_prefix}_loss" in output.metrics:
                output.metrics[f"{metric_key_prefix}_loss"] = loss_sum / tokens
            return output

        def prediction_step(
            self,
            model: torch.nn.Module,
            inputs: dict[str, Any],
            prediction_loss_only: bool,
            ignore_keys: list[str] | None = None,
        ) -> tuple[torch.Tensor | None, torch.Tensor | None, torch.Tensor | None]:
            loss, logits, labels = super().prediction_step(model, inputs, prediction_loss_only, ignore_keys)
            if loss is not None and inputs.get("labels") is not None:
                tokens = completion_tokens(inputs["labels"])
                self._eval_sums[0] += float(loss) * tokens
                self._eval_sums[1] += tokens
            return loss, logits, labels

    TokenWeightedEval.__name__ = f"TokenWeighted{trainer_class.__name__}"
    return TokenWeightedEval
