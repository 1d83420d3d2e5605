"""The release as a user gets it: the sdist and the wheel `python -m build` makes from a copy of the
source tree (the wheel built from the sdist, as PyPI users' installers would), and a fresh venv with the
wheel installed, not editable.

The venv borrows the already-installed dependencies (torch, transformers, ...) from the test environment
through a plain path entry, not its `.pth` files, so the editable `spanjudge` of the checkout is never on
the path; that keeps the install offline and cheap. tests/slow/test_wheel.py checks the build, and
tests/slow/test_docs.py runs the README's quick starts and every docs example from this install.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import venv
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NOT_SOURCE = shutil.ignore_patterns(
    ".venv", ".git", "runs", "build", "dist", "site", "*.egg-info", "__pycache__", "outputs", ".*_cache", ".hypothesis"
)


@dataclass(frozen=True)
class Release:
    sdist: Path
    wheel: Path
    log: str  # what `python -m build` printed


def build_release(root: Path) -> Release:
    """`python -m build` (sdist, then the wheel from it) on a copy of the source tree, into `root/dist`."""
    source = root / "source"
    shutil.copytree(REPO, source, ignore=NOT_SOURCE)
    dist = root / "dist"
    command = [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise AssertionError(f"python -m build failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    [sdist], [wheel] = sorted(dist.glob("spanjudge-*.tar.gz")), sorted(dist.glob("spanjudge-*.whl"))
    return Release(sdist, wheel, done.stdout + done.stderr)


def install_wheel(wheel: Path, env_dir: Path) -> Path:
    """A fresh venv at `env_dir` with `wheel` installed (no dependencies: borrowed, see the module); its bin/."""
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True, timeout=300)
    site = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], capture_output=True, text=True
    ).stdout.strip()
    (Path(site) / "borrowed_dependencies.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return env_dir / "bin"
