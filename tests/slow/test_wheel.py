"""The built wheel, installed non-editable into a fresh venv, runs real commands.

`make` installs the project editable, which would hide a package missing from the wheel (one
once shipped without `spanjudge.inference.backends` and could not score). Here the wheel is
built from a copy of the source tree, installed with `--no-deps` into a new venv, and every
command below runs from that install. The venv borrows the already-installed dependencies
(torch, transformers, …) from the test environment through a plain path entry — not its
`.pth` files, so the editable `spanjudge` is never on the path — to stay offline and cheap.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from pathlib import Path

import pytest

from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.shipped_models import smollm2_gguf

REPO = Path(__file__).resolve().parents[2]
CODE_FOLDERS = ("inference", "data_gen", "training", "eval")
NOT_SOURCE = shutil.ignore_patterns(".venv", ".git", "runs", "build", "dist", "*.egg-info", "__pycache__", "outputs")

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("wheel")
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(root), "."]
    subprocess.run(build, cwd=source, check=True, capture_output=True, timeout=300)
    return next(root.glob("spanjudge-*.whl"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin/` folder of a fresh venv with the wheel installed."""
    env_dir = tmp_path_factory.mktemp("venv")
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True
    ).stdout.strip()
    (Path(site) / "borrowed_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return env_dir / "bin"


def _run(bin_dir: Path, cwd: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    return subprocess.run(
        [str(bin_dir / "spanjudge"), *args], cwd=cwd, env=env, input=stdin, capture_output=True, text=True, timeout=600
    )


def test_the_wheel_holds_every_package_and_the_configs(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    for folder in CODE_FOLDERS:
        for init in (REPO / folder).rglob("__init__.py"):
            assert f"spanjudge/{init.relative_to(REPO).as_posix()}" in names
    shipped_configs = {n for n in names if n.startswith("spanjudge/configs/")}
    for pattern in ("*.yaml", "*.jinja", "config.json"):  # config.json: the architectures a --plan needs offline
        for config in (REPO / "configs").rglob(pattern):
            assert f"spanjudge/{config.relative_to(REPO).as_posix()}" in shipped_configs


def test_commands_run_from_the_installed_wheel(installed: Path, tmp_path: Path, shared_data: Path) -> None:
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

    # a real model on the transformers engine: every item comes back scored or with its reason
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "The cat sat on the mat.", "summary": "A dog sat."}) + "\n")
    out = tmp_path / "scores.jsonl"
    score = _run(installed, tmp_path, "score", "--model", str(convert_gguf(smollm2_gguf())), "--data", str(data),
                 "--task", "qags_xsum", "--aspect", "factual consistency", "--input", "Article=article",
                 "--output-field", "summary", "--max-new-tokens", "24", "--out", str(out))  # fmt: skip
    assert score.returncode == 0, score.stderr
    row = json.loads(out.read_text())
    assert row["id"] == "a" and (row["evaluation"]["score"] is None) == bool(row["unscored_reason"])

    # the suite and the metric judge come from the installed package
    meta = _run(installed, tmp_path, "meta-eval", "--suite", suite, "--data-dir", str(shared_data),
                "--dataset", "summeval", "--max-items", "8", "--judge", "metric:rouge1", "--resamples", "50",
                "--no-plots", "--out", str(tmp_path / "meta"))  # fmt: skip
    assert meta.returncode == 0, meta.stderr
    cells = json.loads((tmp_path / "meta" / "results.json").read_text())["cells"]
    assert {c["judge"] for c in cells} == {"metric:rouge1"} and any(c["value"] is not None for c in cells)
