"""The release: `python -m build` makes an sdist and a wheel that `twine check` passes, the wheel holds
every package and the configs, and, installed non-editable into a fresh venv, it runs real commands.

`make` installs the project editable, which would hide a package missing from the wheel (one once
shipped without `spanjudge.inference.backends` and could not score). The build and the venv are
tests/support/release.py's (session fixtures `release` and `installed`); tests/slow/test_docs.py runs the
README's quick starts and every docs example from the same install.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from support.release import Release

REPO = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("inference", "data_gen", "training", "eval")

pytestmark = pytest.mark.slow


def _run(bin_dir: Path, cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [str(bin_dir / "spanjudge"), *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=600
    )


def test_the_release_builds_passes_twine_check_and_says_its_version(release: Release) -> None:
    """`python -m build`: spanjudge-VERSION.tar.gz and a pure-Python wheel, both accepted by `twine check
    --strict` (the README renders on PyPI); the version is pyproject's, and the changelog and the citation
    file say the same version (the sdist ships both, and the license)."""
    [version] = re.findall(r'^version = "([^"]+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert release.sdist.name == f"spanjudge-{version}.tar.gz"
    assert release.wheel.name == f"spanjudge-{version}-py3-none-any.whl"
    assert "absent from the `packages` configuration" not in release.log  # setuptools' warning for configs/ folders
    check = subprocess.run([sys.executable, "-m", "twine", "check", "--strict", str(release.sdist), str(release.wheel)],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert check.returncode == 0 and check.stdout.count("PASSED") == 2, check.stdout + check.stderr
    with tarfile.open(release.sdist) as sdist:
        shipped = {Path(name).relative_to(f"spanjudge-{version}").as_posix() for name in sdist.getnames()}
    assert {"README.md", "LICENSE", "CHANGELOG.md", "CITATION.cff", "pyproject.toml", "setup.py"} <= shipped
    assert (REPO / "CHANGELOG.md").read_text().count(f"\n## {version} ") == 1
    citation = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert citation["version"] == version and citation["cff-version"] == "1.2.0"
    assert {"title", "message", "authors", "license"} <= set(citation)
    [thesis] = [r for r in citation["references"] if r["type"] == "thesis"]
    assert thesis["title"] == "Explainable LLM-based evaluation for NLG using error analysis"


def test_the_wheel_holds_every_package_and_the_configs(release: Release) -> None:
    names = zipfile.ZipFile(release.wheel).namelist()
    for folder in CODE_FOLDERS:
        for init in (REPO / folder).rglob("__init__.py"):
            assert f"spanjudge/{init.relative_to(REPO).as_posix()}" in names
    shipped_configs = {n for n in names if n.startswith("spanjudge/configs/")}
    for pattern in ("*.yaml", "*.jinja", "config.json"):  # config.json: the architectures a --plan needs offline
        for config in (REPO / "configs").rglob(pattern):
            assert f"spanjudge/{config.relative_to(REPO).as_posix()}" in shipped_configs


def test_commands_run_from_the_installed_wheel(installed: Path, tmp_path: Path, shared_data: Path) -> None:
    """The package, its configs and its commands come from the venv (the README's quick starts and every docs
    example also run from it: tests/slow/test_docs.py)."""

    def python(code: str) -> str:
        return subprocess.run([installed / "python", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip

    where = python("import spanjudge.inference.backends as b; print(b.__file__)")
    assert where.startswith(str(installed.parent)) and str(REPO) not in where
    suite = python("import spanjudge.configs as c; print(c.__path__[0] + '/eval/thesis.yaml')")
    assert suite.startswith(str(installed.parent))

    assert "meta-eval" in _run(installed, tmp_path, "--help").stdout
    tasks = _run(installed, tmp_path, "tasks", "--json")
    assert tasks.returncode == 0 and any(c["tasks"] for c in json.loads(tasks.stdout)["categories"])
    prompt = _run(installed, tmp_path, "prompt", "--kind", "judge", "--task", "summeval", "--aspect", "fluency",
                  "--input", "Article=The match ended 2-2.", "--output", "A draw.")  # fmt: skip
    assert prompt.returncode == 0 and "The match ended 2-2." in prompt.stdout
    reply = "Error 1:\nLocation: a draw\nExplanation: Vague.\nSeverity: 2\n\nOverall score: 70"
    parsed = _run(installed, tmp_path, "parse", "-", "--kind", "judge", stdin=reply)
    assert parsed.returncode == 0 and json.loads(parsed.stdout)["score"] == 70

    # the suite and the metric judge come from the installed package
    meta = _run(installed, tmp_path, "meta-eval", "--suite", suite, "--data-dir", str(shared_data),
                "--dataset", "summeval", "--max-items", "8", "--judge", "metric:rouge1", "--resamples", "50",
                "--no-plots", "--out", str(tmp_path / "meta"))  # fmt: skip
    assert meta.returncode == 0, meta.stderr
    cells = json.loads((tmp_path / "meta" / "results.json").read_text())["cells"]
    assert {c["judge"] for c in cells} == {"metric:rouge1"} and any(c["value"] is not None for c in cells)


def test_a_wheel_built_from_a_checkout_holds_only_the_checkouts_files(tmp_path: Path) -> None:
    """`pip wheel .` in a git checkout: a scratch config git does not track, and a module an earlier build left in
    build/lib (deleted from the source since), stay out of the wheel."""
    from support.release import NOT_SOURCE

    source = tmp_path / "checkout"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(source)]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "snapshot"]):
        subprocess.run([*git, *step], check=True, capture_output=True, timeout=120)
    (source / "configs" / "train" / "scratch.yaml").write_text("model: {base: mine}\n")
    stale = source / "build" / "lib" / "spanjudge" / "core" / "deleted_module.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("REMOVED = True\n")
    command = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", "dist", "."]
    done = subprocess.run(command, cwd=source, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [wheel] = (source / "dist").glob("spanjudge-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "spanjudge/configs/train/smollm2_cpu_smoke.yaml" in names and "spanjudge/core/fileio.py" in names
    assert "spanjudge/configs/train/scratch.yaml" not in names and "spanjudge/core/deleted_module.py" not in names
