"""Training memory and time on CPU, where no Triton kernel and no caching allocator help: fixed at the causes.

Measured on the 2-core development machine (SmolLM2-135M + LoRA r 16, fp32 weights under bf16
autocast, 2 sequences of 2,048 tokens, no checkpointing; bench/results/train_cpu.md):

1. **The loss's tiles.** TRL's fused LM head never builds the whole `(tokens, vocabulary)` logits: it
   projects the hidden states tile by tile and folds each tile into running log-sum-exp statistics
   (log-probabilities, entropy and top-1 for the logged metrics in the same pass). Its tiles are sized
   for a GPU — 4,096 tokens × 32,768 vocabulary entries — and on CPU the torch fallback turns one tile
   into several float32 temporaries of that size (0.5 GiB each): 4 GiB of a 10.5 GiB peak. Tiles of
   256 × 4,096 keep the same arithmetic (exact log-sum-exp over the whole vocabulary, fp32) in 4 MiB
   temporaries: peak 6.5 GiB, and the step is faster (they stay in cache).
2. **The allocator.** glibc serves tensors below its dynamic mmap threshold (which climbs to 32 MiB
   once such blocks are freed) from its heap, and a forward pass frees and allocates activations in an
   order that leaves the freed space in holes it keeps: 1.5–2 GiB of the peak held and unused.
   `malloc_trim(0)` after each decoder layer's forward and before its backward hands those pages back
   (peak 4.7 GiB in the same measurement, a step about as fast; forcing every large block through mmap
   instead doubled the step time). Only when the heap holds more than `RELEASE_ABOVE` free, though: what
   a step frees the next step allocates again, and pages handed back are faulted in anew. The smoke
   judge's training (SmolLM2, ~1k-token examples, two DDP processes) never holds 1 GiB free between two
   layers (at most 0.96 GiB), and trimming at every layer there made 20 million page faults and cost 23 %
   of its CPU time, most of it in the kernel (246 against 189 CPU-s; peak 2.4 against 2.9 GB).

3. **The positions the loss projects.** On CUDA, TRL's fused LM head projects only the positions that have
   a label; everywhere else it projects every position (so that a compiler such as Neuron's sees one tile
   shape) and zeroes the unlabelled ones afterwards. A judge's training record is mostly prompt, which has
   no label: for the distillation protocol's records, nine tokens in ten (Gemma's tokens of tables 0-49:
   65,663 of 576,975 in completions). On CPU nothing is compiled, so the labelled positions alone are
   projected, as on CUDA, forward and backward. For Gemma 3 270M, whose 262,144-word head costs more than
   its decoder, that is most of a step (bench/results/train_cpu.md).

None changes a number the model computes: the loss is the same to float32 rounding
(tests/unit/test_training_memory.py). On CUDA all are left alone: TRL's Triton kernel and PyTorch's
caching allocator are built for it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# TRL's tiles for its torch fallback (trl/kernels/chunked_logprob.py: TOKEN_CHUNK_SIZE; trl/trainer/utils.py:
# _CHUNKED_LOGPROB_CHUNK_SIZE), read by TRL at every call
CPU_TILE_TOKENS = 256
CPU_TILE_VOCABULARY = 4096


def set_loss_tiles(tokens: int, vocabulary: int) -> tuple[int, int] | None:
    """Set TRL's fused-loss tiles; the previous (tokens, vocabulary), or None when this TRL has no such
    settings (then its own apply)."""
    import trl.kernels.chunked_logprob as kernel
    import trl.trainer.utils as trainer_utils

    if not hasattr(kernel, "TOKEN_CHUNK_SIZE") or not hasattr(trainer_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE"):
        return None
    previous = kernel.TOKEN_CHUNK_SIZE, trainer_utils._CHUNKED_LOGPROB_CHUNK_SIZE
    kernel.TOKEN_CHUNK_SIZE = tokens
    trainer_utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocabulary
    return previous


def project_labelled_positions_only() -> Callable[[torch.device], bool] | None:
    """Have TRL's fused LM head project only the labelled positions on CPU as it does on CUDA; TRL's own
    choice (to restore), or None when this TRL decides it elsewhere (then it projects as it always did).

    TRL takes its choice from `_use_triton(device)` in trl/trainer/utils.py at every call; the kernels read
    their own module's `_use_triton`, so they keep running the torch fallback on CPU."""
    import trl.trainer.utils as trainer_utils

    found = getattr(trainer_utils, "_use_triton", None)
    if not callable(found):
        return None
    choice: Callable[[torch.device], bool] = found

    def labelled_only(device: torch.device) -> bool:
        return device.type == "cpu" or choice(device)

    trainer_utils._use_triton = labelled_only
    return choice


def restore_projected_positions(choice: Callable[[torch.device], bool]) -> None:
    """Give TRL back the choice `project_labelled_positions_only` returned."""
    import trl.trainer.utils as trainer_utils

    trainer_utils._use_triton = choice


RELEASE_ABOVE = 2 << 30  # bytes free in the heap before a layer hands them back


class _MallocInfo(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc 2.33 on): the heap's totals in bytes, over every arena."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                     "keepcost")
    ]  # fmt: skip


def _glibc_function(name: str) -> Any:
    """The C library's function `name`, or None where it has none (musl, macOS; mallinfo2 before glibc 2.33)."""
    library = ctypes.util.find_library("c")
    try:
        return getattr(ctypes.CDLL(library), name) if library else None
    except (OSError, AttributeError):
        return None


@functools.cache
def _heap_free_bytes() -> Callable[[], int] | None:
    """The bytes glibc's heap holds free (`mallinfo2().fordblks`), or None where there is no mallinfo2 (then
    every layer trims)."""
    info = _glibc_function("mallinfo2")
    if info is None:
        return None
    info.argtypes, info.restype = [], _MallocInfo
    return lambda: int(info().fordblks)


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, or None (musl, macOS: nothing to trim this way)."""
    trim = _glibc_function("malloc_trim")
    if trim is None:
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return lambda pad: int(trim(pad))


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's repeated blocks: the modules whose class the model names as never split across devices."""
    names: set[str] = set()
    for module in model.modules():
        names.update(getattr(module, "_no_split_modules", None) or ())
    return [module for module in model.modules() if type(module).__name__ in names]


def release_freed_memory_per_layer(model: torch.nn.Module, above: int = RELEASE_ABOVE) -> int:
    """After each decoder layer's forward, and before its backward, give the heap's free pages back to the
    system when it holds more than `above` bytes free; the layers hooked."""
    import torch

    trim, free_bytes = _malloc_trim(), _heap_free_bytes()
    if trim is None:
        return 0

    def release(*_: object) -> None:  # returns None: the layer's output and gradients are kept as they are
        if free_bytes is None or free_bytes() > above:
            trim(0)

    def after_forward(_layer: object, _args: object, output: object) -> None:
        release()
        hidden = output[0] if isinstance(output, tuple) else output
        if isinstance(hidden, torch.Tensor) and hidden.requires_grad:
            # runs when the gradient of the layer's output is ready, just before the layer's backward: a hook on
            # the tensor, not the module's full backward pre-hook, which wraps the layer's inputs and outputs and
            # warned at every step for the first layer (its input, the frozen embedding's output, needs no gradient)
            hidden.register_hook(release)

    layers = decoder_layers(model)
    for layer in layers:
        layer.register_forward_hook(after_forward)
    return len(layers)
