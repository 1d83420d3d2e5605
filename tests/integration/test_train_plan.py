"""`spanjudge train --plan --gpu NAME`: a memory budget and an epoch time from config.json alone.

The numbers of a small Llama config are worked out by hand here from the formulas in
training/plan.py's docstring; the thesis recipe is planned offline from the shipped config.
(With the tiny config at hand, also the training config's reading of YAML's bare `no`.)"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spanjudge.app.cli import main as cli_main
from spanjudge.core.configio import configs_dir
from spanjudge.training import plan
from spanjudge.training.config import PROJECTIONS, load_train_config

GIB = 1024**3
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, vocab_size=1000, tie_word_embeddings=False)  # fmt: skip


@pytest.fixture(scope="module")
def tiny_config(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A training YAML on a config.json-only Llama folder: per-device batch 2 × 128 tokens, LoRA r 8."""
    from transformers import LlamaConfig

    root = tmp_path_factory.mktemp("plan")
    LlamaConfig(**TINY).save_pretrained(root / "model")
    config = {
        "model": {"base": str(root / "model"), "dtype": "bfloat16"},
        "lora": {"r": 8},
        "data": {"train": str(root / "absent"), "max_length": 128},
        "training": {"output_dir": str(root / "run"), "per_device_batch_size": 2, "gradient_checkpointing": True},
        "logging": {"report_to": "none"},
    }
    path = root / "train.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_shape_and_budget_of_a_small_llama_match_the_hand_count(tiny_config: Path) -> None:
    config = load_train_config(tiny_config, data_needed=False)
    shape = plan.model_shape(plan.model_config(config.model.base), 8, PROJECTIONS)
    # per layer: q 64·64, k and v 64·32, o 64·64, gate/up/down 64·128 = 36,864 Linear weights + 2 norms of 64
    assert shape.layer_linear_params == 2 * 36_864
    assert shape.params == 64_000 + 2 * (36_864 + 128) + 64 + 64_000  # embeddings, layers, final norm, LM head
    assert shape.linear_params == 2 * 36_864 + 64_000
    # LoRA r 8: q 8·(64+64), k and v 8·(64+32), o 8·128, gate, up, down 8·192, per layer
    assert shape.lora_params == 2 * (1024 + 768 + 768 + 1024 + 3 * 1536)

    result = plan.plan(config, shape, plan.find_gpu("L4"), examples=1000, mean_tokens=100, mfu=0.5)
    parts = {line.label: line.bytes for line in result.memory}
    assert parts["base weights"] == 202_048 * 2
    assert parts["LoRA (weights, gradients, AdamW)"] == 16_384 * 16
    # 256 tokens × (2 layer inputs of 64 bf16 values + one layer of 22·64 + 8·128 bytes); the fused LM head:
    # one tile of 256 tokens × 1000 entries in bf16, and 256 tokens' hidden states (bf16) and gradient (fp32)
    assert parts["activations: decoder layers"] == 256 * (2 * 64 * 2 + 2432)
    assert parts["activations: LM head (loss)"] == 256 * 1000 * 2 + 256 * 64 * 6
    subtotal = 404_096 + 262_144 + 256 * (256 + 2432) + 610_304
    assert parts["overhead"] == pytest.approx(GIB + 0.1 * subtotal)
    assert result.total_bytes == pytest.approx(GIB + 1.1 * subtotal) and result.fits
    # 4·137,728 matmul weights + 6·16,384 LoRA + 6·100 tokens·64·2 layers of attention, per token
    assert result.model_flops_per_token == 4 * 137_728 + 6 * 16_384 + 6 * 100 * 64 * 2
    assert result.hours_per_epoch == pytest.approx(1000 * 100 * 726_016 / (0.5 * 121e12) / 3600)
    # what the device runs: with checkpointing the forward again (2·N + 2·N_LoRA + attention's 2·length·h·L)
    again = 2 * 137_728 + 2 * 16_384 + 2 * 100 * 64 * 2
    assert plan.hardware_flops_per_token(shape, 100, True) == result.model_flops_per_token + again
    assert plan.hardware_flops_per_token(shape, 100, False) == result.model_flops_per_token

    no_checkpointing = config.model_copy(
        update={"training": config.training.model_copy(update={"gradient_checkpointing": False})}
    )
    parts = {
        line.label: line.bytes
        for line in plan.plan(no_checkpointing, shape, result.gpu, examples=1, mean_tokens=1).memory
    }
    assert parts["activations: decoder layers"] == 256 * 2 * 2432
    assert result.other_checkpointing_bytes == 256 * 2 * 2432  # the first plan shows the other setting too
    liger = no_checkpointing.model_copy(
        update={"training": no_checkpointing.training.model_copy(update={"liger_kernel": True})}
    )
    parts = {line.label: line.bytes for line in plan.plan(liger, shape, result.gpu, examples=1, mean_tokens=1).memory}
    assert parts["activations: decoder layers"] == 256 * 2 * (14 * 64 + 4 * 128)  # Liger's RMSNorm and SwiGLU
    qlora = config.model_copy(update={"model": config.model.model_copy(update={"quantization": "4bit"})})
    weights, _ = plan.weight_bytes(shape, qlora.model.dtype, "4bit")
    assert weights == pytest.approx(73_728 * (0.5 + 0.127 / 8) + (202_048 - 73_728) * 2)


