"""The distillation study (`spanjudge.eval.distill`, driven by bench/distill_quintd.py): a finished phase is
reused only for the same settings, recipes are compared by their mean over training seeds, and the committed
report is what its rows give; bench/count_decisions.py's expected count (no model runs: the guards and the
reports' arithmetic)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import yaml
from support.scripts import REPO, load_script

from spanjudge.core.errors import InputError


def _bench_module(name: str) -> ModuleType:
    return load_script(f"bench/{name}.py")


@pytest.fixture(scope="module")
def bench() -> SimpleNamespace:
    """The study's stage API, every module's names in one namespace."""
    from spanjudge.eval.distill import phases, report, study

    names = {name: value for module in (study, report, phases) for name, value in vars(module).items()}
    return SimpleNamespace(**{name: value for name, value in names.items() if not name.startswith("__")})


def test_the_committed_report_is_what_its_committed_rows_give(bench: SimpleNamespace) -> None:
    """bench/results/distill_quintd.md and the recipes of .json are recomputed from the rows alone: the study's
    report functions moved into the package unchanged."""
    results = json.loads((REPO / "bench/results/distill_quintd.json").read_text())
    assert bench.recipes(results["runs"]) == results["recipes"]
    assert bench.dev_choice(results["runs"]) == results["choice"]
    assert bench.bar_checks(results["recipes"], results["choice"]) == results["bar"]
    assert bench.markdown(results["runs"]) == (REPO / "bench/results/distill_quintd.md").read_text()


def test_a_mean_over_seeds_is_rounded_once_in_a_table() -> None:
    """0.338456 is 0.338 to 3 places; rounded to 4 first (0.3385) it would show as 0.339."""
    from spanjudge.eval.distill.choice import seed_stats, spread

    assert spread(seed_stats([0.338456])) == "0.338 [0.338, 0.338]"
    assert spread(seed_stats([0.3, None])) == "–"


def test_the_driver_stays_a_thin_script_over_the_stage_api() -> None:
    driver = (REPO / "bench" / "distill_quintd.py").read_text()
    assert len(driver.splitlines()) <= 200 and "from spanjudge.eval.distill" in driver


def test_the_benchmark_trains_the_student_dev_chose_each_at_its_own_device_batch(bench: SimpleNamespace) -> None:
    """Dev chose Gemma 3 (issue #49), so the driver trains it unless told otherwise, one example a forward pass
    (its vocabulary's logits); SmolLM2 keeps four. --device-batch overrides both, never above the batch."""
    gemma, smollm2 = bench.StudySettings(label="x"), bench.StudySettings(label="x", student="smollm2")
    assert (gemma.student, bench.per_device_batch(gemma)) == ("gemma3", 1)
    assert bench.per_device_batch(smollm2) == 4
    assert bench.per_device_batch(bench.StudySettings(label="x", device_batch=2)) == 2
    assert bench.per_device_batch(bench.StudySettings(label="x", student="smollm2", batch=2)) == 2


def test_a_finished_import_is_reused_only_for_the_same_settings(bench: SimpleNamespace, tmp_path: Path) -> None:
    # the first run wrote its config and finished; the same settings reuse it without running anything
    config = yaml.safe_load(bench.IMPORT_CONFIG.read_text())
    config["source"].update(domains=["wikidata"], table_range=[0, 80])
    (tmp_path / "teacher.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (tmp_path / "teacher").mkdir()
    (tmp_path / "teacher" / "run.json").write_text(json.dumps({"train": 304, "validation": 16}))
    assert bench.import_quintd(tmp_path, "teacher", bench.IMPORT_CONFIG, ["wikidata"], (0, 80)).train == 304
    # other tables under the same folder: refused, naming the folder, instead of reusing the wrong records
    with pytest.raises(InputError, match="imported with other settings"):
        bench.import_quintd(tmp_path, "teacher", bench.IMPORT_CONFIG, ["wikidata"], (0, 40))


def test_a_finished_student_differs_by_the_settings_it_was_trained_with(bench: SimpleNamespace) -> None:
    saved = {"training": {"seed": 42, "output_dir": "/runs/a/student"}, "lora": {"r": 16}}
    same = {"training.seed": 42, "training.output_dir": Path("/runs/a/student"), "lora.r": 16}
    assert bench._differing(same, saved) == []  # paths compare as the saved YAML's text
    differ = bench._differing({**same, "training.seed": 2, "training.decision_weight": 10.0}, saved)
    assert differ == ["training.seed 42, not 2", "training.decision_weight 1.0, not 10.0"]
    # a key added to the config after a run was trained compares as its default, which that run trained with
    assert bench._differing({**same, "data.example_weights": "none"}, saved) == []
    assert bench._differing({**same, "data.example_weights": "agreement"}, saved) == [
        "data.example_weights 'none', not 'agreement'"
    ]


def test_a_finished_student_is_recorded_with_the_precision_it_trained_in(
    bench: SimpleNamespace, tmp_path: Path
) -> None:
    """The same recipe and seed give another adapter on a CPU without native bf16 (float32, no autocast) than on one
    with it (bf16 autocast): the run's record says which."""
    run_dir = tmp_path / "student"
    (run_dir / "adapter").mkdir(parents=True)
    (run_dir / "adapter" / bench.ADAPTER_WEIGHTS).write_bytes(b"weights")
    sets = {"training.seed": 1, "lora.r": 16}
    (run_dir / "train_config.yaml").write_text(yaml.safe_dump({"training": {"seed": 1}, "lora": {"r": 16}}))
    precision = {"dtype": "float32", "mixed_precision": "no", "why": "precision: float32 (no autocast) on a CPU ..."}
    metrics = {
        "train_loss": 0.67,
        "eval_loss": 0.51,
        "tokens_per_second": 113.7,
        "step_times": [1.0],
        "precision": precision,
    }
    (run_dir / "metrics.json").write_text(json.dumps(metrics))
    recorded = bench.train(run_dir, sets, tmp_path)
    assert recorded == {
        "wall_s": None, "train_loss": 0.67, "eval_loss": 0.51, "tokens_per_second": 113.7, "precision": precision,
        "adapter_sha256": hashlib.sha256(b"weights").hexdigest(),
    }  # fmt: skip


def test_a_student_trained_again_judges_test_only_if_it_is_the_one_dev_judged(
    bench: SimpleNamespace, tmp_path: Path
) -> None:
    """runs/ is lost with the machine, so a test run may retrain its student: the same adapter bytes (or, for a run
    recorded before adapters were hashed, the same losses) are the same student; another one cannot take the dev
    thresholds fitted on the recorded student's judgments."""
    run_dir = tmp_path / "student"
    (run_dir / "adapter").mkdir(parents=True)
    (run_dir / "adapter" / "adapter_model.safetensors").write_bytes(b"weights")
    (run_dir / "train_config.yaml").write_text(yaml.safe_dump({"training": {"seed": 1}}))
    (run_dir / "metrics.json").write_text(json.dumps({"train_loss": 0.81, "eval_loss": 0.567}))
    trained = bench.train(run_dir, {"training.seed": 1}, tmp_path)  # finished: reused, and fingerprinted
    assert trained["adapter_sha256"] == hashlib.sha256(b"weights").hexdigest()
    runs = {"s1": {"settings": {"train": dict(trained)}}}
    assert bench.another_student("s1", trained, "test", runs) is None
    assert bench.another_student("s2", trained, "test", runs) is None  # nothing recorded to compare

    other = {**trained, "adapter_sha256": hashlib.sha256(b"other weights").hexdigest()}
    refused = bench.another_student("s1", other, "test", runs)
    assert refused is not None and "s1" in refused and "judge the dev split with it first" in refused
    assert "replaced" in bench.another_student("s1", other, "dev", runs)  # dev: its rows replace the recorded ones

    old = {"s1": {"settings": {"train": {"train_loss": 0.81, "eval_loss": 0.567}}}}  # before adapters were hashed
    assert bench.another_student("s1", trained, "test", old) is None
    assert "eval loss 0.561" in bench.another_student("s1", {**trained, "eval_loss": 0.561}, "test", old)


def _run(settings: dict[str, Any], student: dict[str, Any], teacher: dict[str, Any] | None = None) -> dict[str, Any]:
    base = {"student_model": "gemma3", "lr": 0.0005, "rank": 16, "batch": 4, "train": {"steps": 76}}
    rows = [{"judge": "student", **student}] + ([{"judge": "teacher", **teacher}] if teacher else [])
    return {"settings": {**base, **settings}, "rows": rows}


def test_recipes_are_compared_by_their_mean_over_seeds(bench: SimpleNamespace) -> None:
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


def _args(bench: SimpleNamespace, **changes: Any) -> Any:
    import argparse

    defaults = {
        "domains": ["wikidata"], "extra_domains": [], "extra_tables": (0, 20), "train_tables": (0, 70),
        "dev_tables": (70, 80), "test_tables": (80, 100), "eval_domains": ["wikidata", "ice_hockey", "owid"],
        "split": "dev",
    }  # fmt: skip
    return argparse.Namespace(**{**defaults, **changes})


def test_the_protocols_splits_never_share_an_input(bench: SimpleNamespace) -> None:
    assert bench.leak(_args(bench)) is None
    assert bench.held_out_tables(_args(bench)) == (70, 80)
    assert bench.held_out_tables(_args(bench, split="test")) == (80, 100)
    assert "--dev-tables and --test-tables overlap" in bench.leak(_args(bench, dev_tables=(70, 90)))
    assert "--train-tables and --dev-tables" in bench.leak(_args(bench, train_tables=(0, 75)))
    # a domain trained on only as extra data still counts: its held-out tables must be unseen too
    extra = _args(bench, extra_domains=["owid"], extra_tables=(0, 85))
    assert "--extra-tables and --dev-tables" in bench.leak(extra)
    # tables trained on in a domain that is not judged share no input with the held-out ones
    assert bench.leak(_args(bench, train_tables=(0, 100), eval_domains=["owid"])) is None


def _protocol_run(seed: int, student: dict[str, Any], recipe: str = "r") -> dict[str, Any]:
    def row(judge: str, domain: str, values: dict[str, float]) -> dict[str, Any]:
        return {"judge": judge, "split": "test", "domain": domain, "scored": 40, "asked": 40,
                "no_error_outputs": 3, "human_no_error_outputs": 9, **values}  # fmt: skip

    teacher = {"overlap_f1": 0.5, "token_f1": 0.4, "count_pearson": 0.4, "token_pearson": 0.2}
    baseline = {"overlap_f1": 0.2, "token_f1": 0.0, "count_pearson": 0.3, "token_pearson": 0.1}
    rows = [row("student", "owid", student), row("teacher", "owid", teacher), row("number_baseline", "owid", baseline)]
    settings = {"protocol": 1, "recipe": recipe, "train_seed": seed, "recipe_settings": {"lr": 0.0005}}
    return {"settings": settings, "rows": rows}


def test_the_recipes_list_gives_each_columns_mean_and_range_over_seeds_beside_the_teacher(
    bench: SimpleNamespace,
) -> None:
    runs = {
        "a": _protocol_run(42, {"overlap_f1": 0.2, "token_f1": 0.3, "count_pearson": 0.1, "token_pearson": 0.0}),
        "b": _protocol_run(1, {"overlap_f1": 0.4, "token_f1": 0.1, "count_pearson": 0.5, "token_pearson": None}),
        "legacy": _run({}, {"overlap_f1": 0.9}),  # made before the protocol: not a recipe seed
    }
    (entry,) = bench.recipes(runs)
    assert (entry["recipe"], entry["split"], entry["domain"], entry["seeds"]) == ("r", "test", "owid", [42, 1])
    assert entry["mean"]["overlap_f1"] == pytest.approx(0.3)
    assert (entry["min"]["count_pearson"], entry["max"]["count_pearson"]) == (0.1, 0.5)
    assert entry["mean"]["token_pearson"] is None  # undefined for one seed: no mean is invented
    assert entry["teacher"]["count_pearson"] == 0.4 and entry["number_baseline"]["count_pearson"] == 0.3
    table = "\n".join(bench.protocol_tables([entry]))
    assert (
        "### test split" in table and "**0.300 [0.10, 0.50]** ≥" in table
    )  # count r: half the teacher, above the baseline


def test_gamma_joins_the_rows_and_the_recipes_when_asked(bench: SimpleNamespace) -> None:
    from spanjudge.eval.spans.documents import GoldSpan, SpanDocument

    def doc(i: int, domain: str, gold: list[tuple[int, int]]) -> SpanDocument:
        spans = tuple(GoldSpan(s, e, "0") for s, e in gold)
        return SpanDocument(f"d{i}", "q", "t", {}, "The score was 3-1 at home.", spans, input_id=f"{domain}/{i}")

    docs = [doc(0, "owid", [(14, 17)]), doc(1, "owid", []), doc(2, "wikidata", [(4, 9)]), doc(3, "wikidata", [])]
    spans = {"d0": [(14, 17)], "d1": [], "d2": [(4, 9)], "d3": [(0, 3)]}
    # per output: (γ or None, spans both sides marked), as output_gammas gives them
    gammas = {"d0": (1.0, 2), "d1": (None, 0), "d2": (0.5, 2), "d3": (None, 1)}
    rows = bench.domain_rows("student", docs, spans, None, split="dev", resamples=10, seed=0, gammas=gammas)
    by_domain = {r["domain"]: r for r in rows}
    assert (by_domain["owid"]["gamma"], by_domain["owid"]["gamma_outputs"]) == (1.0, 1)
    assert by_domain["pooled"]["gamma"] == pytest.approx(0.75) and by_domain["pooled"]["gamma_outputs"] == 2
    assert "gamma" not in bench.domain_rows("student", docs, spans, None, split="dev", resamples=10, seed=0)[0]
    runs = {
        "a": _protocol_run(42, {"overlap_f1": 0.2, "token_f1": 0.3, "count_pearson": 0.1, "token_pearson": 0.0,
                                "gamma": 0.2}),
        "b": _protocol_run(1, {"overlap_f1": 0.4, "token_f1": 0.1, "count_pearson": 0.5, "token_pearson": 0.1,
                               "gamma": 0.4}),
    }  # fmt: skip
    (entry,) = bench.recipes(runs)
    assert entry["mean"]["gamma"] == pytest.approx(0.3) and entry["teacher"]["gamma"] is None
    assert "0.300 [0.20, 0.40] (–)" in "\n".join(bench.protocol_tables([entry]))


def test_a_recipes_seeds_must_share_every_setting_but_the_seed(bench: SimpleNamespace) -> None:
    runs = {"a": _protocol_run(42, {})}
    assert bench.recipe_conflict("r", "b", {"lr": 0.0005}, runs) is None
    assert bench.recipe_conflict("r", "a", {"lr": 0.1}, runs) is None  # the run itself, made again
    assert "differs in lr" in bench.recipe_conflict("r", "b", {"lr": 0.1}, runs)
    # a config path names the same file from any checkout (runs once saved the worktree's absolute path)
    runs["a"]["settings"]["recipe_settings"]["import_config"] = "/work/proto/configs/import/q.yaml"
    same = {"lr": 0.0005, "import_config": "configs/import/q.yaml"}
    assert bench.recipe_conflict("r", "b", same, runs) is None
    assert "differs in import_config" in bench.recipe_conflict(
        "r", "b", {**same, "import_config": "configs/x.yaml"}, runs
    )
    # the student's engine is part of the recipe (a quantized judge is another judge); unrecorded, it was the
    # student's own
    assert bench.recipe_conflict("r", "b", {**same, "student_engine": "default"}, runs) is None
    assert "differs in student_engine" in bench.recipe_conflict("r", "b", {**same, "student_engine": "llamacpp"}, runs)


def test_the_student_judges_on_its_own_engine_unless_told(bench: SimpleNamespace) -> None:
    from spanjudge.eval.distill.study import ENGINE_LABELS, StudySettings, engine_and_decoding, student_engine

    assert student_engine(StudySettings(student="gemma3")) == "transformers"
    assert student_engine(StudySettings(student="smollm2")) == "llamacpp-server"
    assert student_engine(StudySettings(student="gemma3", student_engine="llamacpp")) == "llamacpp"
    # each engine's judgments have their own file name and identity; a served judge's keep their old name
    assert len(set(ENGINE_LABELS.values())) == len(ENGINE_LABELS) and ENGINE_LABELS["llamacpp-server"] == "llamacpp"
    # a student engine is a registered engine with its decoding and engine options
    assert engine_and_decoding("transformers") == ("transformers", "batched", {})
    one = {"batch_size": 1}  # the judges measured one reply at a time stay so
    assert engine_and_decoding("transformers-drafted") == ("transformers", "drafted", one)
    bf16 = {**one, "dtype": "bfloat16"}
    assert engine_and_decoding("transformers-drafted-bf16") == ("transformers", "drafted", bf16)
    stop = {**one, "stop_at_repeat": True}
    assert engine_and_decoding("transformers-drafted-stop") == ("transformers", "drafted", stop)
    assert engine_and_decoding("transformers-drafted-bf16-stop") == ("transformers", "drafted", {**bf16, **stop})
    rows = {"batch_size": 4, "stop_at_repeat": True}  # quintd-1's four outputs of an input together
    assert engine_and_decoding("transformers-drafted-rows-stop") == ("transformers", "drafted", rows)
    rows_bf16 = {**rows, "dtype": "bfloat16"}
    assert engine_and_decoding("transformers-drafted-rows-bf16-stop") == ("transformers", "drafted", rows_bf16)
    assert engine_and_decoding("llamacpp") == ("llamacpp", "batched", {})


def test_the_protocol_script_judges_the_test_split_only_for_the_runs_it_is_given(tmp_path: Path) -> None:
    """bench/distill_protocol.sh, in a copy of its folder, with an interpreter that records its
    arguments in place of Python: which runs it starts, with which split, and what it refuses."""
    (tmp_path / "bench").mkdir()
    script = tmp_path / "bench" / "distill_protocol.sh"
    shutil.copy(REPO / "bench" / "distill_protocol.sh", script)
    recorder = tmp_path / "python"
    recorder.write_text('#!/usr/bin/env bash\necho "$@" >> "$(dirname "$0")/calls"\n')
    recorder.chmod(0o755)

    def protocol(*labels: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(script), *labels], env={**os.environ, "PYTHON": str(recorder), **env},
                              capture_output=True, text=True, timeout=60)  # fmt: skip

    assert protocol("smollm2-human-s1", SPLIT="test").returncode == 0
    [call] = (tmp_path / "calls").read_text().splitlines()
    assert call.startswith("bench/distill_quintd.py --label smollm2-human-s1 --recipe smollm2-human")
    assert "--train-source human" in call and "--split test --samples 0 --base --judging-workers" in call
    assert protocol("smollm2-human-s1", SPLIT="test", WORKERS="2").returncode == 0  # two judging processes
    assert "--judging-workers 2 --gamma" in (tmp_path / "calls").read_text().splitlines()[-1]
    assert (tmp_path / "runs/bench/distill_quintd/smollm2-human-s1.test.log").is_file()
    assert protocol("smollm2-wikidata-s2", SAMPLES="3").returncode == 0  # the dev split by default
    assert "--split dev --samples 3" in (tmp_path / "calls").read_text().splitlines()[2]
    assert protocol("smollm2-human-s1", SPLIT="test", BASE="0").returncode == 0  # the students first
    assert "--split test --samples 0 --no-base" in (tmp_path / "calls").read_text().splitlines()[3]
    for refused, env, says in [
        ((), {"SPLIT": "test"}, "never all of them"),  # the test split is read for a finished recipe only
        (("smollm2-human-s1",), {"SPLIT": "tset"}, "SPLIT is dev or test, not 'tset'"),
        (("smollm2-human-s1",), {"BASE": "no"}, "BASE is 1 or 0, not 'no'"),
        (("smollm2-human-s9",), {}, "no run 'smollm2-human-s9'"),
    ]:
        done = protocol(*refused, **env)
        assert done.returncode == 2 and says in done.stderr
    assert len((tmp_path / "calls").read_text().splitlines()) == 4  # a refused call starts nothing


def test_a_reading_that_only_some_seeds_have_is_a_recipe_entry_over_those_seeds(bench: SimpleNamespace) -> None:
    values = {"overlap_f1": 0.2, "token_f1": 0.3, "count_pearson": 0.1, "token_pearson": 0.0}
    runs = {"a": _protocol_run(42, values), "b": _protocol_run(1, values)}
    # seed 1 was also judged with self-consistency (--samples N, added to a finished run)
    runs["b"]["rows"].append({**runs["b"]["rows"][0], "judge": "student·consensus", "overlap_f1": 0.5})
    entries = {entry["recipe"]: entry for entry in bench.recipes(runs)}
    assert sorted(entries) == ["r", "r+consensus"]
    assert entries["r"]["seeds"] == [42, 1] and entries["r+consensus"]["seeds"] == [1]
    assert entries["r+consensus"]["mean"]["overlap_f1"] == 0.5
    assert entries["r+consensus"]["teacher"] == entries["r"]["teacher"]  # on the same outputs


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--samples", "-1"], "Invalid value for '--samples'"),
        (["--device-batch", "0"], "Invalid value for '--device-batch'"),
        (["--split", "tset"], "--split is one of dev, test, not 'tset'"),
        (["--train-tables", "0", "75"], "--train-tables and --dev-tables overlap"),
    ],
)
def test_a_bad_count_is_refused_before_any_work(tmp_path: Path, option: list[str], message: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "distill_quintd.py"), "--label", "x", *option,
         "--work", str(tmp_path / "work")],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 2 and message in done.stderr
    assert not (tmp_path / "work").exists()


