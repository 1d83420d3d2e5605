"""Benchmarks as plugins (issue #16, item 5): one registry of kinds from which every kind list is
derived, the rule tables as validated YAML, the benchmark manifest as a pydantic model, and the
meta-eval runner's paired test as `bootstrap.paired_bootstrap`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import typer.main
from pydantic import ValidationError

from spanjudge.app.demo.config import PerturbSection
from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.eval.correlation import runner
from spanjudge.eval.correlation.bootstrap import paired_bootstrap
from spanjudge.eval.correlation.coefficients import Groups
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.suite import AspectSpec, BootstrapSpec, DatasetSpec, SuiteConfig
from spanjudge.eval.perturb.benchmark import FORMAT, MANIFEST, BenchItem, Benchmark, load_benchmark, write_benchmark
from spanjudge.eval.perturb.cli import perturb
from spanjudge.eval.perturb.kind import BenchmarkKind, all_kinds, get_kind
from spanjudge.eval.perturb.perturbations import PERTURBATIONS, load_tables, tables_path
from spanjudge.eval.perturb.published import PublishedRow
from spanjudge.eval.perturb.registry import KINDS

# -- the registry ----------------------------------------------------------------------------


def test_cli_choices_are_the_registry() -> None:
    command = typer.main.get_command(perturb)
    option = next(p for p in command.params if p.name == "benchmark")
    assert option.help is not None and option.help.split(" | ") == list(KINDS)
    for kind in all_kinds():  # the command's help describes each registered kind
        assert f"{kind.name} ({', '.join(kind.sources)}): {kind.summary}" in str(command.help)


def test_every_registered_kind_has_all_its_parts() -> None:
    assert len(KINDS) == len(set(KINDS)) >= 4
    for name in KINDS:
        kind = get_kind(name)
        assert isinstance(kind, BenchmarkKind) and kind.name == name
        assert kind.sources and all(isinstance(s, str) and s for s in kind.sources)
        for part in (kind.build, kind.analyse, kind.report, kind.plots):
            assert callable(part), (name, part)
        assert kind.summary and kind.undefined_why and kind.aggregation


def test_other_kind_lists_follow_the_registry() -> None:
    for name in KINDS:
        assert PerturbSection(benchmark=name).benchmark == name
        PublishedRow(benchmark=name, table="1", judge="J", metric="m", value=0.5)
    with pytest.raises(ValidationError, match="unknown benchmark kind 'nope'"):
        PerturbSection(benchmark="nope")
    with pytest.raises(InputError, match="unknown benchmark kind 'nope'; choose dhp, dual, attacks or prompt"):
        get_kind("nope")


# -- the rule tables -------------------------------------------------------------------------


def test_rule_tables_are_the_registry_source() -> None:
    tables = load_tables()
    assert len(PERTURBATIONS) == 2 * len(tables.dhp) + len(tables.replacements) + len(tables.attacks) + sum(
        len(aspects) for aspects in tables.injection_aspects.values()
    )
    assert PERTURBATIONS["attack.sentence_exchange"].params == {"k": "all"}
    assert PERTURBATIONS["dhp.typos.major"].params["kinds"] == tables.typo_kinds


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("rule: reorder,\n", "rule: shuffle,\n", "unknown rule 'shuffle'"),
        (
            "minor: {k: 10}, major: {k: 50}}",
            "minor: {k: 10}, major: {k: 50}, colour: red}",
            "dhp[0].colour: unknown key",
        ),
        ("level: word}", "level: phrase}", "attacks[0].level"),
    ],
)
def test_a_broken_rule_table_is_one_error_naming_the_file(tmp_path: Path, old: str, new: str, expected: str) -> None:
    path = tmp_path / "perturbations.yaml"
    text = tables_path().read_text(encoding="utf-8")
    assert old in text
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_tables(path)
    assert "perturbations.yaml" in str(info.value) and expected in str(info.value)


# -- the manifest ----------------------------------------------------------------------------


def _tiny(tmp_path: Path) -> Path:
    task = load_catalog().task("summeval")
    items = [BenchItem("a", "a", None, ("coherence",), {"Article": "An article."}, "A summary.")]
    folder = tmp_path / "bench"
    write_benchmark(Benchmark("dhp", "tiny", "summeval", task, items, {}, 3, {"made": {}, "note": "n"}), folder)
    return folder


def test_manifest_round_trips_through_the_model(tmp_path: Path) -> None:
    benchmark = load_benchmark(_tiny(tmp_path))
    assert (benchmark.kind, benchmark.name, benchmark.seed) == ("dhp", "tiny", 3)
    assert benchmark.info == {"made": {}, "note": "n"}  # only the fields written, as written


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"kind": "nope"}, "benchmark.json: kind: Value error, unknown benchmark kind 'nope'"),
        ({"task": None}, "benchmark.json: task: Input should be a valid dictionary"),
        ({"seed": "three"}, "benchmark.json: seed: Input should be a valid integer"),
        ({"perturbations": {"x": {"label": "y"}}}, "benchmark.json: perturbations.x.name: required key is missing"),
        ({"format": "other/1"}, f"not a {FORMAT} manifest"),
    ],
)
def test_a_damaged_manifest_is_one_input_error(tmp_path: Path, change: dict[str, object], expected: str) -> None:
    folder = _tiny(tmp_path)
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    (folder / MANIFEST).write_text(json.dumps(manifest | change), encoding="utf-8")
    with pytest.raises(InputError) as info:
        load_benchmark(folder)
    assert expected in str(info.value) and "\n" not in str(info.value)


def test_writing_an_unreadable_manifest_is_refused(tmp_path: Path) -> None:
    task = load_catalog().task("summeval")
    items = [BenchItem("a", "a", None, ("coherence",), {"Article": "x"}, "y")]
    with pytest.raises(ValidationError):
        write_benchmark(Benchmark("nope", "t", "summeval", task, items, {}, 0), tmp_path / "b")
    assert not (tmp_path / "b" / MANIFEST).exists()


# -- the runner's paired test ----------------------------------------------------------------


def test_runner_pairs_judges_with_bootstrap_paired_bootstrap(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(kwargs)
        return paired_bootstrap(*args, **kwargs)

    monkeypatch.setattr(runner, "paired_bootstrap", spy)
    rng = np.random.default_rng(0)
    human = rng.normal(size=24)
    good, noise = human + rng.normal(scale=0.3, size=24), rng.normal(size=24)
    good[3] = np.nan  # an unscored item leaves the pair
    spec = DatasetSpec(
        name="toy", level="global", coefficients=("pearson",), aspects=(AspectSpec(name="a", human="-"),)
    )
    suite = SuiteConfig(name="s", datasets=(spec,), bootstrap=BootstrapSpec(resamples=200, seed=4))
    task = load_catalog().task("summeval")
    items = [
        MetaItem("toy", f"in{k // 2}", f"s{k % 2}", task.id, {}, "o", where=f"toy:{k}", id=f"i{k}", human={"a": 0.0})
        for k in range(24)
    ]
    result = runner.MetaEvalResult("s", ["A", "B"], {})
    per_judge = {"A": {"a": runner._Series(good, human)}, "B": {"a": runner._Series(noise, human)}}
    runner.correlate_dataset(result, suite, MetaDataset(spec, task, items, Path("toy")), per_judge)
    assert len(calls) == 1 and calls[0]["n_resamples"] == 200 and calls[0]["seed"] == 4
    (row,) = result.paired
    mask = ~np.isnan(good)
    groups = Groups.from_labels([i.input_id for i in items], [i.system for i in items]).subset(mask)
    test = paired_bootstrap(good[mask], noise[mask], human[mask], groups, "global", "pearson", n_resamples=200, seed=4)
    assert (row.a, row.b, row.items) == (pytest.approx(test.a), pytest.approx(test.b), 23)
    assert (row.low, row.high, row.p_value) == (test.difference.low, test.difference.high, test.p_value)
    assert row.a is not None and row.b is not None and row.a > row.b
