"""The layer contracts of pyproject.toml ([tool.importlinter]), checked with import-linter.

import-linter reads a package from the file system, and `spanjudge` is spread over the
repository's top-level folders (setup.py maps each to `spanjudge.<folder>`), so the check runs
on a copy of those folders assembled as one package in a temporary directory. `make check` and
`make test` run it once, then once more on a copy with planted violations (`PLANTED`), each of which
must be reported: the check can fail.

    python tests/support/layers.py      # exit 0 when every contract is kept and every planted violation reported
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def code_folders(repo: Path = REPO) -> tuple[str, ...]:
    """setup.py's CODE_FOLDERS: the top-level folders installed as `spanjudge.<folder>`."""
    tree = ast.parse((repo / "setup.py").read_text(encoding="utf-8"))
    [value] = [n.value for n in tree.body if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "CODE_FOLDERS"]
    return tuple(ast.literal_eval(value))


def stage_package(destination: Path, repo: Path = REPO, configs: bool = False) -> Path:
    """The code folders of `repo` (and with `configs`, its configs/) copied into `destination/spanjudge`
    (a regular package); returns it. On PYTHONPATH=destination it is the `spanjudge` Python imports."""
    package = destination / "spanjudge"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text("")
    folders = code_folders(repo)
    for folder in (*folders, "configs") if configs else folders:
        shutil.copytree(repo / folder, package / folder, ignore=shutil.ignore_patterns("__pycache__"))
    return package


def lint_imports(staged_root: Path, config: Path = REPO / "pyproject.toml") -> subprocess.CompletedProcess[str]:
    """import-linter's run over the package staged under `staged_root` (its report in stdout)."""
    lint = Path(sys.executable).with_name("lint-imports")
    return subprocess.run(
        [str(lint), "--no-cache", str(config)],
        cwd=staged_root,
        env={"PYTHONPATH": str(staged_root), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
    )


# Violations planted in one more copy, each of which a contract must report: the check can fail.
PLANTED = (
    # the base reaches the top
    ("core/errors.py", "from spanjudge.app import cli", "spanjudge.core is not allowed to import spanjudge.app"),
    # sibling layers
    ("training/data.py", "from spanjudge.data_gen import records",
     "spanjudge.training is not allowed to import spanjudge.data_gen"),
    # the judge imports the prompts, and now the prompts the judge
    ("inference/prompts.py", "from . import judge", "No cycles are allowed in spanjudge.inference"),
)  # fmt: skip


def unreported(planted: tuple[tuple[str, str, str], ...] = PLANTED) -> list[str]:
    """The planted violations import-linter does not report, on a copy with all of them."""
    with tempfile.TemporaryDirectory() as temporary:
        package = stage_package(Path(temporary))
        for module, line, _ in planted:
            path = package / module
            path.write_text(path.read_text() + f"\n{line}  # planted\n")
        result = lint_imports(Path(temporary))
    if result.returncode == 0:
        return [f"{module}: {line}" for module, line, _ in planted]
    return [f"{module}: {line} (expected: {said})" for module, line, said in planted if said not in result.stdout]


def main() -> int:
    """The contracts on the package; then on a copy with planted violations, each of which must be reported."""
    with tempfile.TemporaryDirectory() as temporary:
        stage_package(Path(temporary))
        result = lint_imports(Path(temporary))
    report = result.stdout[result.stdout.find("Contracts") :] if "Contracts" in result.stdout else result.stdout
    print(report + result.stderr, end="")
    if result.returncode:
        return result.returncode
    missed = unreported()
    for violation in missed:
        print(f"a planted violation went unreported: {violation}", file=sys.stderr)
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
