"""The layers are enforced: import-linter's contracts hold on the code, and fail on a planted upward
import, a planted import between the independent stages, or a planted cycle (so the check can fail)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.layers import REPO, code_folders, lint_imports, stage_package


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


BARE_ANY = re.compile(r":\s*Any\b|->\s*Any\b")  # a parameter, attribute or return typed as bare Any
BARE_ANY_BEFORE = 189  # in the package when the type check came (#47); the goal was half of it


def test_bare_any_stays_below_half_of_what_it_was() -> None:
    """Parameters and returns say what they hold: `: Any` / `-> Any` in the installed package at most half of
    what it was (a JSON value is `object` or `core.jsonl.JSONValue`, a library's object its class under
    TYPE_CHECKING); `dict[str, Any]` and the like are not bare."""
    found = [
        f"{path.relative_to(REPO)}:{number}"
        for folder in code_folders()
        for path in sorted((REPO / folder).rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        for _ in BARE_ANY.finditer(line)
    ]
    assert BARE_ANY.findall("def f(x: Any, **kw: Any) -> Any: y: dict[str, Any]") == [": Any", ": Any", "-> Any"]
    assert len(found) <= BARE_ANY_BEFORE // 2, "\n".join(found)
