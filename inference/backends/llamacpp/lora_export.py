"""The judge's LoRA adapter as a GGUF adapter file for llama.cpp (`spanjudge export --gguf-lora`):
`llama-server -m base.gguf --lora judge-lora.gguf`, llama-cpp-python's `--lora_path`, or this engine's
`lora=` option, applied at run time to a GGUF of the same base, with no merge and no full-model conversion.

Written with the `gguf` package, following llama.cpp's `convert_lora_to_gguf.py`: tensor names in
llama.cpp's scheme, `lora_b` of a Llama base's query and key projections permuted the way llama.cpp stores
those weights, scale = alpha / r. Llama and Gemma 3 bases.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from spanjudge.core.errors import InputError, SpanjudgeError

if TYPE_CHECKING:
    import numpy as np

GGUF_EXPORT_KEY = "spanjudge.export"  # a GGUF key naming the file an adapter export of ours

# the bases whose adapters export: transformers' model_type -> (llama.cpp's architecture, whether the query and
# key rows are permuted). Only Llama's converter permutes them (its rotary layout); Gemma 3's keeps them as they
# are (convert_hf_to_gguf.py), and transformers reads both GGUFs back accordingly.
_ARCHITECTURES = {"llama": ("llama", True), "gemma3_text": ("gemma3", False)}
# PEFT module path -> llama.cpp tensor name (the same in both architectures)
_LLAMA_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}
_PEFT_KEY = re.compile(r"^base_model\.model\.model\.layers\.(\d+)\.(.+)\.lora_([AB])\.weight$")


def check_gguf_target(out: Path) -> None:
    """Refuse, before any work, an --out that is a folder or a file other than an earlier GGUF
    LoRA export of spanjudge's (its GGUF key says so): nothing else is ever overwritten."""
    if out.is_dir():
        raise InputError(f"--out {out}: is a folder; --gguf-lora writes one file, e.g. --out judge-lora.gguf")
    if not (out.exists() or out.is_symlink()):
        return
    if out.is_symlink() or not _our_gguf(out):
        raise InputError(
            f"--out {out}: the file exists and is not a GGUF LoRA that spanjudge exported; it is never "
            "overwritten: name a new file"
        )


def _our_gguf(path: Path) -> bool:
    import gguf

    try:
        return GGUF_EXPORT_KEY in gguf.GGUFReader(str(path)).fields
    except Exception:  # not a GGUF file at all (gguf raises ValueError, OSError, struct errors)
        return False


def _permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """llama.cpp's row order for the query/key projections (convert_hf_to_gguf's `permute`)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    rows = weights.shape[0]
    grouped = weights.reshape(n_head, 2, rows // n_head // 2, *weights.shape[1:])
    permuted: np.ndarray = grouped.swapaxes(1, 2).reshape(weights.shape)
    return permuted


def adapter_to_gguf(adapter: Path, base_config: dict[str, Any], out: Path) -> Path:
    """Write the LoRA adapter as a llama.cpp GGUF adapter (float32 tensors)."""
    import gguf
    from safetensors.numpy import load_file

    model_type = base_config.get("model_type")
    if model_type not in _ARCHITECTURES:
        raise SpanjudgeError(
            f"GGUF LoRA export supports Llama and Gemma 3 bases, not {model_type!r}; "
            "merge the adapter instead (spanjudge export --merge) and convert with llama.cpp"
        )
    config = json.loads((adapter / "adapter_config.json").read_text(encoding="utf-8"))
    if config.get("use_rslora") or config.get("use_dora"):
        raise SpanjudgeError("GGUF LoRA export supports plain LoRA (no rsLoRA, no DoRA)")
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    n_head, n_head_kv = base_config["num_attention_heads"], base_config.get("num_key_value_heads")
    check_gguf_target(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    try:
        _write_gguf(gguf, partial, config, tensors, adapter, model_type, n_head, n_head_kv)
        check_gguf_target(out)  # again, right before the rename: nothing else appeared there meanwhile
        partial.replace(out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def _write_gguf(
    gguf: ModuleType, partial: Path, config: dict[str, Any], tensors: dict[str, Any], adapter: Path, model_type: str,
    n_head: int, n_head_kv: int | None,
) -> None:  # fmt: skip
    import numpy as np

    architecture, permuted = _ARCHITECTURES[model_type]
    writer = gguf.GGUFWriter(str(partial), architecture)
    writer.add_string(GGUF_EXPORT_KEY, "lora")
    writer.add_string(gguf.Keys.General.TYPE, "adapter")
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, float(config["lora_alpha"]))
    for key in sorted(tensors, key=_natural):
        match = _PEFT_KEY.match(key)
        if match is None or match.group(2) not in _LLAMA_NAMES:
            raise SpanjudgeError(f"{adapter}: cannot map adapter tensor {key} to llama.cpp")
        layer, module, part = match.groups()
        data = tensors[key].astype(np.float32)
        if permuted and part == "B" and module == "self_attn.q_proj":
            data = _permute(data, n_head, n_head)
        elif permuted and part == "B" and module == "self_attn.k_proj":
            data = _permute(data, n_head, n_head_kv)
        writer.add_tensor(f"blk.{layer}.{_LLAMA_NAMES[module]}.weight.lora_{part.lower()}", np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def _natural(key: str) -> tuple[Any, ...]:
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", key))
