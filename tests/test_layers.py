"""The layers are enforced: import-linter's contracts hold on the code, and fail on a planted upward
import or a planted cycle (so the check can fail at all)."""

from __future__ import annotations

from pathlib import Path

from support.layers import lint_imports, stage_package


def test_every_layer_contract_is_kept(tmp_path: Path) -> None:
    stage_package(tmp_path)
    result = lint_imports(tmp_path)
    assert result.returncode == 0, result.stdout
    assert "Contracts: 2 kept, 0 broken." in result.stdout


def test_an_upward_import_breaks_the_layers(tmp_path: Path) -> None:
    package = stage_package(tmp_path)
    errors = package / "core" / "errors.py"
    errors.write_text(errors.read_text() + "\nfrom spanjudge.app import cli  # planted: the base reaches the top\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "spanjudge.core is not allowed to import spanjudge.app" in result.stdout


def test_data_gen_and_training_stay_independent(tmp_path: Path) -> None:
    package = stage_package(tmp_path)
    data = package / "training" / "data.py"
    data.write_text(data.read_text() + "\nfrom spanjudge.data_gen import records  # planted: sibling layers\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "spanjudge.training is not allowed to import spanjudge.data_gen" in result.stdout


def test_a_cycle_between_modules_of_a_package_is_refused(tmp_path: Path) -> None:
    package = stage_package(tmp_path)
    catalog = package / "inference" / "catalog.py"
    catalog.write_text(catalog.read_text() + "\nfrom . import judge  # planted: judge imports the catalog\n")
    result = lint_imports(tmp_path)
    assert result.returncode != 0
    assert "No cycles are allowed in spanjudge.inference" in result.stdout
