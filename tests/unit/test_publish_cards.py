"""The cards are rendered from the Jinja templates under configs/cards/ (publish/markdown.py):
they ship with the configs, and a value the code forgets to hand over is an error, not a blank."""

from __future__ import annotations

import jinja2
import pytest

from spanjudge.core.configio import configs_dir
from spanjudge.publish.markdown import fence, render, table


def test_the_card_templates_ship_and_refuse_a_missing_value() -> None:
    for name in ("model.jinja", "dataset.jinja"):
        assert (configs_dir() / "cards" / name).is_file(), name
        with pytest.raises(jinja2.UndefinedError):
            render(name, metadata="license: other")


def test_markdown_helpers_keep_tables_and_fences_intact() -> None:
    assert table(("a", "b"), [("x|y", None), (0.123456, 3)]) == "| a | b |\n|---|---|\n| x\\|y | – |\n| 0.1235 | 3 |"
    assert fence("key: 1\n", "yaml") == "```yaml\nkey: 1\n```"
    assert fence("note: ``` inside").startswith("````\n")  # a fence in the text cannot close the block
