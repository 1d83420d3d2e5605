"""`training.padding_free`: a flattened batch gives each example the loss it has alone; and the validation
loss counts every completion token once, whatever the batch (`training/eval_loss.py`).

TRL's padding-free collator (the one SFTTrainer uses) concatenates a batch into one row with
position ids restarting at 0 per example; transformers turns those position ids into a
block-diagonal causal mask on SDPA and eager attention, so no flash-attn wheel is needed. If any
token attended across an example boundary, that example's loss would move.
"""

from __future__ import annotations

import itertools

import pytest

torch = pytest.importorskip("torch")

VOCABULARY = 300
LENGTHS = (37, 64, 23)  # unequal: the padded batch pads two of them


def tiny_model(attention: str) -> object:
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=VOCABULARY,
        attn_implementation=attention,
        initializer_range=0.3,
    )  # fmt: skip  (large weights: a token's context moves its loss well beyond the tolerance)
    model = LlamaForCausalLM(config).eval()
    add_fused_lm_head(model)
    return model


def examples() -> list[dict]:
    generator = torch.Generator().manual_seed(3)
    rows = []
    for length in LENGTHS:
        ids = torch.randint(1, VOCABULARY, (length,), generator=generator).tolist()
        prompt = length // 2
        rows.append({"input_ids": ids, "labels": [-100] * prompt + ids[prompt:]})  # completion-only, as ours
    return rows


def per_example_losses(model: object, batch: dict, flattened: bool = False) -> list[float]:
    """Σ −log p over each example's completion tokens, from the fused LM head TRL trains with (`flattened`:
    the batch is one row of the examples one after another)."""
    with torch.no_grad():
        out = model(**batch, fused_lm_head=True, use_cache=False)
    log_probs = out.log_probs  # aligned with labels[:, 1:]
    if flattened:  # split the row where the examples end
        bounds = torch.tensor((0, *LENGTHS)).cumsum(0)
        return [float(-log_probs[0, a : b - 1].sum()) for a, b in itertools.pairwise(bounds.tolist())]
    return [float(-row.sum()) for row in log_probs]


@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_padding_free_batches_give_each_example_its_own_loss(attention: str) -> None:
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    model = tiny_model(attention)
    rows = examples()
    alone = [per_example_losses(model, DataCollatorForLanguageModeling(pad_token_id=0)([row]))[0] for row in rows]
    padded_batch = DataCollatorForLanguageModeling(pad_token_id=0)(rows)
    flat_batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    assert flat_batch["input_ids"].shape == (1, sum(LENGTHS)) and "attention_mask" not in flat_batch

    padded = per_example_losses(model, padded_batch)
    flat = per_example_losses(model, flat_batch, flattened=True)

    assert flat == pytest.approx(alone, rel=1e-5)
    assert padded == pytest.approx(alone, rel=1e-5)


def test_without_restarting_positions_the_examples_would_see_each_other() -> None:
    """The check above can fail: one row of the same tokens, positions running on, moves the later losses."""
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    model = tiny_model("sdpa")
    rows = examples()
    alone = [per_example_losses(model, DataCollatorForLanguageModeling(pad_token_id=0)([row]))[0] for row in rows]
    flat_batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    leaking = {"input_ids": flat_batch["input_ids"], "labels": flat_batch["labels"]}  # one causal sequence
    leaked = per_example_losses(model, leaking, flattened=True)
    assert leaked[0] == pytest.approx(alone[0], rel=1e-5)  # the first example sees nothing before it
    assert all(abs(a - b) > 1e-3 * b for a, b in zip(leaked[1:], alone[1:], strict=True))


def test_the_validation_loss_is_weighted_by_tokens_whatever_the_batch_size(tmp_path) -> None:
    """The trainer's eval loss is Σ cross-entropy over every completion token of the validation set / their
    count (training/eval_loss.py), the same at eval batch 1 and 3; transformers' own loop (a mean of
    per-batch means) moves with the batch (#49: 0.5594 at batch 4, 0.6163 at batch 2)."""
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    from spanjudge.inference.hf_models import convert_gguf
    from spanjudge.inference.shipped_models import smollm2_gguf
    from spanjudge.training.eval_loss import token_weighted_eval

    rows = examples()
    completion = [sum(label != -100 for label in row["labels"][1:]) for row in rows]
    model = tiny_model("sdpa")
    collate = DataCollatorForLanguageModeling(pad_token_id=0)
    alone = [per_example_losses(model, collate([row]))[0] for row in rows]
    expected = sum(alone) / sum(completion)  # every completion token counted once

    def evaluated(trainer_class: type, batch: int) -> float:
        args = SFTConfig(
            output_dir=str(tmp_path / f"{trainer_class.__name__}-{batch}"), per_device_eval_batch_size=batch,
            report_to=[], use_cpu=True, bf16=False, pad_token="<|endoftext|>",
            dataset_kwargs={"skip_prepare_dataset": True},
        )  # fmt: skip
        trainer = trainer_class(
            model=model, args=args, train_dataset=Dataset.from_list(rows), eval_dataset=Dataset.from_list(rows),
            processing_class=AutoTokenizer.from_pretrained(str(convert_gguf(smollm2_gguf()))),
        )  # fmt: skip
        return trainer.evaluate()["eval_loss"]

    weighted = token_weighted_eval(SFTTrainer)
    assert evaluated(weighted, 1) == pytest.approx(expected, rel=1e-5)
    assert evaluated(weighted, 3) == pytest.approx(expected, rel=1e-5)
    assert evaluated(SFTTrainer, 3) != pytest.approx(evaluated(SFTTrainer, 1), rel=1e-3)  # what it replaces
