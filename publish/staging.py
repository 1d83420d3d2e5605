"""What may leave the machine: the model repo's allow-list and the checks every staged file passes.

What is read from a run (or dataset) folder must be a regular file inside it: a symbolic link,
or a path that resolves outside the folder, is refused (a link could stage `/etc/passwd` or a
token file under an allowed name). Every staged `.safetensors` must open as safetensors.
Machine-local paths (absolute or `~` paths) are cut to their last component in what spanjudge
writes, and before anything leaves the machine the staged text and the safetensors headers
(`__metadata__` included) are scanned for token-like strings, and the text for the source
folder's and home folder's paths.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar, cast

import yaml

from spanjudge.core.artifacts import ADAPTER_METADATA
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.inference.judge_conversation import TEMPLATE_FILE

JSONT = TypeVar("JSONT")  # a JSON value: strip_local_paths returns one of the same shape
ADAPTER_FILES = frozenset({"adapter_model.safetensors", "adapter_config.json"})
TOKENIZER_FILES = frozenset(
    {
        "tokenizer.json",
        "tokenizer_config.json",
        "special_tokens_map.json",
        "chat_template.jinja",
        "chat_template.json",
        "added_tokens.json",
        "tokenizer.model",
        "vocab.json",
        "merges.txt",
    }
)
MERGED_FILES = frozenset({"config.json", "generation_config.json", "model.safetensors", "model.safetensors.index.json"})
_SHARD = re.compile(r"^model-\d{5}-of-\d{5}\.safetensors$")
TEMPLATE_FILES = frozenset({TEMPLATE_FILE})  # the judge's own prompt template, when training used one
CONFIG_FILE = "train_config.yaml"
EVAL_RESULT_FILE = re.compile(r"^\.eval_results/[a-z0-9][a-z0-9_-]*\.yaml$")  # the Hub's evaluation results
CARD_FILE = "README.md"
_TOKEN_LIKE = re.compile(r"\bhf_[A-Za-z0-9]{20,}")
_SCAN_LIMIT = 64 << 20  # text files larger than this are not scanned (weights are binary anyway)
_HEADER_LIMIT = 100 << 20  # the safetensors library's own cap on a header
_CHUNK = 8 << 20  # large files are scanned in pieces: a dataset can be larger than memory likes
_OVERLAP = 256  # bytes kept between pieces, so a token split across two is still seen
# an absolute, home-relative, Windows or file:// path: names a place on this machine only
_LOCAL_PATH = re.compile(r"^(?:~|/|[A-Za-z]:[\\/]|\\\\|file://)")


def is_shard(name: str) -> bool:
    return bool(_SHARD.match(name))


def allowed(name: str, merged: bool) -> bool:
    """Whether a staged file name is on the model repo's allow-list (the only files ever uploaded)."""
    weights = (name in MERGED_FILES or is_shard(name)) if merged else name in ADAPTER_FILES
    return (
        weights
        or name in TOKENIZER_FILES | TEMPLATE_FILES
        or name in (ADAPTER_METADATA, CONFIG_FILE, CARD_FILE)
        or bool(EVAL_RESULT_FILE.match(name))
    )


def staged_files(folder: Path) -> list[Path]:
    """Every staged file, in subfolders too (`.eval_results/`), by path: what the checks below read."""
    return sorted(path for path in folder.rglob("*") if not path.is_dir())


def staged_names(folder: Path) -> list[str]:
    """The staged files' paths relative to `folder` (`README.md`, `.eval_results/x.yaml`): the allow-list's names."""
    return [path.relative_to(folder).as_posix() for path in staged_files(folder)]


def regular(path: Path) -> bool:
    return path.is_file() and not path.is_symlink()


def check_inside(path: Path, root: Path) -> Path:
    """`path` itself, when it is no symbolic link and resolves inside `root`: publish copies files
    under allow-listed names, so a link (`tokenizer.json -> /etc/passwd`) would upload its target."""
    if path.is_symlink():
        raise InputError(
            f"{path}: is a symbolic link; publish reads only regular files inside the run folder "
            "(replace the link with a copy of the file)"
        )
    resolved, inside = path.resolve(), root.resolve()
    if not resolved.is_relative_to(inside):
        raise InputError(
            f"{path}: resolves to {resolved}, outside the run folder {inside}; publish reads only files inside it"
        )
    if path.is_file() and path.stat().st_nlink > 1:  # a hard link shares its content with a file elsewhere
        raise InputError(
            f"{path}: has {path.stat().st_nlink} hard links; publish reads only files of their own "
            "(replace it with a copy: cp --remove-destination)"
        )
    return path