def _fitted_run(recipe: str, seed: int, decided: float, written: float) -> dict[str, Any]:
    """A protocol run whose dev judgments chose decision thresholds with these objectives."""
    fit = {"split": "dev", "data": "dev", "outputs": 120, "objective": "o", "value": decided, "written_value": written}
    rule = {"no_error_threshold": 0.3, "min_confidence": None, "fitted_on": fit}
    return {"settings": {"protocol": 1, "recipe": recipe, "train_seed": seed, "decisions": rule}, "rows": []}


def test_dev_chooses_the_recipe_whose_seeds_decide_best_once_two_have_three_seeds(bench: SimpleNamespace) -> None:
    runs = {f"a{s}": _fitted_run("a", s, d, 0.2) for s, d in ((42, 0.30), (1, 0.31), (2, 0.32))}
    runs |= {f"b{s}": _fitted_run("b", s, d, 0.2) for s, d in ((42, 0.25), (1, 0.26), (2, 0.35))}
    runs |= {f"c{s}": _fitted_run("c", s, 0.9, 0.2) for s in (42, 1)}  # two seeds: not a candidate yet
    runs["old"] = {"settings": {"protocol": 1, "recipe": "old", "train_seed": 42}, "rows": []}  # no decisions
    choice = bench.dev_choice(runs)
    assert [c["recipe"] for c in choice["candidates"]] == ["c", "a", "b"]
    assert (choice["chosen"], choice["reading"], choice["apart"]) == ("a", "decided", False)  # b's 0.35 > a's 0.30
    assert "**Dev chooses `a`, read decided**" in "\n".join(bench.choice_lines(choice))
    runs["b2"] = _fitted_run("b", 2, 0.27, 0.2)
    assert bench.dev_choice(runs)["apart"] is True
    # the written replies beat by nothing: the decided reading is not chosen
    same = {k: _fitted_run(r["settings"]["recipe"], r["settings"]["train_seed"], 0.2, 0.2) for k, r in runs.items()}
    assert bench.dev_choice(same)["reading"] == "written"
    # one recipe ready is no choice
    alone = bench.dev_choice({k: r for k, r in runs.items() if not k.startswith("b")})
    assert alone["chosen"] is None
    assert "No choice yet" in "\n".join(bench.choice_lines(alone))


