"""Package discovery for spanjudge's fixed top-level layout.

The repository's top level (configs/ core/ inference/ data_gen/ training/ eval/ publish/ app/
integrations/) installs as
sub-packages of `spanjudge`, so nothing generic ("eval", "training") lands at the top of
site-packages; spanjudge/ holds only the package's own module (the public API, `from spanjudge
import Judge`). Every sub-package under those folders is discovered here, so a new one can
never be left out of the wheel (a hand-written list once left out `inference.backends`).
Everything else about the project is declared in pyproject.toml.
"""

from setuptools import find_packages, setup

CODE_FOLDERS = ("core", "inference", "data_gen", "training", "eval", "publish", "app", "integrations")

package_dir = {"spanjudge": "spanjudge", "spanjudge.configs": "configs"} | {
    f"spanjudge.{folder}": folder for folder in CODE_FOLDERS
}
packages = ["spanjudge", "spanjudge.configs"] + [
    f"spanjudge.{folder}{'.' + sub if sub else ''}" for folder in CODE_FOLDERS for sub in ["", *find_packages(folder)]
]

setup(package_dir=package_dir, packages=packages)
