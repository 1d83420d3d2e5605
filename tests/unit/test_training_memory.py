"""training/cpu_memory.py: the CPU's memory fixes leave the loss and its gradients as they were."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")

from spanjudge.training.cpu_memory import (  # noqa: E402
    CPU_TILE_TOKENS,
    CPU_TILE_VOCABULARY,
    decoder_layers,
    project_labelled_positions_only,
    release_freed_memory_per_layer,
    restore_projected_positions,
    set_loss_tiles,
)

# a vocabulary over two CPU tiles and more tokens than one: every tile boundary is crossed
VOCABULARY = 2 * CPU_TILE_VOCABULARY + 123
LENGTH = CPU_TILE_TOKENS + 77


def tiny_lora_model() -> object:
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        vocab_size=VOCABULARY, attn_implementation="sdpa",
    )  # fmt: skip
    model = LlamaForCausalLM(config)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))  # as TRL's SFTTrainer does
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "down_proj"]))
    for name, parameter in model.named_parameters():
        if "lora_B" in name:  # non-zero, so the LoRA's gradients depend on every part of the loss
            torch.nn.init.normal_(parameter, std=0.02)
    return model


def loss_and_gradients(model: object, batch: dict, autocast: bool) -> tuple[float, float, list]:
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        out = model(**batch, fused_lm_head=True, use_cache=False)
    loss = -out.log_probs.sum() / out.label_mask.sum()
    loss.backward()
    entropy = float((out.entropy.sum() / out.label_mask.sum()).detach())
    grads = [p.grad.detach().clone() for p in model.parameters() if p.requires_grad]
    return float(loss.detach()), entropy, grads


@pytest.fixture
def trl_tiles():
    """TRL's own tile sizes and choice of projected positions, restored after the test (they are module
    settings of TRL)."""
    previous = set_loss_tiles(CPU_TILE_TOKENS, CPU_TILE_VOCABULARY)
    assert previous is not None, "this TRL has no tile settings: training/cpu_memory.py needs a new look"
    set_loss_tiles(*previous)
    choice = project_labelled_positions_only()
    assert choice is not None, "this TRL chooses its projected positions elsewhere: training/cpu_memory.py"
    restore_projected_positions(choice)
    yield previous
    set_loss_tiles(*previous)
    restore_projected_positions(choice)


# float32: the same arithmetic to rounding; bf16 autocast (the CPU recipes'): each tile's product rounded to
# bf16 before it is summed in fp32, so gradients agree to bf16's precision relative to their size
TOLERANCES = {"float32": (1e-5, 1e-5), "bf16 autocast": (1e-3, 1e-2)}


@pytest.mark.parametrize("precision", list(TOLERANCES))
def test_cpu_tiles_labelled_positions_and_released_memory_change_neither_loss_nor_gradients(
    trl_tiles, precision: str
) -> None:
    loss_tolerance, gradient_tolerance = TOLERANCES[precision]
    autocast = precision != "float32"
    model = tiny_lora_model()
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCABULARY, (2, LENGTH), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, -40:] = 0  # a padded row, as a batch of unequal examples has
    labels = ids.masked_fill(mask == 0, -100)
    labels[:, : LENGTH // 3] = -100  # the prompt
    batch = {"input_ids": ids, "attention_mask": mask, "labels": labels}

    assert trl_tiles[0] >= LENGTH * 2 and trl_tiles[1] >= VOCABULARY  # TRL's tiles: the whole batch in one
    loss, entropy, grads = loss_and_gradients(model, batch, autocast)
    set_loss_tiles(CPU_TILE_TOKENS, CPU_TILE_VOCABULARY)
    projected = project_labelled_positions_only()
    with counted_trims() as trims:
        hooked = release_freed_memory_per_layer(model, above=0)  # every layer: any free byte is above 0
        with counted_projections() as rows, warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            tiled_loss, tiled_entropy, tiled_grads = loss_and_gradients(model, batch, autocast)

    assert trims == [0] * 4  # each of the 2 layers after its forward and before its backward
    assert not [w for w in warned if "hook" in str(w.message)], [str(w.message) for w in warned]
    assert projected is not None
    labelled = int((labels[:, 1:] != -100).sum())  # each position's label is the next token
    assert rows == [labelled, labelled]  # the head's forward and backward: the labelled positions, not all 2 × LENGTH

    assert hooked == 2
    # the same exact log-sum-exp over the whole vocabulary, summed in another order
    assert tiled_loss == pytest.approx(loss, rel=loss_tolerance)
    assert tiled_entropy == pytest.approx(entropy, rel=loss_tolerance)
    for before, after in zip(grads, tiled_grads, strict=True):
        assert float(before.norm()) > 0
        assert float((after - before).norm() / before.norm()) <= gradient_tolerance


@contextlib.contextmanager
def counted_projections() -> Iterator[list[int]]:
    """The number of hidden states TRL's fused LM head is given, per forward and per backward."""
    import trl.kernels.chunked_logprob as kernel

    rows: list[int] = []
    forward, backward = kernel.ChunkedLogProbFunction.forward, kernel.ChunkedLogProbFunction.backward

    def counted_forward(ctx, hidden, *args):  # type: ignore[no-untyped-def]
        rows.append(hidden.shape[0])
        return forward(ctx, hidden, *args)

    def counted_backward(ctx, *grads):  # type: ignore[no-untyped-def]
        rows.append(ctx.saved_tensors[0].shape[0])
        return backward(ctx, *grads)

    kernel.ChunkedLogProbFunction.forward = staticmethod(counted_forward)
    kernel.ChunkedLogProbFunction.backward = staticmethod(counted_backward)
    try:
        yield rows
    finally:
        kernel.ChunkedLogProbFunction.forward = staticmethod(forward)
        kernel.ChunkedLogProbFunction.backward = staticmethod(backward)


@contextlib.contextmanager
def counted_trims() -> Iterator[list[int]]:
    """Every malloc_trim call's argument, still made (the glibc in the test's process trims as before)."""
    from spanjudge.training import cpu_memory

    trim = cpu_memory._malloc_trim()
    assert trim is not None, "no glibc malloc_trim here"
    calls: list[int] = []

    def counted(pad: int) -> int:
        calls.append(pad)
        return trim(pad)

    original = cpu_memory._malloc_trim
    cpu_memory._malloc_trim = lambda: counted  # type: ignore[assignment]
    try:
        yield calls
    finally:
        cpu_memory._malloc_trim = original


def test_a_heap_holding_less_free_than_the_bar_is_not_trimmed() -> None:
    """What a step frees the next one allocates again: below the bar the pages stay, not faulted in anew."""
    from spanjudge.training import cpu_memory

    free = cpu_memory._heap_free_bytes()
    assert free is not None and free() >= 0  # glibc's mallinfo2 read, as training reads it
    model = tiny_lora_model()
    ids = torch.randint(0, VOCABULARY, (1, 32))
    with counted_trims() as trims:
        release_freed_memory_per_layer(model, above=1 << 50)
        model(input_ids=ids, labels=ids).loss.backward()
    assert trims == []
    with counted_trims() as trims:
        release_freed_memory_per_layer(model, above=-1)  # a second set of hooks: these trim at every layer
        model(input_ids=ids, labels=ids).loss.backward()
    assert trims == [0] * 4


def test_decoder_layers_are_the_models_unsplittable_blocks() -> None:
    model = tiny_lora_model()
    layers = decoder_layers(model)
    assert [type(layer).__name__ for layer in layers] == ["LlamaDecoderLayer", "LlamaDecoderLayer"]
