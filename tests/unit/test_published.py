"""The seeds' published numbers (`configs/perturb/published.yaml`) load, are well-formed, and match the papers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from spanjudge.core.errors import ConfigError
from spanjudge.eval.perturb.published import (
    ATTACK_ASPECTS,
    ATTACK_PERTURBATIONS,
    PublishedRow,
    default_published_path,
    load_published,
    rows_for,
)


@pytest.fixture(scope="module")
def rows() -> list[PublishedRow]:
    return load_published()


def _one(rows: list[PublishedRow], benchmark: str, **filters: object) -> float:
    found = rows_for(rows, benchmark, **filters)
    assert len(found) == 1, found
    return found[0].value


def test_shipped_file_is_packaged_and_loads(rows: list[PublishedRow]) -> None:
    assert default_published_path().is_file()
    counts = Counter(row.benchmark for row in rows)
    # dual: Tables 2-3 (16 judges x 12 columns each) + Table 10 (14 judges x 2 approaches)
    assert counts["dual"] == 2 * 16 * 12 + 14 * 2
    # attacks: Table 4 (18 x 11) + Table 21 (18 x 7)
    assert counts["attacks"] == 18 * 11 + 18 * 7
    # prompt: Table 1 (10 aspects x 5 strategies) + Table 2 (10 x 2) + Table 3 (10) + Table 4 (10 x 2)
    assert counts["prompt"] == 50 + 20 + 10 + 20
    # dhp prints its results only as bar charts (Figures 4-5): no rows by design.
    assert counts["dhp"] == 0
    # each (benchmark, table, judge, dataset, perspective, aspect, perturbation, strategy, metric) is printed once
    keys = [row.model_dump(exclude={"value", "note"}) for row in rows]
    assert len({tuple(sorted(k.items())) for k in keys}) == len(rows)


def test_attack_matrix_uses_the_paper_names(rows: list[PublishedRow]) -> None:
    matrix = rows_for(rows, "attacks", table="4")
    assert {row.perturbation for row in matrix} == set(ATTACK_PERTURBATIONS)
    assert {row.aspect for row in matrix} == set(ATTACK_ASPECTS)
    assert {(row.perturbation, row.aspect) for row in matrix} == {
        (p, a) for p in ATTACK_PERTURBATIONS for a in ATTACK_ASPECTS
    }
    for row in rows_for(rows, "attacks"):
        assert row.perturbation in ATTACK_PERTURBATIONS
        assert row.aspect in ATTACK_ASPECTS
        assert row.metric == "delta"


def test_dual_averages_agree_with_their_aspects(rows: list[PublishedRow]) -> None:
    for table in ("2", "3"):
        for judge in {row.judge for row in rows_for(rows, "dual", table=table)}:
            for dataset in ("summeval", "topical_chat"):
                cells = rows_for(rows, "dual", table=table, judge=judge, dataset=dataset)
                aspects = [row.value for row in cells if row.aspect != "average"]
                average = _one(rows, "dual", table=table, judge=judge, dataset=dataset, aspect="average")
                assert sum(aspects) / len(aspects) == pytest.approx(average, abs=0.0016)


def test_spot_checks_against_the_paper_text(rows: list[PublishedRow]) -> None:
    # The quoted lines are the seed text (../shared/seeds/00N_*.txt) with tabs shown as single spaces.
    # 001 Table 2: "Themis-8B 0.797 0.827 0.741 0.797 0.791 0.852 0.729 0.628 0.702 0.317 0.645 0.718 (3)"
    themis = dict(benchmark="dual", table="2", judge="Themis-8B", perspective="global", metric="kappa")
    assert _one(rows, **themis, dataset="summeval", aspect="coherence") == 0.797
    assert _one(rows, **themis, dataset="topical_chat", aspect="uses_knowledge") == 0.317
    assert _one(rows, **themis, dataset=None, aspect="average") == 0.718

    # 001 Table 3: "Prometheus-2-7B 0.597 0.531 0.517 0.539 0.546 0.688 0.600 0.669 0.621 0.593 0.634 0.590 (13)"
    assert (
        _one(rows, "dual", table="3", judge="Prometheus-2-7B", dataset="topical_chat", aspect="maintains_context")
        == 0.669
    )

    # 002 Table 4: " Word Exchange 2.97 1.74 3.36 1.54 2.97 0.80 1.32 0.59 0.85 0.94 1.88"
    word_exchange = dict(table="4", judge="GPT-3.5", perturbation="Word Exchange")
    assert _one(rows, "attacks", **word_exchange, aspect="grammaticality") == 3.36
    assert _one(rows, "attacks", **word_exchange, aspect="non-contradiction") == 1.32
    # 002 Table 4: "Inf. Abbreviation -0.03 0.01 -0.05 -0.01 0.00 -0.02 -0.01 -0.02 0.04 0.01 0.01"
    assert _one(rows, "attacks", table="4", perturbation="Abbreviation", aspect="grammaticality") == -0.05

    # 003 Table 1: "Fluency -0.4927 -0.4826 -0.4758 -0.4720 -0.8629"
    assert _one(rows, "prompt", table="1", dataset="summeval", aspect="fluency", strategy="Perturbed") == -0.8629
    # 003 Table 3: "Uses Knowledge 86.36%"
    assert _one(rows, "prompt", table="3", dataset="usr", aspect="uses_knowledge") == pytest.approx(0.8636)


def test_rows_for_rejects_unknown_filters(rows: list[PublishedRow]) -> None:
    with pytest.raises(ValueError, match="unknown benchmark"):
        rows_for(rows, "nope")
    with pytest.raises(ValueError, match="unknown filter"):
        rows_for(rows, "dual", model="GPT-4o")


_HEAD = """\
sources:
  dual: {paper: "001_x", title: "t", tables: {"2": "caption"}}
  attacks: {paper: "002_x", title: "t", tables: {"4": "caption"}}
rows:
  - {benchmark: dual, table: "2", judge: "Themis-8B", metric: kappa, value: 0.5}
"""


@pytest.mark.parametrize(
    ("bad_row", "field", "problem"),
    [
        (
            '{benchmark: dual, table: "2", judge: "J", metric: kappa, value: 0.5, colour: red}',
            "rows[1].colour",
            "unknown key",
        ),
        ('{benchmark: nope, table: "2", judge: "J", metric: kappa, value: 0.5}', "rows[1].benchmark", "nope"),
        ('{benchmark: dual, table: 2, judge: "J", metric: kappa, value: 0.5}', "rows[1].table", "string"),
        ('{benchmark: dual, table: "2", judge: "J", metric: kappa}', "rows[1].value", "required key is missing"),
        ('{benchmark: dual, table: "7", judge: "J", metric: kappa, value: 0.5}', "rows[1].table", "not listed"),
        (
            '{benchmark: attacks, table: "4", judge: "J", perturbation: "Typos", aspect: fluency, metric: delta, '
            "value: 1}",
            "rows[1]",
            "Typos",
        ),
    ],
)
def test_malformed_file_names_row_and_field(tmp_path: Path, bad_row: str, field: str, problem: str) -> None:
    path = tmp_path / "published.yaml"
    path.write_text(_HEAD + f"  - {bad_row}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as caught:
        load_published(path)
    message = str(caught.value)
    assert "\n" not in message
    assert "published.yaml" in message
    assert field in message
    assert problem in message
