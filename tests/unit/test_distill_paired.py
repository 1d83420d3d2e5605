"""Two protocol recipes compared over the same outputs (`eval.distill.paired`), on a real run's kept dev
judgments: the same judgments on both sides differ by nothing, and a judge that marks nothing is behind by
the whole of what the real one finds."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from support.scripts import REPO

from spanjudge.core.errors import InputError
from spanjudge.eval.distill.paired import paired_recipes

KEPT = REPO / "bench/results/distill_judgments"
REAL = "gemma3-mixed-cut-s42"


def _runs() -> dict[str, Any]:
    return json.loads((REPO / "bench/results/distill_quintd.json").read_text())["runs"]


def _run(recipe: str, real: dict[str, Any]) -> dict[str, Any]:
    keys = ("protocol", "eval_domains", "dev_tables", "test_tables", "decisions")
    return {"settings": {**{k: real["settings"][k] for k in keys}, "recipe": recipe}, "rows": []}


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("kept")
    source = KEPT / REAL / "dev" / "student+probabilities.json.gz"
    for label in ("a-s1", "same-s1"):
        (root / label / "dev").mkdir(parents=True)
        shutil.copy(source, root / label / "dev" / source.name)
    payload = json.loads(gzip.decompress(source.read_bytes()))
    for row in payload["rows"].values():  # "No Error" on every output it scored
        if row["spans"] is not None:
            row["spans"], row["errors"] = [], 0
            row["probabilities"]["span_written"] = []
    (root / "none-s1" / "dev").mkdir(parents=True)
    (root / "none-s1" / "dev" / source.name).write_bytes(gzip.compress(json.dumps(payload).encode()))
    return root


def test_the_same_judgments_on_both_sides_differ_by_nothing(kept: Path) -> None:
    real = _runs()[REAL]
    runs = {"a-s1": _run("a", real), "same-s1": _run("same", real)}
    found = paired_recipes(runs, "a", "same", "dev", kept, resamples=200)
    assert found["seeds"] == {"a": ["a-s1"], "same": ["same-s1"]}
    for reading in ("written", "decided"):
        for column, entry in found[reading].items():
            assert entry["difference"] == 0.0 and entry["low"] == entry["high"] == 0.0, (reading, column)


def test_a_judge_that_marks_nothing_is_behind_by_what_the_real_one_finds(kept: Path) -> None:
    real = _runs()[REAL]
    runs = {"a-s1": _run("a", real), "none-s1": _run("none", real)}
    found = paired_recipes(runs, "a", "none", "dev", kept, resamples=200)["written"]
    overlap = found["overlap_f1"]
    assert overlap["b"] == 0.0 and overlap["difference"] == pytest.approx(overlap["a"]) and overlap["low"] > 0
    # the real judge's own row in the protocol's results: the same point
    pooled = [r for r in real["rows"] if r["split"] == "dev" and r["judge"] == "student" and r["domain"] == "pooled"]
    assert overlap["a"] == pytest.approx(pooled[0]["overlap_f1"], abs=1e-6)


def test_a_recipe_without_kept_judgments_is_one_clear_error(kept: Path) -> None:
    with pytest.raises(InputError, match="recipe 'ghost': no run of it has kept dev judgments"):
        paired_recipes({"a-s1": _run("a", _runs()[REAL])}, "a", "ghost", "dev", kept)
