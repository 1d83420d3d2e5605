"""Every benchmark script still imports: they run by hand (`bench/`), so nothing else would notice
a helper that moved (the test helpers moved to tests/support once and four scripts broke silently)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(path for path in (REPO / "bench").rglob("*.py") if path.name != "__init__.py")


def _load(script: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    """The script as a module: its imports run, `main()` waits for __main__."""
    monkeypatch.syspath_prepend(str(script.parent))  # as `python bench/X.py` runs it: its folder first
    spec = importlib.util.spec_from_file_location(f"bench_{script.parent.name}_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(REPO / "bench")) for p in SCRIPTS])
def test_the_benchmark_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = _load(script, monkeypatch)
    if 'if __name__ == "__main__":' in script.read_text(encoding="utf-8"):  # a script, not a helper
        assert callable(getattr(module, "main", None)), f"{script.name} has no main()"


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_every_gpu_variant_is_a_valid_training_config(
    device: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench/gpu/run.py's variants are measured only where a GPU is lent: a mistyped setting must not
    wait for that window. Each variant's command is read as train.py reads it (keys, types, values)."""
    from types import SimpleNamespace

    from spanjudge.training.config import load_train_config, parse_override

    gpu = _load(REPO / "bench" / "gpu" / "run.py", monkeypatch)
    args = SimpleNamespace(device=device, steps=12, max_length=512)
    for name, settings in gpu.VARIANTS.items():  # type: ignore[attr-defined]
        command = gpu.variant_command(settings, tmp_path, tmp_path, tmp_path / name, args)  # type: ignore[attr-defined]
        assert ("accelerate" in Path(command[0]).name) is (device == "cuda"), command[:3]
        if device == "cuda" and name == "lora-fsdp":
            assert "configs/accelerate/fsdp.yaml" in command
        sets = [parse_override(command[i + 1]) for i, item in enumerate(command) if item == "--set"]
        config = load_train_config(gpu.RECIPE, sets, data_needed=False)  # type: ignore[attr-defined]
        assert config.training.liger_kernel is ("liger" in name), name
        assert config.training.gradient_checkpointing is ("no-checkpointing" not in name), name
        assert (config.model.quantization == "4bit") is name.startswith("qlora"), name


def test_prompt_lookup_passes_are_replayed_against_the_greedy_reply(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench/judging_drafts.py counts the passes prompt-lookup decoding needs for a kept greedy reply: a reply
    that copies the prompt goes several tokens a pass, one with nothing to copy one token a pass."""
    passes = _load(REPO / "bench/judging_drafts.py", monkeypatch).lookup_passes  # type: ignore[attr-defined]
    prompt = [1, 2, 3, 4, 5, 6, 7, 8]
    # no earlier occurrence to copy from: one token per pass
    assert passes(prompt, [20, 21, 22, 23], 2, 5) == 4
    # the prompt's "3 ... 8" copied: the first pass has nothing to look up (8, the last token, occurs once) and
    # writes 3; the second finds 3 earlier, guesses 4 5 6 7 8 and keeps all five
    assert passes(prompt, [3, 4, 5, 6, 7, 8], 2, 5) == 2
    # a guess that disagrees at its first token costs a pass that writes one token
    assert passes([1, 2, 1, 9], [2, 5], 2, 3) == 2
    # a draft of one token caps a pass at two tokens: 3 alone, then 4 5, 6 7 and 8 (+ one beyond the reply)
    assert passes(prompt, [3, 4, 5, 6, 7, 8], 2, 1) == 4
