"""Package discovery for spanjudge's fixed top-level layout, and a wheel of the source as it is now.

The repository's top level (configs/ core/ inference/ data_gen/ training/ eval/ publish/ app/
integrations/) installs as
sub-packages of `spanjudge`, so nothing generic ("eval", "training") lands at the top of
site-packages; spanjudge/ holds only the package's own module (the public API, `from spanjudge
import Judge`). Every sub-package under those folders is discovered here, so a new one can
never be left out of the wheel (a hand-written list once left out `inference.backends`).

What a wheel built from a checkout holds is the checkout's, nothing else:
- the configs it ships are those git tracks (a scratch YAML beside them stays out); outside git (an
  sdist, which holds only what was shipped) the patterns of CONFIG_PATTERNS;
- build/lib's copy of the package, left by an earlier build, is removed before the build, so a module
  deleted since never ships.
Everything else about the project is declared in pyproject.toml.
"""

import fnmatch
import shutil
import subprocess
from pathlib import Path

from setuptools import find_namespace_packages, find_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
CODE_FOLDERS = ("core", "inference", "data_gen", "training", "eval", "publish", "app", "integrations")
CONFIG_SUFFIXES = (".yaml", ".jinja")
MODEL_CONFIGS = "models/*/config.json"
CONFIG_PATTERNS = [f"**/*{suffix}" for suffix in CONFIG_SUFFIXES] + [MODEL_CONFIGS]


def tracked_configs() -> list[str] | None:
    """The config files git tracks, relative to configs/; None outside a git checkout."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "configs"], cwd=HERE, capture_output=True, check=True, timeout=60
        ).stdout.decode()
    except (OSError, subprocess.SubprocessError):
        return None
    names = [name.removeprefix("configs/") for name in listed.split("\0") if name]
    kept = [name for name in names if name.endswith(CONFIG_SUFFIXES) or fnmatch.fnmatch(name, MODEL_CONFIGS)]
    return kept or None


class FreshBuild(build_py):
    """build_py from an empty build/lib/spanjudge: what an earlier build left there never reaches the wheel."""

    def run(self) -> None:
        shutil.rmtree(Path(self.build_lib) / "spanjudge", ignore_errors=True)
        super().run()


package_dir = {"spanjudge": "spanjudge", "spanjudge.configs": "configs"} | {
    f"spanjudge.{folder}": folder for folder in CODE_FOLDERS
}
packages = ["spanjudge", "spanjudge.configs"] + [
    f"spanjudge.{folder}{'.' + sub if sub else ''}" for folder in CODE_FOLDERS for sub in ["", *find_packages(folder)]
]
# configs/' folders hold data, not code, but setuptools warns about any folder of a package that ships files and is
# not itself declared a package: declared (as namespace packages), they ship the same files, with no warning
packages += [f"spanjudge.configs.{sub}" for sub in sorted(find_namespace_packages("configs"))]

setup(
    package_dir=package_dir,
    packages=packages,
    package_data={"spanjudge.configs": tracked_configs() or CONFIG_PATTERNS},
    cmdclass={"build_py": FreshBuild},
)
