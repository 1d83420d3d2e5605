"""Export a trained judge for serving: merged weights, or a llama.cpp LoRA adapter.

- `merge_adapter`: base + LoRA folded into one safetensors folder (with the tokenizer), for
  servers that take a plain model (vLLM without `--enable-lora`, TGI, SGLang, or a GGUF
  conversion with llama.cpp's `convert_hf_to_gguf.py`).
- `adapter_to_gguf`: the LoRA adapter as a GGUF adapter file for llama.cpp, written by the llama.cpp
  engine (`backends/llamacpp/lora_export.py`), which also loads it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from spanjudge.core.artifacts import ADAPTER_METADATA, read_adapter_metadata
from spanjudge.core.fileio import atomic_directory, check_replaceable

MERGED_EXPORT = "merged export"  # the marker of a folder `merge_adapter` wrote (fileio.OUTPUT_MARKER)


def merge_adapter(adapter: Path, base_folder: str, out: Path, say: Callable[[str], None] = print) -> Path:
    """Fold the LoRA weights into the base and save safetensors + tokenizer to `out`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    say(f"loading {base_folder} + {adapter}")
    base = AutoModelForCausalLM.from_pretrained(base_folder, dtype="auto", use_safetensors=True)
    merged = PeftModel.from_pretrained(base, str(adapter)).merge_and_unload()
    tokenizer = AutoTokenizer.from_pretrained(str(adapter))
    with atomic_directory(out, MERGED_EXPORT) as scratch:
        merged.save_pretrained(scratch, safe_serialization=True)
        tokenizer.save_pretrained(scratch)
        metadata = read_adapter_metadata(adapter)
        if metadata is not None:
            record = {**metadata.record(), "merged_from": str(adapter)}
            (scratch / ADAPTER_METADATA).write_text(json.dumps(record, indent=2))
    say(f"merged model written to {out}")
    return out


def check_merge_target(out: Path) -> None:
    """Refuse, before any weights load, an --out that is not new, empty or an earlier merged export."""
    check_replaceable(out, MERGED_EXPORT)
