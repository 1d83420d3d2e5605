"""`spanjudge train` configs and runs from a test."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spanjudge.app.cli import main as cli_main
from support.training_runs import SMOKE


def write_config(path: Path, **sections: dict) -> Path:
    """The smoke config with some values replaced (section -> {key: value})."""
    config = yaml.safe_load(SMOKE.read_text())
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    path.write_text(yaml.safe_dump(config))
    return path


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = cli_main(args)
    return code, capsys.readouterr().err
