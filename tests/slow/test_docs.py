"""The documentation as a newcomer meets it: the site builds offline with warnings as errors,
its command-line reference is generated from the commands, and the README's quick starts and
every runnable example of the docs run as written, in reading order, from the installed wheel in an
empty folder outside the checkout (the shared data given by $SPANJUDGE_DATA), with the results they
promise: a `configs/...` name there is the config the wheel ships."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spanjudge.app.cli import registered_commands
from tests.support.browser import opened
from tests.support.docs_examples import REPO, pages_in_reading_order, reader_env, run_page

MKDOCS_ENV = {"DISABLE_MKDOCS_2_WARNING": "true", "NO_MKDOCS_2_WARNING": "1"}  # the plugins' banner, not ours


@pytest.mark.slow
def test_the_site_builds_offline_with_warnings_as_errors(tmp_path: Path) -> None:
    site = tmp_path / "site"
    build = subprocess.run(
        [str(Path(sys.executable).with_name("mkdocs")), "build", "--strict", "--site-dir", str(site)],
        cwd=REPO,
        env={**os.environ, **MKDOCS_ENV, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stderr[-4000:]
    cli = (site / "reference" / "cli.html").read_text(encoding="utf-8")
    for command in registered_commands():  # generated from the commands: every one, with its options
        assert f"spanjudge {command}</code>" in cli, command
    assert "--probabilities" in cli and "--reuse-prefix" in cli
    api = (site / "reference" / "api.html").read_text(encoding="utf-8")
    assert "predict" in api and "system_score" in api and "from_pretrained" in api
    assert (site / "research" / "distillation.html").is_file() and (site / "howto" / "extend.html").is_file()
    # the built site reads from disk with no network: no font service, no request, no console error
    for page in ("index.html", "reference/api.html", "guide/score.html"):
        with opened(site / page) as shown:
            assert shown.network == [] and shown.console_errors == [], page


@pytest.mark.slow
def test_the_quick_starts_and_every_runnable_example_run_as_written(
    tmp_path: Path, shared_data: Path, installed: Path
) -> None:
    """From the release's wheel installed in a fresh venv (`installed`, tests/support/release.py), as a user
    who ran `pip install spanjudge` would: the `spanjudge` command and the Python of that venv, in a folder
    with no configs/ of its own."""
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = reader_env(shared_data, installed)
    python = str(installed / "python")
    printed = {
        page.relative_to(REPO).as_posix(): run_page(page, work, env, interpreter=python)
        for page in pages_in_reading_order()
    }

    quickstart = work / "runs" / "quickstart"
    # train: GPT-4's spans imported, a LoRA adapter trained on them
    teacher = json.loads((quickstart / "teacher" / "run.json").read_text())
    assert teacher["records"] == teacher["train"] + teacher["validation"] > 300
    assert (quickstart / "judge" / "adapter" / "adapter_model.safetensors").is_file()
    # score: in Python and on the command line, with the page beside the results
    predicted = json.loads((quickstart / "predictions.json").read_text())
    assert len(predicted["items"]) == 1 and predicted["unscored"] + (predicted["system_score"] is not None) == 1
    [row] = [json.loads(line) for line in (quickstart / "scores.jsonl").read_text().splitlines()]
    assert row["id"] == "a" and row["task"] == "qags_xsum" and row["output"] == "The match ended 3-1."
    assert (quickstart / "scores.html").is_file()
    # meta-evaluate: the judge and BLEU correlated on the sample
    results = json.loads((quickstart / "meta_eval" / "results.json").read_text())
    assert any(j.startswith("distilled:") for j in results["judges"]) and "metric:bleu" in results["judges"]
    assert results["cells"]
    assert (quickstart / "meta_eval" / "report.md").is_file()
    # the docs' own examples: the publish dry runs staged what they promise, nothing more
    assert (quickstart / "staged" / "adapter_model.safetensors").is_file()
    assert (quickstart / "staged-data" / "README.md").is_file()
    # the judge as TRL's reward: 2 GRPO steps, each with its completions' rewards and errors in the log
    steps = [line for line in printed["docs/howto/trl.md"][-1].splitlines() if line.startswith("step ")]
    assert [line.split(":")[0] for line in steps] == ["step 1", "step 2"], printed["docs/howto/trl.md"][-1][-2000:]
    spreads = [line.split("± ")[1].split(",")[0] for line in steps]
    assert any(spread not in ("n/a", "0.000") for spread in spreads)  # a step's two completions: different rewards
    assert any("errors n/a" not in line for line in steps)  # the judge's errors reached the log