_TEXT_SUFFIXES = (".json", ".jinja", ".txt", ".md", ".yaml")


def check_formats(folder: Path) -> None:
    """Every staged file is what its name says: JSON parses, safetensors opens, text is UTF-8
    (a token file or a binary staged as `tokenizer.json` is refused before it leaves)."""
    for path in staged_files(folder):
        if path.suffix == ".safetensors":
            safetensors_header(path)
        elif path.suffix in _TEXT_SUFFIXES:
            try:
                text = path.read_bytes().decode("utf-8")
                if path.suffix == ".json":
                    json.loads(text)
                elif path.suffix == ".yaml":
                    yaml.safe_load(text)
            except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
                what = {UnicodeDecodeError: "UTF-8 text", json.JSONDecodeError: "valid JSON"}.get(
                    type(exc), "valid YAML"
                )
                raise InputError(
                    f"{path.relative_to(folder)}: not {what}; publish stages only files that are what their name says"
                ) from None


def safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (tensor table and `__metadata__`), after the
    `safetensors` library opened it: that checks the header parses and the tensors fill the file.
    A token file renamed to `*.safetensors` is refused here, before it could be uploaded."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="numpy"):
            pass
        with path.open("rb") as handle:
            size = int.from_bytes(handle.read(8), "little")
            if size > _HEADER_LIMIT:
                raise ValueError("header too large")
            header = json.loads(handle.read(size).decode("utf-8"))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
    except Exception as exc:  # SafetensorError, OSError, ValueError: the file is not what its name says
        detail = _TOKEN_LIKE.sub("hf_***", (str(exc).splitlines() or [""])[0])[:120]
        raise InputError(f"{path}: not a valid safetensors file ({exc.__class__.__name__}: {detail})") from None
    return header


# ---------------------------------------------------------------------------------------
# Machine-local paths


def local_name(value: str) -> str:
    """A machine-local path cut to its last component, as `spanjudge.json`'s train file always was."""
    return re.split(r"[\\/]", value.rstrip("/\\"))[-1] or "."


def strip_local_paths(data: JSONT) -> JSONT:
    """`data` with every string that is a machine-local path replaced by its last component."""
    if isinstance(data, dict):
        return cast(JSONT, {key: strip_local_paths(value) for key, value in data.items()})
    if isinstance(data, list):
        return cast(JSONT, [strip_local_paths(value) for value in data])
    if isinstance(data, str) and _LOCAL_PATH.match(data):
        return cast(JSONT, local_name(data))
    return data


def _local_paths(data: object) -> set[str]:
    if isinstance(data, dict):
        return set().union(*(_local_paths(value) for value in data.values()))
    if isinstance(data, list):
        return set().union(*(_local_paths(value) for value in data))
    return {data} if isinstance(data, str) and _LOCAL_PATH.match(data) else set()


def staged_config_text(text: str) -> str:
    """train_config.yaml as staged and quoted in the card: machine-local paths cut to their names.
    Edited in place so comments and layout stay; re-dumped only when quoting defeats that."""
    loaded = yaml.safe_load(text)
    wanted = strip_local_paths(loaded)
    for found in sorted(_local_paths(loaded), key=len, reverse=True):  # longest first: no prefix clash
        text = text.replace(found, local_name(found))
    try:
        edited_ok = yaml.safe_load(text) == wanted
    except yaml.YAMLError:
        edited_ok = False
    return text if edited_ok else yaml.safe_dump(wanted, sort_keys=False, allow_unicode=True)


