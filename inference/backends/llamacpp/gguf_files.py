"""What a GGUF file is, read from its header, so that llama.cpp is never handed a file it would crash on.

`Llama(model_path=..., lora_path=...)` given a missing file, a file that is not a GGUF, or a LoRA made
for another base either raises deep inside llama-cpp-python or dies with a segmentation fault. The
checks here run first and say in one line what is wrong (`check_model_files`): each file exists and is
a GGUF; the model is a model and the LoRA an adapter; every tensor the LoRA changes exists in the model
with the shapes the LoRA multiplies; the tokenizer the judge encodes with has the model's vocabulary.

The header is read here rather than with `gguf.GGUFReader`, which parses every array (a 262k-token
vocabulary: 8 s for Gemma 3 270M on 2 cores); this reads scalars and tensor shapes and skips arrays by
their lengths (GGUF v2/v3, the format llama.cpp writes: github.com/ggml-org/ggml/blob/master/docs/gguf.md).
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.errors import InputError

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

MAGIC = b"GGUF"
_SCALARS = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}
_STRING, _ARRAY = 8, 9
# a LoRA tensor `blk.N.attn_q.weight.lora_a` changes the model tensor `blk.N.attn_q.weight`
_LORA_SUFFIXES = (".lora_a", ".lora_b")
VOCABULARY = "tokenizer.ggml.tokens"
SAMPLED_TOKENS = 64  # vocabulary entries kept (evenly spread) to compare with the judge's tokenizer


@dataclass(frozen=True)
class GGUFHeader:
    """A GGUF's metadata scalars (arrays by their length only) and tensor shapes (ggml order: ne0 first)."""

    path: Path
    metadata: dict[str, Any]
    array_lengths: dict[str, int]
    tensors: dict[str, tuple[int, ...]] = field(repr=False)
    sampled_tokens: dict[int, str] = field(default_factory=dict, repr=False)  # id -> token, SAMPLED_TOKENS of them

    @property
    def architecture(self) -> str | None:
        value = self.metadata.get("general.architecture")
        return str(value) if value is not None else None

    @property
    def kind(self) -> str:
        """ "adapter" for a LoRA (general.type), else "model"."""
        return str(self.metadata.get("general.type") or "model")

    @property
    def vocabulary(self) -> int | None:
        return self.array_lengths.get(VOCABULARY)


class _Cursor:
    def __init__(self, data: mmap.mmap | bytes) -> None:
        self.data, self.at = data, 0

    def number(self, form: str) -> int | float:
        value: int | float = struct.unpack_from("<" + form, self.data, self.at)[0]
        self.at += struct.calcsize(form)
        return value

    def take(self, form: str) -> int:
        """An integer field: a count, a length, a type."""
        return int(self.number(form))

    def string(self) -> str:
        length = self.take("Q")
        text = bytes(self.data[self.at : self.at + length]).decode("utf-8", "replace")
        self.at += length
        return text

    def skip_string(self) -> None:
        length = self.take("Q")  # read before `self.at +=` reads the position
        self.at += length

    def value(self, kind: int) -> str | int | float:
        if kind == _STRING:
            return self.string()
        if kind in _SCALARS:
            return self.number(_SCALARS[kind])
        raise ValueError(f"unknown value type {kind}")

    def sample_strings(self, count: int, wanted: set[int]) -> dict[int, str]:
        """The strings at the `wanted` indices of a string array of `count` (the others skipped)."""
        found = {}
        for index in range(count):
            if index in wanted:
                found[index] = self.string()
            else:
                self.skip_string()
        return found

    def skip_array(self, kind: int, count: int) -> None:
        if kind == _STRING:
            for _ in range(count):
                self.skip_string()
        elif kind in _SCALARS:
            self.at += count * struct.calcsize(_SCALARS[kind])
        elif kind == _ARRAY:
            for _ in range(count):
                inner, inner_count = self.take("I"), self.take("Q")
                self.skip_array(inner, inner_count)
        else:
            raise ValueError(f"unknown array type {kind}")


def read_header(path: Path, option: str) -> GGUFHeader:
    """The header of the GGUF at `path`; InputError naming `option` and the file when it is missing,
    not a file, not a GGUF, or cut short."""
    if not path.exists():
        raise InputError(f"{option}{path}: no such file")
    if not path.is_file():
        raise InputError(f"{option}{path}: is not a file (give a .gguf file)")
    with path.open("rb") as handle:
        if handle.read(4) != MAGIC:
            raise InputError(f"{option}{path}: is not a GGUF file (it does not start with 'GGUF')")
        handle.seek(0)
        try:
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                return _parse(path, data)
        except (struct.error, ValueError, OverflowError) as error:
            raise InputError(f"{option}{path}: a damaged or cut-short GGUF file ({error})") from None