def _decided_row(domain: str, said: int, humans: int) -> dict[str, Any]:
    return {"judge": "student·decided", "split": "dev", "domain": domain, "scored": 40,
            "no_error_outputs": said, "human_no_error_outputs": humans}  # fmt: skip


def test_a_recipe_whose_decided_reading_gives_a_domain_up_is_not_chosen(bench: SimpleNamespace) -> None:
    runs = {f"a{s}": _fitted_run("a", s, 0.40, 0.2) for s in (42, 1, 2)}
    runs |= {f"b{s}": _fitted_run("b", s, 0.30, 0.2) for s in (42, 1, 2)}
    runs |= {f"c{s}": _fitted_run("c", s, 0.25, 0.2) for s in (42, 1, 2)}
    # a's seed 1 calls all 40 wikidata outputs 'No Error', of which the humans call 16 so; owid only 39 of 40
    runs["a1"]["rows"] = [_decided_row("wikidata", 40, 16), _decided_row("owid", 39, 11)]
    runs["a1"]["rows"].append(_decided_row("pooled", 120, 31) | {"scored": 120})
    # b calls all of ice_hockey 'No Error' as the humans do: nothing given up
    runs["b2"]["rows"] = [_decided_row("ice_hockey", 40, 40)]
    choice = bench.dev_choice(runs)
    assert [f["given_up"] for f in choice["candidates"][0]["seeds"]] == [[], ["wikidata"], []]
    assert choice["chosen"] == "b" and choice["apart"] is True
    assert "| 1: wikidata |" in "\n".join(bench.choice_lines(choice))
    runs["c1"]["rows"] = [_decided_row("wikidata", 40, 0)]
    runs["b1"]["rows"] = [_decided_row("wikidata", 40, 0)]
    assert bench.dev_choice(runs)["chosen"] is None  # no two recipes left


