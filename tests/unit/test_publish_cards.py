"""The cards are rendered from the Jinja templates under configs/cards/ (publish/markdown.py):
they ship with the configs, and a value the code forgets to hand over is an error, not a blank."""

from __future__ import annotations

from pathlib import Path

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


@pytest.mark.parametrize("field", ["value", "ci_high"])
def test_a_correlation_outside_minus_one_to_one_is_refused_in_one_line(tmp_path: Path, field: str) -> None:
    import json

    from spanjudge.core.errors import InputError
    from spanjudge.publish.results import read_eval_results

    row = {"dataset": "summeval", "aspect": "coherence", "coefficient": "kendall", "value": 0.41, "ci_high": 0.45}
    path = tmp_path / "results.json"
    path.write_text(json.dumps([row, {**row, "aspect": "fluency", field: 1e300}]))
    with pytest.raises(InputError, match=rf"result row 2 \(summeval\): {field} 1e\+300 is no kendall correlation"):
        read_eval_results(path)


def test_a_hub_dataset_named_twice_is_refused() -> None:
    from spanjudge.core.errors import InputError
    from spanjudge.publish.eval_results import hub_datasets

    assert len(hub_datasets(["summeval=me/summeval", "summeval=me/summeval"])) == 1  # the same twice: harmless
    with pytest.raises(InputError, match="--hub-dataset summeval is given twice, as 'me/summeval' and 'me/other'"):
        hub_datasets(["summeval=me/summeval", "summeval=me/other"])
