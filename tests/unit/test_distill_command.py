"""`spanjudge distill`: the study is a command whose options are the study's settings, declared once; what the
protocol refuses is one line before anything runs, and --recompute needs no model."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from support.scripts import REPO

from spanjudge.app.cli import main as cli_main
from spanjudge.app.cli import registered_commands
from spanjudge.eval.distill.cli import DistillSettings
from spanjudge.eval.distill.study import StudySettings


def test_the_command_is_registered_and_its_options_are_the_study_settings(capsys: pytest.CaptureFixture[str]) -> None:
    assert "distill" in registered_commands()
    assert cli_main(["distill", "--help"]) == 0
    shown = capsys.readouterr().out
    study = {f.name for f in dataclasses.fields(StudySettings)}
    assert study < {f.name for f in dataclasses.fields(DistillSettings)}  # declared once, on the study's settings
    for name in ("label", "train_tables", "example_weights", "recompute"):
        assert "--" + name.replace("_", "-") in shown


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ([], "give --label"),
        (["--label", "x", "--split", "tset"], "--split is one of dev, test, not 'tset'"),
        (["--label", "x", "--student", "llama"], "--student is one of smollm2, gemma3, not 'llama'"),
        (["--label", "x", "--train-tables", "0", "75"], "--train-tables and --dev-tables overlap"),
        (["--label", "x", "--example-weights", "votes"], "--example-weights is one of none, agreement"),
        (
            ["--label", "x", "--student-engine", "vllm"],
            "--student-engine is one of default, transformers, transformers-",
        ),
    ],
)
def test_what_the_protocol_refuses_is_one_line_before_anything_runs(
    options: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    work = tmp_path / "work"
    code = cli_main(["distill", *options, "--work", str(work), "--results", str(tmp_path / "results")])
    err = capsys.readouterr().err
    assert code == 2 and said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not work.exists() and not (tmp_path / "results.json").exists()


def test_recompute_refuses_what_it_cannot_recompute_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = tmp_path / "distill_quintd"
    assert cli_main(["distill", "--recompute", "--results", str(results)]) == 2
    assert "no results to recompute" in capsys.readouterr().err
    shutil.copy(REPO / "bench/results/distill_quintd.json", results.with_suffix(".json"))
    assert cli_main(["distill", "--recompute", "--results", str(results), "--only", "no-such-run"]) == 2
    err = capsys.readouterr().err
    assert "no run 'no-such-run'" in err and len(err.strip().splitlines()) == 1


def test_the_test_split_is_judged_on_the_engine_that_judged_dev(tmp_path: Path) -> None:
    from spanjudge.core.errors import InputError
    from spanjudge.eval.distill.stage import check_study

    results = tmp_path / "distill_quintd"
    settings = {"recipe": "r", "recipe_settings": {}, "student_engine": None}  # unrecorded: the student's own
    results.with_suffix(".json").write_text(json.dumps({"runs": {"r-s1": {"settings": settings, "rows": []}}}))
    check_study(StudySettings(label="r-s1", split="test"), results)
    with pytest.raises(InputError, match="dev split was judged with --student-engine default, not llamacpp"):
        check_study(StudySettings(label="r-s1", split="test", student_engine="llamacpp"), results)


def test_a_fully_fine_tuned_student_is_judged_where_a_whole_model_loads(tmp_path: Path) -> None:
    from spanjudge.core.errors import InputError
    from spanjudge.eval.distill.phases import student_weights
    from spanjudge.eval.distill.report import _tuned
    from spanjudge.eval.distill.stage import check_study

    results = tmp_path / "distill_quintd"
    check_study(StudySettings(label="full-s1", finetuning="full"), results)  # Gemma 3's own: transformers
    with pytest.raises(InputError, match="--finetuning full: the student is a whole model"):
        check_study(StudySettings(label="full-s1", finetuning="full", student="smollm2"), results)  # llama.cpp + LoRA
    with pytest.raises(InputError, match="--finetuning is one of lora, full, not 'qlora'"):
        check_study(StudySettings(label="full-s1", finetuning="qlora"), results)
    assert _tuned({"rank": 16}) == "LoRA r 16"  # a run recorded before the setting: LoRA
    assert _tuned({"rank": 16, "finetuning": "full"}) == "every weight (full fine-tuning)"
    # which file names the student (its sha256 tells a retrained student from the one that judged)
    (tmp_path / "model.safetensors").write_bytes(b"whole")
    assert student_weights(tmp_path).name == "model.safetensors"
    (tmp_path / "adapter_model.safetensors").write_bytes(b"lora")
    assert student_weights(tmp_path).name == "adapter_model.safetensors"


def test_a_served_judge_is_not_split_into_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    """--judging-workers splits an engine in this process; a served judge (the base on llamacpp-server) stays one
    judge with every core, whatever the setting."""
    from spanjudge.core.cpus import cpu_threads
    from spanjudge.eval.distill import phases
    from spanjudge.eval.distill.study import StudySettings

    given: dict = {}

    class Prepared:
        def load(self) -> str:
            return "one judge"

    def prepare(folder: Path, **options: object) -> Prepared:
        given.update(options)
        return Prepared()

    monkeypatch.setattr(phases.Judge, "prepare", prepare)
    settings = StudySettings(student="smollm2", judging_workers=2)
    make = phases.judge_maker("llamacpp-server", Path("folder"), Path("m.gguf"), None, settings, True, False)
    assert make() == "one judge"
    assert given["engine_options"]["n_threads"] == cpu_threads()
