"""A llama.cpp judge's files are checked in one line before llama.cpp loads, and its GGUF and LoRA are part of its
identity."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.faults import one_item_score_args, one_line

from spanjudge.app.cli import main as cli_main
from spanjudge.inference.backends.base import BackendError
from spanjudge.inference.judge import Judge
from spanjudge.inference.shipped_models import smollm2_gguf


def _lora(path: Path, width: int, layers: int = 1) -> Path:
    """A GGUF LoRA (as `spanjudge export --gguf-lora` writes one) changing attn_q of a model `width` wide."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_string(gguf.Keys.General.TYPE, "adapter")
    writer.add_string(gguf.Keys.Adapter.TYPE, "lora")
    writer.add_float32(gguf.Keys.Adapter.LORA_ALPHA, 8.0)
    for layer in range(layers):
        writer.add_tensor(f"blk.{layer}.attn_q.weight.lora_a", np.full((4, width), 0.01, np.float32))
        writer.add_tensor(f"blk.{layer}.attn_q.weight.lora_b", np.full((width, 4), 0.01, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _engine(smollm2_folder: Path, **files: Any) -> None:
    Judge.from_pretrained(smollm2_folder, engine="llamacpp", engine_options={"n_ctx": 512, **files}).close()


def test_llamacpp_files_are_checked_in_one_line_before_llama_loads(
    tmp_path: Path, smollm2_folder: Path, gemma3_path: Path
) -> None:
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    cases = [
        ({"gguf": str(tmp_path / "absent.gguf")}, "gguf=.*absent.gguf: no such file"),
        ({"gguf": str(text)}, "is not a GGUF file"),
        ({"gguf": str(smollm2_gguf()), "lora": str(tmp_path / "none.gguf")}, "lora=.*none.gguf: no such file"),
        ({"gguf": str(smollm2_gguf()), "lora": str(smollm2_gguf())}, "is a whole model, not a LoRA adapter"),
        (
            {"gguf": str(smollm2_gguf()), "lora": str(_lora(tmp_path / "wide.gguf", 640))},
            "does not fit gguf=.*reads 640 features; blk.0.attn_q.weight has 576",
        ),
        (
            {"gguf": str(smollm2_gguf()), "lora": str(_lora(tmp_path / "deep.gguf", 576, layers=31))},
            "changes blk.30.attn_q.weight, which the GGUF does not have",
        ),
        ({"gguf": str(gemma3_path)}, "is of another model than the judge's base: .* sampled token ids name other"),
    ]
    for files, said in cases:
        with pytest.raises(BackendError, match=said):
            _engine(smollm2_folder, **files)
    _engine(smollm2_folder, gguf=str(smollm2_gguf()), lora=str(_lora(tmp_path / "fits.gguf", 576)))  # loads


def test_the_gguf_and_the_lora_are_part_of_the_judges_identity(
    tmp_path: Path, smollm2_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    engine = ["--engine", "llamacpp", "--engine-arg", f"gguf={smollm2_gguf()}", "--engine-arg", "n_ctx=1024"]
    args, out = one_item_score_args(tmp_path, str(smollm2_folder), *engine, "--max-new-tokens", "16")
    assert cli_main(args) == 0
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert f"gguf {smollm2_gguf().name} sha256:" in row["model"]
    lora = _lora(tmp_path / "judge-lora.gguf", 576)
    assert cli_main([*args, "--engine-arg", f"lora={lora}"]) == 2  # another judge: never into the same file
    line = one_line(capsys)
    assert "was scored with judge" in line and "another --out" in line, line
    assert len(out.read_text().splitlines()) == 1
