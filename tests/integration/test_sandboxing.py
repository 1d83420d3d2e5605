"""Nothing executed, nothing smuggled: generate's templates cannot reach Python, publish uploads regular files inside
the project only, and a pickled adapter is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from support.faults import ASPECT, TASK, items, one_line, tiny_adapter

from spanjudge.app.cli import main as cli_main


def test_generate_templates_cannot_reach_python(tmp_path: Path) -> None:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.core.errors import ConfigError
    from spanjudge.data_gen.generate_config import TemplateSpec
    from spanjudge.data_gen.generate_prompts import Template, render_prompt

    task = load_catalog().task("summeval")
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }} {{ article }}"
    spec = TemplateSpec.model_validate({"chat": hostile, "tasks": ["summeval"]})
    with pytest.raises(ConfigError, match=r"systems\.yaml: templates\.evil: the template is refused by the sandbox"):
        render_prompt(Template("evil", spec, tmp_path / "systems.yaml"), task, {"Article": "A text."}, "chat")
    fine = TemplateSpec.model_validate({"chat": "Summarise: {{ article }}", "tasks": ["summeval"]})
    assert render_prompt(Template("ok", fine, tmp_path / "s.yaml"), task, {"Article": "A text."}, "chat").endswith(
        "A text."
    )


def test_publish_refuses_hard_links_and_files_that_are_not_what_they_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    adapter = tiny_adapter(run / "adapter")
    secret = tmp_path / "secret.txt"
    secret.write_text('{"token": "not for the hub"}')
    os.link(secret, adapter / "tokenizer.json")
    args = ["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", str(tmp_path / "staged")]
    assert cli_main(args) == 2
    assert "hard links" in one_line(capsys)
    (adapter / "tokenizer.json").unlink()
    (adapter / "tokenizer.json").write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert cli_main(args) == 2
    assert "tokenizer.json: not valid JSON" in one_line(capsys)
    assert not (tmp_path / "staged").exists()


def test_publish_accepts_relative_paths_inside_the_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = Path("runs/smoke")
    tiny_adapter(run / "adapter")
    (run / "train_config.yaml").write_text(yaml.safe_dump({"training": {"output_dir": "runs/smoke"}}))
    code = cli_main(["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", "staged"])
    assert code == 0, capsys.readouterr().err
    assert "output_dir: runs/smoke" in (tmp_path / "staged" / "train_config.yaml").read_text()


def test_a_pickled_adapter_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adapter = tiny_adapter(tmp_path / "adapter", pickle_only=True)
    data = items(tmp_path / "items.jsonl", 1)
    out = tmp_path / "s.jsonl"
    code = cli_main(["score", "--model", str(adapter), "--data", str(data), "--out", str(out), "--task", TASK,
                     "--aspect", ASPECT, "--input", "Article=article", "--output-field", "summary"])  # fmt: skip
    line = one_line(capsys)
    assert code == 2 and "only safetensors adapters" in line and "weights_only" not in line, line