def test_full_fine_tuning_plans_every_weight_with_its_gradient_and_moments(tiny_config: Path) -> None:
    overrides = [("model.dtype", "auto"), ("training.finetuning", "full")]
    config = load_train_config(tiny_config, overrides, data_needed=False)
    precision = plan.gpu_precision(config)  # the optimizer updates the weights themselves: float32 ones
    assert (precision.dtype, precision.mixed_precision) == ("float32", "bf16")
    assert "full fine-tuning keeps float32 weights" in precision.line
    shape = plan.model_shape(plan.model_config(config.model.base), 8, PROJECTIONS)
    result = plan.plan(config, shape, plan.find_gpu("L4"), examples=1000, mean_tokens=100, mfu=0.5)
    parts = {line.label: line.bytes for line in result.memory}
    assert parts["weights, gradients, AdamW (full)"] == 202_048 * 16  # 4 float32 values a parameter
    assert not {"base weights", "LoRA (weights, gradients, AdamW)"} & parts.keys()
    # every weight's gradient too: 6·N, no LoRA term; checkpointing runs the forward again (2·N + attention's)
    assert result.model_flops_per_token == 6 * 137_728 + 6 * 100 * 64 * 2
    again = 2 * 137_728 + 2 * 100 * 64 * 2
    assert plan.hardware_flops_per_token(shape, 100, True, full=True) == result.model_flops_per_token + again


def test_the_thesis_base_trained_whole_is_told_to_train_an_adapter(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = configs_dir() / "train" / "llama31_8b_lora.yaml"
    args = ["train", "--config", str(recipe), "--set", "training.finetuning=full", "--plan", "--gpu", "A40"]
    assert cli_main(args) == 2
    captured = capsys.readouterr()
    # the recipe's bfloat16 weights: weight, gradient and moments in bfloat16, 8 bytes a parameter
    assert "full fine-tuning" in captured.out and "8,030,261,248 parameters × 8 bytes (4 × bfloat16)" in captured.out
    [line] = captured.err.strip().splitlines()
    assert line.startswith("error: does not fit one A40: needs 75.3 GiB of 48; "), line
    assert line.endswith("training.finetuning: lora would need 20.5 GiB"), line


def test_the_thesis_recipe_is_planned_offline_on_an_a40(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = configs_dir() / "train" / "llama31_8b_lora.yaml"
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "A40", "--mean-tokens", "1000"]) == 0
    out = capsys.readouterr().out
    assert "8,030,261,248 parameters × 2 bytes" in out and "41,943,040 × 16 bytes" in out
    assert "fits in 48 GiB" in out and "37,000 examples" in out
    assert "(with gradient checkpointing off, the decoder layers' activations: 100.00)" in out
    assert "the thesis's 6 h per epoch on this GPU would mean" in out


