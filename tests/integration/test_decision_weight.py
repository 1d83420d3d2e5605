"""training.decision_weight: each example's first completion token ('No Error' / 'Error 1:')
counted w times in the training loss; data.example_weights: each example counted as its record's
annotator agreement says. Both checked against the loss computed independently from a real
Llama-architecture model's logits inside TRL's real trainer (a tiny randomly initialised
LlamaForCausalLM, SmolLM2's real tokenizer, real SFRES records)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.judge_records import write_records
from support.training_cli import run_cli, write_config

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.inference.hf_models import convert_gguf, load_tokenizer
from spanjudge.inference.shipped_models import smollm2_gguf
from spanjudge.training.data import IGNORE_INDEX, describe, tokenize_split
from spanjudge.training.decision import first_completion_tokens, weighted_trainer


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(convert_gguf(smollm2_gguf())))


AGREEMENT = [1.0, 0.5, 0.0, 1.0]  # each record's annotator agreement (a vote merge's provenance)


def _records(tmp_path: Path, shared_data: Path) -> Path:
    """Four real SFRES records: two 'No Error', two with an error span; each with its annotators' agreement."""
    folder = write_records(tmp_path / "records", shared_data, train=4, validation=1)
    rows = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    for row, agreement in zip(rows, AGREEMENT, strict=True):
        row["provenance"]["merge"] = {"rule": "vote", "errors": [], "agreement": agreement}
    for row in rows[:2]:
        word = next(iter(row["outputs"].values())).split()[0]
        row["evaluation"] = {"errors": [{"location": word, "explanation": "Wrong.", "severity": 3}], "score": 70}
    (folder / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder / "train.jsonl"


def test_first_completion_tokens_marks_one_position_per_row() -> None:
    mask = torch.tensor([[False, True, True, False], [False, False, False, True], [False, False, False, False]])
    expected = torch.tensor([[False, True, False, False], [False, False, False, True], [False, False, False, False]])
    assert torch.equal(first_completion_tokens(mask), expected)


def test_the_first_completion_token_is_the_decision(tmp_path: Path, shared_data: Path, tokenizer) -> None:
    """The premise of the weight: the first learned token already tells 'No Error' from an error list."""
    split = tokenize_split(_records(tmp_path, shared_data), tokenizer, load_catalog(), max_length=1536)
    first = [next(t for t in labels if t != IGNORE_INDEX) for labels in split.labels]
    assert first[0] == first[1] != first[2] == first[3]
    assert tokenizer.decode([first[0]]).strip() == "Error" and tokenizer.decode([first[2]]).strip() == "No"


def _trainer(tmp_path: Path, shared_data: Path, tokenizer, weight: float, example_weights: str = "none"):
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id,
        )
    )  # fmt: skip
    records = _records(tmp_path, shared_data)
    split = tokenize_split(records, tokenizer, load_catalog(), max_length=1536, example_weights=example_weights)
    args = SFTConfig(
        output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, use_cpu=True, report_to=[], bf16=False
    )
    weighted = example_weights != "none"
    trainer_class = SFTTrainer if weight == 1.0 and not weighted else weighted_trainer(weight, weighted)
    trainer = trainer_class(model=model, args=args, train_dataset=split.to_dataset(), processing_class=tokenizer)
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer, {k: v.to(trainer.model.device) for k, v in batch.items()}


def _expected_loss(model, batch: dict, weight: float, rows: torch.Tensor | None = None) -> float:
    """The weighted loss from the model's plain logits: Σ_r w_r (Σ CE + (d − 1) first-token CE) / completion
    tokens, with each row's weight w_r (`rows`, default 1) and the decision weight d (`weight`)."""
    with torch.no_grad():
        logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits[:, :-1].float()
    labels = batch["labels"][:, 1:]
    mask = labels != IGNORE_INDEX
    ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), labels.clamp(min=0), reduction="none") * mask
    first = first_completion_tokens(mask)
    per_row = ce.sum(dim=1) + (weight - 1) * (ce * first).sum(dim=1)
    rows = torch.ones(len(per_row)) if rows is None else rows
    return float((rows * per_row).sum() / mask.sum())


@pytest.mark.parametrize("weight", [1.0, 8.0])
def test_training_loss_counts_the_decision_token_weight_times(
    tmp_path: Path, shared_data: Path, tokenizer, weight: float
) -> None:
    trainer, batch = _trainer(tmp_path, shared_data, tokenizer, weight)
    trainer.model.train()
    with torch.no_grad():
        loss = float(trainer.compute_loss(trainer.model, dict(batch)))
    assert loss == pytest.approx(_expected_loss(trainer.model, batch, weight), rel=1e-4)
    if weight != 1.0:  # and the weight really moved it
        assert abs(loss - _expected_loss(trainer.model, batch, 1.0)) > 1e-3
    trainer.model.eval()  # evaluation stays the plain loss, comparable across runs
    with torch.no_grad():
        assert float(trainer.compute_loss(trainer.model, dict(batch))) == pytest.approx(
            _expected_loss(trainer.model, batch, 1.0), rel=1e-4
        )


@pytest.mark.parametrize("weight", [1.0, 8.0])
def test_each_example_counts_as_its_annotators_agreement(
    tmp_path: Path, shared_data: Path, tokenizer, weight: float
) -> None:
    """data.example_weights agreement: the records' agreement scaled to a mean of 1, in the loss beside the
    decision weight; the evaluation loss stays plain."""
    trainer, batch = _trainer(tmp_path, shared_data, tokenizer, weight, "agreement")
    mean = sum(AGREEMENT) / len(AGREEMENT)
    rows = batch.pop("example_weight")  # the batch's own order (the sampler shuffles)
    assert sorted(rows.tolist()) == pytest.approx(sorted(a / mean for a in AGREEMENT))
    trainer.model.train()
    with torch.no_grad():
        loss = float(trainer.compute_loss(trainer.model, {**batch, "example_weight": rows}))
    assert loss == pytest.approx(_expected_loss(trainer.model, batch, weight, rows), rel=1e-4)
    assert abs(loss - _expected_loss(trainer.model, batch, weight)) > 1e-3  # the weights really moved it
    trainer.model.eval()
    with torch.no_grad():
        plain = float(trainer.compute_loss(trainer.model, {**batch, "example_weight": rows}))
    assert plain == pytest.approx(_expected_loss(trainer.model, batch, 1.0), rel=1e-4)


def test_agreement_weights_need_a_vote_merges_records(tmp_path: Path, shared_data: Path, tokenizer) -> None:
    records = _records(tmp_path, shared_data)
    split = tokenize_split(records, tokenizer, load_catalog(), max_length=1536, example_weights="agreement")
    assert "weighted by annotator agreement (1 at weight 0)" in describe([split])[0]
    rows = [json.loads(line) for line in records.read_text().splitlines()]
    del rows[1]["provenance"]["merge"]
    records.write_text("".join(json.dumps(row) + "\n" for row in rows))
    with pytest.raises(InputError, match=r"train.jsonl:2: data.example_weights agreement needs records merged by vote"):
        tokenize_split(records, tokenizer, load_catalog(), max_length=1536, example_weights="agreement")


def test_decision_weight_with_packing_is_one_clear_line(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    records = write_records(tmp_path / "records", shared_data)
    config = write_config(
        tmp_path / "c.yaml",
        data={"train": str(records)},
        training={"output_dir": str(tmp_path / "run"), "decision_weight": 4, "packing": True},
    )
    code, err = run_cli(["train", "--config", str(config)], capsys)
    assert code == 2 and "training.decision_weight weighs the first completion token" in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "run").exists()