def _bar_entry(recipe: str, domain: str, mean: dict[str, Any], **more: Any) -> dict[str, Any]:
    teacher = {"overlap_f1": 0.5, "token_f1": 0.4, "count_pearson": 0.4, "token_pearson": 0.2}
    return {"recipe": recipe, "split": "test", "domain": domain, "seeds": [42, 1, 2], "mean": mean,
            "teacher": teacher, "number_baseline": {"count_pearson": 0.3}, "asked": 300,
            "no_error_outputs": None, "human_no_error_outputs": None, **more}  # fmt: skip


def test_the_bar_is_read_for_dev_s_choice_on_the_test_split(bench: SimpleNamespace) -> None:
    choice = {"chosen": "a", "reading": "decided"}
    decided = {"overlap_f1": 0.25, "token_f1": 0.1, "count_pearson": 0.35, "token_pearson": None}
    entries = [
        _bar_entry("a+decided", "pooled", decided, no_error_outputs=35, human_no_error_outputs=25),
        _bar_entry("a", "pooled", {}, calibration={"span_confidence": {"mean": 0.04}}),
        _bar_entry("b+decided", "wikidata", {**decided, "token_f1": 0.9}),  # another recipe: not read
        _bar_entry("a", "pooled", {}, split="dev", span_confidence_auc={"mean": 0.56}),  # the ranking is dev's
    ]
    bar = bench.bar_checks(entries, choice)
    assert bar["seeds"] == [42, 1, 2]
    checks = {c["what"]: c for c in bar["checks"]}
    assert checks["overlap_f1 (pooled) ≥ half the teacher's"]["met"] is True  # 0.25 against 0.5 / 2
    assert checks["token_f1 (pooled) ≥ half the teacher's"]["met"] is False
    assert checks["token_pearson (pooled) ≥ half the teacher's"]["met"] is None  # undefined: neither met nor not
    assert checks["count_pearson (pooled) ≥ the number baseline's"]["met"] is True
    assert checks["token_f1 (wikidata) ≥ half the teacher's"]["met"] is None  # the chosen recipe has no wikidata row
    rate = checks["'No Error' rate within 0.10 of the humans' (pooled)"]  # 35 and 25 of 100 outputs a seed
    assert (rate["value"], rate["target"], rate["met"]) == (0.35, 0.25, True)
    assert checks["span-confidence ECE ≤ 0.05 (pooled)"]["met"] is True
    ranks = checks["span-confidence AUC ≥ 0.70 (dev, pooled)"]
    assert (ranks["value"], ranks["met"]) == (0.56, False)
    lines = "\n".join(bench.bar_lines(bar, choice))
    assert (
        "Mean over seeds 42, 1, 2; 5 of 13 checks met" in lines
        and "| token_f1 (pooled) ≥ half the teacher's | 0.200 | 0.100 | no |" in lines
    )
    assert bench.bar_checks(entries, {"chosen": None}) is None  # dev has not chosen: no bar
    assert bench.bar_checks(entries[1:], choice) is None  # not judged on test yet