def _parse(path: Path, data: mmap.mmap | bytes) -> GGUFHeader:
    cursor = _Cursor(data)
    cursor.at = 4
    version = cursor.take("I")
    if version < 2:
        raise ValueError(f"GGUF version {version} is too old for llama.cpp")
    tensor_count, kv_count = cursor.take("Q"), cursor.take("Q")
    metadata: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    sampled: dict[int, str] = {}
    for _ in range(kv_count):
        key, kind = cursor.string(), cursor.take("I")
        if kind == _ARRAY:
            inner, count = cursor.take("I"), cursor.take("Q")
            lengths[key] = count
            if key == VOCABULARY and inner == _STRING:
                sampled = cursor.sample_strings(count, set(range(0, count, max(1, count // SAMPLED_TOKENS))))
            else:
                cursor.skip_array(inner, count)
        else:
            metadata[key] = cursor.value(kind)
    tensors: dict[str, tuple[int, ...]] = {}
    for _ in range(tensor_count):
        name, dims = cursor.string(), cursor.take("I")
        tensors[name] = tuple(cursor.take("Q") for _ in range(dims))
        cursor.take("I")  # the tensor's type
        cursor.take("Q")  # its offset in the data section
    return GGUFHeader(path, metadata, lengths, tensors, sampled)


def lora_misfits(model: GGUFHeader, lora: GGUFHeader) -> list[str]:
    """Why `lora` cannot apply to `model`: architecture, missing tensors, shapes (the first few)."""
    if lora.architecture != model.architecture:
        return [f"it is for a {lora.architecture} model and the GGUF is a {model.architecture} model"]
    problems = []
    for name, shape in sorted(lora.tensors.items()):
        base_name = next((name[: -len(s)] for s in _LORA_SUFFIXES if name.endswith(s)), None)
        if base_name is None:
            continue
        base = model.tensors.get(base_name)
        if base is None:
            problems.append(f"it changes {base_name}, which the GGUF does not have")
        elif len(shape) != 2 or len(base) != 2:
            problems.append(f"{name} is {list(shape)}, not a matrix")
        elif name.endswith(".lora_a") and shape[0] != base[0]:
            problems.append(f"{name} reads {shape[0]} features; {base_name} has {base[0]}")
        elif name.endswith(".lora_b") and shape[1] != base[1]:
            problems.append(f"{name} writes {shape[1]} features; {base_name} has {base[1]}")
        if len(problems) >= 3:
            break
    return problems


def check_model_files(
    gguf: Path, lora: Path | None, tokenizer: PreTrainedTokenizerBase | None, where: str
) -> GGUFHeader:
    """One InputError line before llama.cpp loads anything: `gguf` a model GGUF, `lora` (if any) a GGUF
    LoRA that fits it, `tokenizer` (if any) of the model's vocabulary. `where` names the engine
    ("llamacpp model X"); the options are named as the engine takes them (gguf=, lora=)."""
    header = read_header(gguf, f"{where}: gguf=")
    if header.kind == "adapter":
        raise InputError(f"{where}: gguf={gguf} is a LoRA adapter, not a model; give it as lora=, the model as gguf=")
    if lora is not None:
        adapter = read_header(lora, f"{where}: lora=")
        if adapter.kind != "adapter":
            raise InputError(
                f"{where}: lora={lora} is a whole model, not a LoRA adapter (spanjudge export --gguf-lora writes one)"
            )
        misfits = lora_misfits(header, adapter)
        if misfits:
            raise InputError(f"{where}: lora={lora} does not fit gguf={gguf}: {'; '.join(misfits)}")
    if tokenizer is not None:
        mismatch = vocabulary_mismatch(header, tokenizer)
        if mismatch:
            raise InputError(f"{where}: gguf={gguf} is of another model than the judge's base: {mismatch}")
    return header


def vocabulary_mismatch(header: GGUFHeader, tokenizer: PreTrainedTokenizerBase) -> str | None:
    """Why the GGUF's vocabulary is not the tokenizer's, or None: the judge encodes its prompts with the
    tokenizer and hands the ids to llama.cpp, so an id past the GGUF's vocabulary would crash it and
    another model's ids would be read as other words. The GGUF may pad its vocabulary (more entries)."""
    size = len(tokenizer)
    if header.vocabulary is not None and size > header.vocabulary:
        return f"its vocabulary has {header.vocabulary} tokens, the tokenizer's {size}"
    shared = sorted(i for i in header.sampled_tokens if i < size)
    if not shared:
        return None
    theirs = tokenizer.convert_ids_to_tokens(shared)
    same = sum(1 for i, token in zip(shared, theirs, strict=True) if token == header.sampled_tokens[i])
    if same * 4 < len(shared) * 3:  # a few special tokens may be spelled differently; most words may not
        return f"{len(shared) - same} of {len(shared)} sampled token ids name other tokens than in the tokenizer"
    return None