def test_a_plan_that_cannot_fit_says_in_one_line_what_to_change(capsys: pytest.CaptureFixture[str]) -> None:
    recipe = configs_dir() / "train" / "llama31_8b_lora.yaml"
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "l4"]) == 2
    captured = capsys.readouterr()
    assert "does NOT fit in 24 GiB" in captured.out
    [line] = captured.err.strip().splitlines()
    # the logits are never built (TRL's fused head): the batch halved is enough
    assert line.startswith("error: does not fit one L4: needs 26.7 GiB of 24; ")
    assert line.endswith("training.per_device_batch_size: 2 would need 22.5 GiB")
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "V100"]) == 2
    assert "unknown GPU 'V100' for --gpu (known: A40," in capsys.readouterr().err
    assert cli_main(["train", "--config", str(recipe), "--plan"]) == 2
    assert "--plan and --gpu go together" in capsys.readouterr().err


def test_an_unquoted_no_is_the_mixed_precision_no(tiny_config: Path) -> None:
    """YAML reads `no` as false; `--set training.mixed_precision=no` (or `mixed_precision: no`) means 'no'."""
    from spanjudge.training.config import parse_override

    config = load_train_config(tiny_config, [parse_override("training.mixed_precision=no")], data_needed=False)
    assert config.training.mixed_precision == "no"
    config = load_train_config(tiny_config, [parse_override("training.mixed_precision=fp16")], data_needed=False)
    assert config.training.mixed_precision == "fp16"


def test_the_plan_cites_a_measured_gpu_row_and_says_when_checkpointing_can_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    recipe = configs_dir() / "train" / "llama31_8b_lora.yaml"
    results = tmp_path / "gpu.json"
    rows = [
        {"variant": "lora", "mfu": 0.105, "timed_steps": 0},  # the warm-up inside: a lower bound
        {"variant": "lora", "mfu": 0.31, "timed_steps": 9},
        {"variant": "lora-liger-no-checkpointing", "mfu": 0.44, "timed_steps": 9},
        {"variant": "qlora-nf4", "mfu": 0.2, "timed_steps": 9},
    ]
    runs = [
        {"shape": "8b", "device": "NVIDIA H100", "date": "2026-12-01", "training": rows},
        {"shape": "tiny", "device": "cpu", "date": "2026-12-02", "training": [{"variant": "lora", "mfu": 0.9}]},
    ]
    results.write_text(json.dumps({"runs": runs}))
    monkeypatch.setattr(plan, "MEASURED", results)
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "H100", "--mean-tokens", "2000"]) == 0
    out = capsys.readouterr().out
    assert "Time per epoch at 31% MFU" in out  # the row timed after the warm-up, not the lower bound or CPU's
    assert "31.0% MFU as measured for this setup (lora) on NVIDIA H100, 2026-12-01, timed after the warm-up" in out
    sets = ["--set", "training.liger_kernel=true", "--set", "training.gradient_checkpointing=false",
            "--set", "training.per_device_batch_size=2"]  # fmt: skip
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "H100", "--mean-tokens", "2000", *sets]) == 0
    assert "Time per epoch at 44% MFU" in capsys.readouterr().out
    # no row of the setup: the goal, said to be one
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "H100", "--set", "lora.r=8"]) == 0
    out = capsys.readouterr().out
    assert "31.0% MFU as measured" in out  # LoRA's rank is not part of the setup a row is matched on
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "H100",
                     "--set", "training.padding_free=true"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "40% MFU: the goal, not a measurement" in out
    # checkpointing on, and the run would fit without it: said, with what it would need
    assert cli_main(["train", "--config", str(recipe), "--plan", "--gpu", "H200", "--set",
                     "training.per_device_batch_size=1"]) == 0  # fmt: skip
    assert "faster: with training.gradient_checkpointing: false this run needs" in capsys.readouterr().out
