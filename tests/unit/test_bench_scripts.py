"""Every benchmark script still imports: they run by hand (`bench/`), so nothing else would notice
a helper that moved (the test helpers moved to tests/support once and four scripts broke silently)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(path for path in (REPO / "bench").rglob("*.py") if path.name != "__init__.py")


@pytest.mark.parametrize("script", SCRIPTS, ids=[str(p.relative_to(REPO / "bench")) for p in SCRIPTS])
def test_the_benchmark_script_imports(script: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(script.parent))  # as `python bench/X.py` runs it: its folder first
    spec = importlib.util.spec_from_file_location(f"bench_{script.stem}", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)
    spec.loader.exec_module(module)  # runs its imports; `main()` waits for __main__
    if 'if __name__ == "__main__":' in script.read_text(encoding="utf-8"):  # a script, not a helper
        assert callable(getattr(module, "main", None)), f"{script.name} has no main()"
