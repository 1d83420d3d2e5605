"""The one registry every extension point uses (core/registry.py): built-in names, plugins that other
installed packages add through entry points, lazy imports, one-line errors."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from spanjudge.core.errors import InputError
from spanjudge.core.registry import Registry, installed_entry_points


@pytest.fixture
def plugin_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """An installed package `toyplugin` (its module and its dist-info on sys.path) that adds entries to the
    group `spanjudge.toys`: `extra` (new) and `dhp` (a name spanjudge already has)."""
    (tmp_path / "toyplugin.py").write_text("EXTRA = 'from the plugin'\nSHADOW = 'a plugin that took over dhp'\n")
    info = tmp_path / "toyplugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: toyplugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[spanjudge.toys]\nextra = toyplugin:EXTRA\ndhp = toyplugin:SHADOW\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    installed_entry_points.cache_clear()
    yield tmp_path
    installed_entry_points.cache_clear()
    sys.modules.pop("toyplugin", None)


def test_built_in_entries_load_lazily_and_an_unknown_name_is_one_line_naming_them() -> None:
    toys: Registry[str] = Registry("toy", "spanjudge.toys", {"sep": "os:sep", "join": "os.path.join"}, str)
    assert toys.names() == ("sep", "join")
    assert toys.load("sep") == __import__("os").sep
    with pytest.raises(InputError) as caught:
        toys.load("nope")
    assert str(caught.value) == "unknown toy 'nope'; choose sep or join"
    with pytest.raises(TypeError, match="not a str"):  # the interface is checked on load
        Registry("toy", "spanjudge.toys", {"path": "os:path"}, str).load("path")


def test_another_package_adds_entries_by_entry_point_and_cannot_take_over_a_built_in(plugin_package: Path) -> None:
    toys: Registry[str] = Registry("toy", "spanjudge.toys", {"dhp": "os:sep"}, str)
    assert toys.names() == ("dhp", "extra")
    assert "toyplugin" not in sys.modules  # listing the names imports nothing
    assert toys.load("extra") == "from the plugin"
    assert toys.load("dhp") == __import__("os").sep  # the built-in wins over the plugin's entry of that name


def test_every_registry_of_the_package_loads_every_entry() -> None:
    from spanjudge.eval.judging.judges import JUDGE_KINDS
    from spanjudge.eval.perturb.registry import BENCHMARKS
    from spanjudge.inference.backends.registry import ENGINES

    for registry in (ENGINES, BENCHMARKS, JUDGE_KINDS):
        loaded = registry.load_all()
        assert list(loaded) == list(registry.builtin) and all(loaded.values()), registry.what
