"""The type check of `make check` and `make test`: mypy on every module of the package ([tool.mypy] in
pyproject.toml: every function typed, no implicit Any returned).

mypy reads a package from the file system, and `spanjudge` is spread over the repository's top-level
folders, so, as the layer check does, it runs on a copy assembled as one package (in build/typecheck,
kept between runs so mypy's cache stays warm). Paths in its report are the repository's.

    python tests/support/typecheck.py      # exit 0 when every module type-checks
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/: run as a script, `support` is a package
from support.layers import REPO, stage_package

STAGE = REPO / "build" / "typecheck"


def main() -> int:
    shutil.rmtree(STAGE / "spanjudge", ignore_errors=True)
    package = stage_package(STAGE)
    shutil.copy(REPO / "spanjudge" / "__init__.py", package / "__init__.py")
    result = subprocess.run(
        [sys.executable, "-m", "mypy", "--config-file", str(REPO / "pyproject.toml"),
         "--cache-dir", str(STAGE / ".mypy_cache"), str(package)],
        cwd=STAGE, capture_output=True, text=True,
    )  # fmt: skip
    # mypy names the staged files (spanjudge/core/...): the repository's are core/... (spanjudge/__init__.py stays)
    print(re.sub(r"^spanjudge/(?!__init__)", "", result.stdout + result.stderr, flags=re.M), end="")
    return result.returncode


if __name__ == "__main__":
    sys.exit(main())
