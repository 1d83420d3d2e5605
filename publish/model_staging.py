"""Staging a trained judge: exactly what `spanjudge publish --model` uploads, in one folder.

- the adapter (`adapter_model.safetensors`, `adapter_config.json`) or, with `--merged`, the
  weights merged into the base (`model*.safetensors`, `config.json`, `generation_config.json`);
  a fully fine-tuned judge (`training.finetuning: full`) is its whole model, the same files as merged ones;
- the tokenizer files, `spanjudge.json` (what scoring needs) and the run's `train_config.yaml`;
- `README.md`: the model card (card.py);
- `.eval_results/*.yaml`: the Hub's evaluation results, for the sets given a `--hub-dataset` (eval_results.py).

Nothing else is copied: no checkpoint folder, optimizer, scheduler or RNG state, no pickle
(`training_args.bin`, `*.pt`, `*.bin`), no logs. The checks every file passes are staging.py's.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

from spanjudge.core.artifacts import ADAPTER_METADATA, AdapterMetadata
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_directory
from spanjudge.inference.export import merge_adapter
from spanjudge.inference.hf_models import local_folder, resolve_model_source

from .card import CardOptions, render_card
from .run_folder import HUB_BASES, RunFolder
from .staging import (
    CARD_FILE,
    CONFIG_FILE,
    DRY_RUN_MODEL,
    MERGED_FILES,
    TEMPLATE_FILES,
    TOKENIZER_FILES,
    allowed,
    check_formats,
    check_inside,
    check_no_local_paths,
    check_no_secrets,
    is_shard,
    refuse_strays,
    regular,
    staged_config_text,
    staged_names,
    strip_local_paths,
)


def _staged_adapter_config(path: Path, base_model: str) -> str:
    config = json.loads(path.read_text(encoding="utf-8"))
    config["base_model_name_or_path"] = base_model  # not the machine-local folder it was trained from
    return json.dumps(strip_local_paths(config), indent=2, sort_keys=True) + "\n"


def staged_metadata(metadata: AdapterMetadata, base_model: str, merged: bool) -> str:
    """spanjudge.json as uploaded: the Hub base, the trained-on base by name, no local paths."""
    record = {k: v for k, v in metadata.record().items() if k != "merged_from"}
    trained = metadata.base_model or ""
    if trained and trained != base_model:  # a local folder or file by its name only, not its path
        record["trained_base_model"] = trained if trained in HUB_BASES else Path(trained).name
    record["base_model"] = base_model
    if record.get("train_file"):
        record["train_file"] = Path(str(record["train_file"])).name  # no machine-local path
    record["merged"] = merged
    return json.dumps(strip_local_paths(record), indent=2, ensure_ascii=False) + "\n"


def _copy_source(source: Path, root: Path, target: Path) -> None:
    """Copy a run file checked again right before (it could have become a link since read_run)."""
    shutil.copyfile(check_inside(source, root), target, follow_symlinks=False)


def stage(
    run: RunFolder,
    out: Path,
    options: CardOptions,
    eval_results: Mapping[str, str] | None = None,
    *,
    say: Callable[[str], None] = print,
    token: str | None = None,
) -> list[str]:
    """Write exactly what will be uploaded into `out` (replaced as a whole); returns the file paths in it.
    `eval_results`: the Hub's `.eval_results/*.yaml` files (path -> text, `eval_results.eval_result_files`)."""
    with atomic_directory(out, DRY_RUN_MODEL, "--dry-run") as scratch:
        if run.full:  # already a whole model: its own weights, nothing to merge
            _stage_whole(run, scratch)
        elif options.merged:
            _stage_merged(run, scratch, say)
        else:
            _copy_source(run.adapter / "adapter_model.safetensors", run.root, scratch / "adapter_model.safetensors")
            (scratch / "adapter_config.json").write_text(
                _staged_adapter_config(run.adapter / "adapter_config.json", options.base_model), encoding="utf-8"
            )
        for name in sorted(TOKENIZER_FILES | TEMPLATE_FILES):
            source = run.adapter / name
            if (source.is_symlink() or source.is_file()) and not (scratch / name).exists():
                _copy_source(source, run.root, scratch / name)
        (scratch / ADAPTER_METADATA).write_text(
            staged_metadata(run.metadata, options.base_model, options.merged and not run.full), encoding="utf-8"
        )
        if run.config_text is not None:
            (scratch / CONFIG_FILE).write_text(staged_config_text(run.config_text), encoding="utf-8")
        (scratch / CARD_FILE).write_text(render_card(run, options), encoding="utf-8")
        for name, text in (eval_results or {}).items():
            (scratch / name).parent.mkdir(exist_ok=True)
            (scratch / name).write_text(text, encoding="utf-8")
        names = staged_names(scratch)
        refuse_strays(names, lambda name: allowed(name, options.merged or run.full), scratch)
        check_formats(scratch)
        check_no_secrets(scratch, token)
        check_no_local_paths(scratch, run.adapter.parent)
    return names


def _stage_merged(run: RunFolder, scratch: Path, say: Callable[[str], None]) -> None:

    base_folder = local_folder(resolve_model_source(run.recorded_base), say)
    with tempfile.TemporaryDirectory(prefix="spanjudge-merge-") as tmp:
        merged = merge_adapter(run.adapter, base_folder, Path(tmp) / "merged", say=say)
        for path in sorted(merged.iterdir()):
            if regular(path) and (path.name in MERGED_FILES | TOKENIZER_FILES or is_shard(path.name)):
                shutil.copyfile(path, scratch / path.name)
    _whole_model_checks(scratch)


def _stage_whole(run: RunFolder, scratch: Path) -> None:
    """A fully fine-tuned judge's own weights and model config, each a regular file inside the run folder."""
    for path in sorted(run.adapter.iterdir()):
        if path.name in MERGED_FILES or is_shard(path.name):
            _copy_source(path, run.root, scratch / path.name)
    _whole_model_checks(scratch)


def _whole_model_checks(scratch: Path) -> None:
    """A staged whole model's configs name no local folder, and it has safetensors weights."""
    for name in ("config.json", "generation_config.json"):  # `_name_or_path` may be a local folder
        if (scratch / name).is_file():
            config = json.loads((scratch / name).read_text(encoding="utf-8"))
            if strip_local_paths(config) != config:
                (scratch / name).write_text(json.dumps(strip_local_paths(config), indent=2) + "\n", encoding="utf-8")
    if not any(p.suffix == ".safetensors" for p in scratch.iterdir()):
        raise SpanjudgeError(f"no safetensors weights staged in {scratch}")
