"""MkDocs hook: lay the package out as it installs (setup.py maps the top-level folders core/,
inference/ … to spanjudge.core, spanjudge.inference …) in build/api/, as links, so that
mkdocstrings' static reader finds `spanjudge.inference.judge` where an installed wheel has it."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGE_TREE = REPO / "build" / "api" / "spanjudge"


def mapped_folders() -> list[str]:
    """setup.py's CODE_FOLDERS and configs/: the folders installed as spanjudge.<folder>."""
    tree = ast.parse((REPO / "setup.py").read_text())
    assigned = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "CODE_FOLDERS")
    return [*ast.literal_eval(assigned.value), "configs"]


def on_startup(command: str, dirty: bool) -> None:
    # on_startup, not on_config: mkdocstrings reads its `paths` in its own on_config, before hooks'
    PACKAGE_TREE.mkdir(parents=True, exist_ok=True)
    for name in mapped_folders():
        link = PACKAGE_TREE / name
        if not link.is_symlink():
            link.symlink_to(REPO / name)
    # a copy, not a link: the reader takes a linked __init__.py's real folder for the package's
    init = PACKAGE_TREE / "__init__.py"
    init.unlink(missing_ok=True)
    shutil.copyfile(REPO / "spanjudge" / "__init__.py", init)
