"""The layers are enforced: import-linter's contracts hold on the code, and fail on a planted upward
import, a planted import between the independent stages, or a planted cycle (so the check can fail)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.layers import lint_imports, stage_package


def test_every_layer_contract_is_kept(tmp_path: Path) -> None:
    stage_package(tmp_path)
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "Contracts: 2 kept, 0 broken." in result.stdout


@pytest.mark.parametrize(
    ("module", "planted", "broken"),
    [
        # the base reaches the top
        ("core/errors.py", "from spanjudge.app import cli", "spanjudge.core is not allowed to import spanjudge.app"),
        # sibling layers
        (
            "training/data.py",
            "from spanjudge.data_gen import records",
            "spanjudge.training is not allowed to import spanjudge.data_gen",
        ),
        # the judge imports the prompts, and now the prompts the judge
        ("inference/prompts.py", "from . import judge", "No cycles are allowed in spanjudge.inference"),
    ],
)
def test_a_planted_import_breaks_a_contract(tmp_path: Path, module: str, planted: str, broken: str) -> None:
    path = stage_package(tmp_path) / module
    path.write_text(path.read_text() + f"\n{planted}  # planted\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert broken in result.stdout


def test_the_checked_modules_type_check() -> None:
    """`make check`'s type check (tests/support/typecheck.py): the base layer, the contract, the engines and
    the judge's public API, under [tool.mypy]."""
    from support.typecheck import CHECKED, main

    assert "core" in CHECKED and "inference/backends" in CHECKED
    assert main() == 0
