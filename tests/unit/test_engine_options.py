"""Options only some engines take are declared by those engines (`Engine.judge_options`): the command's help
names them from the declarations, and an engine given one it does not take refuses it in one line."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from support.faults import one_line

from spanjudge.app import cli
from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.inference.backends.registry import ENGINES
from spanjudge.inference.judge_options import ENGINE_SPECIFIC, JudgeOptions
from spanjudge.inference.judge_setup import judge_engine


def test_every_engine_specific_option_is_taken_by_an_engine_and_its_help_names_those_engines() -> None:
    declared = ENGINES.load_all()
    command = cli.load_command("score", cli.registered_commands()["score"])
    helps = {p.name: p.help or "" for p in command.params}
    for name in ENGINE_SPECIFIC:
        takers = [engine for engine, d in declared.items() if name in d.judge_options]
        assert takers, f"{name}: no engine takes it"
        assert helps[name].endswith(f"(engine {' or '.join(takers)})"), helps[name]
    assert "(engine transformers)" in helps["batch_size"] and "(engine openai or ollama)" in helps["base_url"]
    # the common options name no engine
    common = {f.name for f in dataclasses.fields(JudgeOptions)} - set(ENGINE_SPECIFIC)
    assert not any("(engine " in helps[name] for name in common if name in helps)


def test_an_engine_refuses_an_option_it_does_not_take() -> None:
    with pytest.raises(
        InputError, match=r"engine 'openai' does not take batch_size \(batch_size: engine transformers\)"
    ):
        judge_engine(JudgeOptions(engine="openai", base_url="http://127.0.0.1:9/v1", batch_size=4))
    with pytest.raises(InputError, match="engine 'transformers' does not take base_url, timeout_s"):
        judge_engine(JudgeOptions(base_url="http://127.0.0.1:9/v1", timeout_s=5))
    with pytest.raises(InputError, match="engine 'llamacpp' does not take stop_at_repeat"):
        judge_engine(JudgeOptions(engine="llamacpp", stop_at_repeat=True))
    # their defaults are not a choice: every engine takes an options object that leaves them alone
    for name in ENGINES.names():
        given = {"base_url": "http://127.0.0.1:9/v1"} if "base_url" in ENGINES.load(name).judge_options else {}
        assert judge_engine(JudgeOptions(engine=name, **given)).name == name


def test_score_says_it_in_one_line_before_reading_anything(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["score", "--model", str(tmp_path / "absent"), "--data", str(tmp_path / "absent.jsonl"),
            "--out", str(tmp_path / "scores.jsonl"), "--engine", "llamacpp", "--dtype", "float32"]  # fmt: skip
    assert cli_main(args) == 2
    assert "engine 'llamacpp' does not take dtype (dtype: engine transformers)" in one_line(capsys)
