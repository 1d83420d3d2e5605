"""Commands register themselves (issue #16 item 6): each stage's commands are entry points of
`spanjudge.commands`, read by the root through importlib.metadata, and a command's module is
imported only when that command runs or its help is shown."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

from spanjudge.app import cli
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.options import unwrapped

EXPECTED = {
    "tasks", "prompt", "parse", "generate", "annotate", "import", "merge", "train", "score", "render", "select",
    "export", "meta-eval", "compare", "perturb", "distill", "publish", "demo",
}  # fmt: skip


def test_every_registered_command_resolves_with_its_own_help() -> None:
    registered = cli.registered_commands()
    assert set(registered) == EXPECTED
    for name, entry in registered.items():
        command = cli.load_command(name, entry)
        assert callable(getattr(command, "main", None)) and command.name == name  # a click-style command
        assert (command.help or "").strip(), f"{name} ({entry.value}) has no help"


def test_a_commands_help_paragraphs_are_one_line_each_for_the_terminal_to_wrap() -> None:
    """Docstrings are wrapped at the source's width; typer keeps the line breaks of every paragraph after the
    first, so each paragraph is joined (lists and indented examples keep their lines)."""
    for name, entry in cli.registered_commands().items():
        help_text = cli.load_command(name, entry).help or ""
        for paragraph in help_text.split("\n\n"):
            lines = paragraph.splitlines()
            assert len(lines) == 1 or any(line.startswith(("- ", "* ", " ", "|")) for line in lines), (name, lines)
    assert unwrapped("A\nb.\n\n- one\n- two\n\n    code\n    more") == "A b.\n\n- one\n- two\n\n    code\n    more"


def test_every_command_takes_its_options_from_one_settings_dataclass() -> None:
    """Options are declared once (`core.options`): every command is made by `settings_command` from a
    dataclass whose fields each carry their help, and its parameters are exactly those fields."""
    import dataclasses

    for name, entry in cli.registered_commands().items():
        command = cli.load_command(name, entry)
        settings = getattr(command.callback, "__settings__", None)
        assert settings is not None and dataclasses.is_dataclass(settings), f"{name}: options not from a dataclass"
        fields = {f.name for f in dataclasses.fields(settings) if f.metadata.get("cli", True)}
        assert all("help" in f.metadata for f in dataclasses.fields(settings)), name
        assert {p.name for p in command.params if p.name != "help"} == fields, name


def test_an_option_on_by_default_can_be_turned_off() -> None:
    """A bool setting whose default is True takes its --no- form (`spanjudge distill --no-base`), and one off by
    default stays a plain flag."""
    import dataclasses

    import typer
    from typer.testing import CliRunner

    from spanjudge.core.options import option, settings_command

    @dataclasses.dataclass
    class Toggles:
        base: bool = option(True, help="on by default")
        gamma: bool = option(False, help="off by default")

    app = typer.Typer()
    seen: list[Toggles] = []
    settings_command(app, Toggles, seen.append, help="toggles")
    runner = CliRunner()
    for args, expected in (([], (True, False)), (["--no-base", "--gamma"], (False, True)), (["--base"], (True, False))):
        assert runner.invoke(app, args).exit_code == 0, args
        assert (seen[-1].base, seen[-1].gamma) == expected, args
    assert runner.invoke(app, ["--no-gamma"]).exit_code != 0


def test_the_base_layer_names_no_later_stage() -> None:
    source = Path(cli.__file__).read_text(encoding="utf-8")
    for stage in ("data_gen", "training", "eval", "publish_cli"):
        assert f"spanjudge.{stage}" not in source and f".{stage}." not in source


def test_running_a_command_imports_only_its_own_module() -> None:
    code = (
        "import sys\n"
        "from spanjudge.app.cli import main\n"
        "main(['tasks', '--json'])\n"
        "later = sorted(m for m in sys.modules if m.split('.')[:2] in "
        "(['spanjudge', 'data_gen'], ['spanjudge', 'training'], ['spanjudge', 'eval'], ['spanjudge', 'publish']))\n"
        "print('LATER', later, file=sys.stderr)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "LATER []" in result.stderr


def test_missing_entry_points_are_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(cli, "COMMAND_GROUP", "spanjudge.no-such-group")  # as in a checkout never installed
    assert cli.main(["--help"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "no spanjudge commands are registered" in lines[0] and "pip install -e ." in lines[0]


def test_a_stale_entry_point_names_itself() -> None:
    stale = EntryPoint(name="gone", value="spanjudge.inference.nowhere:gone", group=cli.COMMAND_GROUP)
    with pytest.raises(SpanjudgeError, match=r"command 'gone' is registered as spanjudge\.inference\.nowhere:gone"):
        cli.load_command("gone", stale)


def test_a_stale_egg_info_in_the_working_directory_hides_no_command(tmp_path: Path) -> None:
    # a build's leftover from before the commands were entry points, first on sys.path for `python -m`
    stale = tmp_path / "spanjudge.egg-info"
    stale.mkdir()
    (stale / "PKG-INFO").write_text("Metadata-Version: 2.1\nName: spanjudge\nVersion: 0.0.1\n")
    (stale / "entry_points.txt").write_text("[console_scripts]\nspanjudge = spanjudge.app.cli:main\n")
    code = "import sys\nfrom spanjudge.app.cli import main\nsys.exit(main(['--help']))\n"
    env = {**os.environ, "COLUMNS": "200"}
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env
    )
    assert result.returncode == 0, result.stderr
    assert "annotate" in result.stdout and "meta-eval" in result.stdout
