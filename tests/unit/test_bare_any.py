"""Parameters and returns say what they hold. (The layer contracts and the type check run once each in `make
check` and `make test`, not here: tests/support/layers.py, which also plants violations, and typecheck.py.)"""

from __future__ import annotations

import re

from support.layers import REPO, code_folders

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
