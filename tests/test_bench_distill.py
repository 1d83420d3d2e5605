"""bench/distill_quintd.py: a finished phase is reused only for the same settings, and recipes are
compared by their mean over training seeds; bench/count_decisions.py's expected count (no model
runs: the guards and the reports' arithmetic)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]


def _bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return _bench_module("distill_quintd")


def test_a_finished_import_is_reused_only_for_the_same_settings(bench: ModuleType, tmp_path: Path) -> None:
    # the first run wrote its config and finished; the same settings reuse it without running anything
    config = yaml.safe_load(bench.IMPORT_CONFIG.read_text())
    config["source"].update(domains=["wikidata"], table_range=[0, 80])
    (tmp_path / "teacher.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "teacher").mkdir()
    (tmp_path / "teacher" / "run.json").write_text(json.dumps({"train": 304, "validation": 16}))
    assert bench._import(tmp_path, "teacher", bench.IMPORT_CONFIG, ["wikidata"], (0, 80))["train"] == 304
    # other tables under the same folder: refused, naming the folder, instead of reusing the wrong records
    with pytest.raises(SystemExit, match="imported with other settings"):
        bench._import(tmp_path, "teacher", bench.IMPORT_CONFIG, ["wikidata"], (0, 40))


def test_a_finished_student_differs_by_the_settings_it_was_trained_with(bench: ModuleType) -> None:
    saved = {"training": {"seed": 42, "output_dir": "/runs/a/student"}, "lora": {"r": 16}}
    same = {"training.seed": 42, "training.output_dir": Path("/runs/a/student"), "lora.r": 16}
    assert bench._differing(same, saved) == []  # paths compare as the saved YAML's text
    differ = bench._differing({**same, "training.seed": 2, "training.decision_weight": 10.0}, saved)
    assert differ == ["training.seed 42, not 2", "training.decision_weight None, not 10.0"]


def _run(settings: dict[str, Any], student: dict[str, Any], teacher: dict[str, Any] | None = None) -> dict[str, Any]:
    base = {"student_model": "gemma3", "lr": 0.0005, "rank": 16, "batch": 4, "train": {"steps": 76}}
    rows = [{"judge": "student", **student}] + ([{"judge": "teacher", **teacher}] if teacher else [])
    return {"settings": {**base, **settings}, "rows": rows}


def test_recipes_are_compared_by_their_mean_over_seeds(bench: ModuleType) -> None:
    teacher = {"overlap_f1": 0.6, "token_f1": 0.6, "count_pearson": 0.4, "token_pearson": 0.5}
    draw = {"overlap_f1": 0.4, "token_f1": 0.4, "count_pearson": 0.3, "token_pearson": 0.1, "no_error_outputs": 0}
    runs = {
        "default": _run({"train_seed": 42}, draw, teacher),
        "seed1": _run({"train_seed": 1}, {**draw, "token_pearson": 0.3, "no_error_outputs": 50}),
        "lr": _run({"lr": 0.0002}, draw),  # one draw of another recipe: no mean to show
    }
    lines = bench.seeds_table(runs)
    recipes = [line for line in lines if line.startswith("| default")]
    assert len(recipes) == 1 and not any(line.startswith("| lr") for line in lines)
    cells = [cell.strip() for cell in recipes[0].strip("|").split("|")]
    assert cells[1] == "42, 1"
    assert cells[2] == "25 [0, 50]"
    assert cells[3] == "**0.400 [0.400, 0.400]**"  # at least half of the teacher's 0.6
    assert cells[6] == "0.200 [0.100, 0.300]"  # the mean 0.2 stays under half of 0.5: not bold
    # with a single draw per recipe there is no table at all
    assert bench.seeds_table({"default": runs["default"]}) == []


def test_the_expected_count_goes_on_with_each_decisions_probability() -> None:
    expected_count = _bench_module("count_decisions").expected_count
    assert expected_count([]) == 0.0
    assert expected_count([0.0]) == 0.0  # 'No Error' for sure
    assert expected_count([1.0, 1.0, 0.0]) == 2.0  # two errors for sure, then the score
    assert expected_count([0.5, 0.5]) == pytest.approx(0.5 + 0.25)