def local_path_pattern(source: Path) -> re.Pattern[str]:
    """The source folder's absolute paths (as given and resolved) and the home folder's, as whole
    paths. A relative path (`out/a1`, a smoke config's `output_dir: runs/smoke`) names a place
    inside the project on any machine: it is not machine-local."""
    places = {str(p) for p in (source.expanduser(), source.resolve()) if p.is_absolute() and len(p.parts) > 1}
    try:
        home = Path.home()
    except RuntimeError:  # no home folder can be determined: nothing of it to leak
        home = Path("/")
    if len(home.parts) > 1:
        places.add(str(home))
    return re.compile(
        r"(?<![\w.-])(?:" + "|".join(map(re.escape, sorted(places, key=len, reverse=True))) + r")(?![\w.-])"
    )


def check_no_local_paths(folder: Path, source: Path) -> None:
    """A last guard: no staged text names the source (run) folder or the home folder (a path in
    free text, a comment, that the rewriting above does not reach). Tokenizer vocabularies are
    not searched: pieces like "/home" are ordinary tokens there."""
    pattern = local_path_pattern(source)
    holding = [
        path.relative_to(folder).as_posix()
        for path in staged_files(folder)
        if path.suffix != ".safetensors"
        and path.name not in TOKENIZER_FILES
        and path.stat().st_size <= _SCAN_LIMIT
        and pattern.search(path.read_bytes().decode("utf-8", errors="replace"))
    ]
    if holding:
        raise SpanjudgeError(
            f"refusing to publish: a machine-local path (the run or home folder) in {', '.join(holding)}; "
            "remove it from the run's file"
        )


# ---------------------------------------------------------------------------------------
# Secrets


def holds_secret(text: str, token: str | None) -> bool:
    return bool((token and token in text) or _TOKEN_LIKE.search(text))


def holds_secret_file(path: Path, token: str | None) -> bool:
    """The secret scan over a whole file of any size, piece by piece."""
    tail = b""
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            text = (tail + chunk).decode("utf-8", errors="replace")
            if holds_secret(text, token):
                return True
            tail = chunk[-_OVERLAP:]
    return False


def refuse_secrets(holding: list[str]) -> None:
    if holding:
        raise SpanjudgeError(f"refusing to publish: token-like strings (hf_...) in {', '.join(holding)}")


def check_no_secrets(folder: Path, token: str | None = None) -> None:
    """Refuse a staged folder whose text, or a safetensors header (`__metadata__` included), holds
    a Hugging Face token; the file is named, the token never shown. Also refuses a staged
    `.safetensors` that does not open as one."""
    holding = []
    for path in staged_files(folder):
        if path.suffix == ".safetensors":
            # the parsed header, dumped again: a JSON escape (\\u0068f_...) must not hide a token
            text = json.dumps(safetensors_header(path), ensure_ascii=False)
        elif path.stat().st_size > _SCAN_LIMIT:
            continue
        else:
            text = path.read_bytes().decode("utf-8", errors="replace")
        if holds_secret(text, token):
            holding.append(path.relative_to(folder).as_posix())
    refuse_secrets(holding)


def refuse_strays(names: list[str], wanted: Callable[[str], bool], folder: Path) -> None:
    """Stop when staging wrote a file outside the allow-list: a bug, never a user mistake."""
    stray = [n for n in names if not wanted(n) or not regular(folder / n)]
    if stray:
        raise SpanjudgeError(f"staging produced files outside the allow-list: {', '.join(stray)}")


# ---------------------------------------------------------------------------------------
# The dry-run folder

DRY_RUN_MODEL = "publish dry run (model)"
DRY_RUN_DATASET = "publish dry run (dataset)"


def check_dry_run_target(out: Path, sources: Iterable[Path]) -> None:
    """DIR is never a folder publish reads from (the run, the adapter, the dataset) nor one inside
    or around them. That it is new, empty or an earlier dry run of the same kind (its marker) is
    checked where it is replaced (`fileio.atomic_directory`, before anything is staged)."""
    target = out.expanduser().resolve()
    for source in sources:
        folder = source.expanduser().resolve()
        where = "is" if target == folder else "is inside" if target.is_relative_to(folder) else "holds"
        if target == folder or target.is_relative_to(folder) or folder.is_relative_to(target):
            raise InputError(
                f"--dry-run {out}: {where} the folder being published ({source}); name a new or empty folder outside it"
            )
