"""The prompted LLM judge: the annotator prompt through the backend layer, ensemble scores as
the plain average of the models' ratings (thesis §4.3), unparseable replies unscored."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.standin import Reply

from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite
from spanjudge.eval.judging.suite import load_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
EXCELLENT = "No Error\n\nOverall score: Excellent"
FAIR = "Error 1:\nLocation: the\nExplanation: vague\nSeverity: 2\n\nOverall score: Fair"


def run(*args: str, timeout: int = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([SPANJUDGE, "meta-eval", *args], capture_output=True, text=True, timeout=timeout, env=env)


def small_suite(tmp_path: Path, names: list[str] | None = None) -> Path:
    """The thesis suite, first aspect of each set (or of the named ones)."""
    suite = yaml.safe_load(SUITE.read_text())
    suite["datasets"] = [
        {**d, "aspects": d["aspects"][:1]} for d in suite["datasets"] if names is None or d["name"] in names
    ]
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite, sort_keys=False))
    return path


def ensemble(tmp_path: Path, urls: dict[str, str]) -> Path:
    config: dict[str, Any] = {
        "name": "stand-ins",
        "annotators": [
            {"name": n, "backend": {"kind": "openai", "model": n, "endpoints": [u], "retries": 0}}
            for n, u in urls.items()
        ],
        "supervisor": {"name": "sup", "backend": {"kind": "openai", "model": "sup", "endpoints": ["http://x/v1"]}},
        "parse_retry": {"attempts": 1},
    }
    path = tmp_path / "ensemble.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def stored(out: Path) -> list[dict[str, Any]]:
    [path] = list((out / "judgments").glob("prompted*.jsonl"))
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_ensemble_score_is_the_plain_average_and_garbage_is_unscored(tmp_path: Path, serve) -> None:
    good, good_url = serve([Reply(text=EXCELLENT)])
    # --max-items 32 samples two whole articles (seed 0): summeval-128..143 (the cheetah exhibit) and one more
    fair, fair_url = serve(lambda body: Reply(text="I think it is fine." if "cheetah exhibit" in str(body) else FAIR))
    suite = small_suite(tmp_path, ["summeval"])
    out = tmp_path / "out"
    args = ["--suite", str(suite), "--judge", f"prompted:{ensemble(tmp_path, {'a': good_url, 'b': fair_url})}",
            "--max-items", "32", "--out", str(out), "--resamples", "20"]  # fmt: skip
    result = run(*args)
    assert result.returncode == 0, result.stderr
    rows = {r["id"]: r for r in stored(out)}
    assert len(rows) == 32
    # on the cheetah article b never parses (first try + 1 retry), a alone counts
    first = rows["summeval-128"]
    assert first["score"] == 100.0 and first["detail"]["ratings"] == {"a": 5}
    assert len(first["detail"]["parse_failures"]) == 1
    # elsewhere: (Excellent 5 + Fair 3) / 2 = 4 -> (4 - 1) / 4 * 100 = 75
    others = [r for r in rows.values() if r["detail"]["ratings"] == {"a": 5, "b": 3}]
    assert others and all(r["score"] == 75.0 for r in others)
    # a re-run asks no model again: everything is stored and cached
    hits = good.hits + fair.hits
    assert run(*args).returncode == 0
    assert good.hits + fair.hits == hits


def test_a_model_that_never_parses_leaves_items_unscored(tmp_path: Path, serve) -> None:
    _, url = serve([Reply(text="Lovely summary!")])
    suite = small_suite(tmp_path, ["qags_xsum"])
    out = tmp_path / "out"
    result = run("--suite", str(suite), "--judge", f"prompted:{ensemble(tmp_path, {'only': url})}",
                 "--max-items", "4", "--out", str(out), "--resamples", "0", "--no-plots")  # fmt: skip
    assert result.returncode == 0, result.stderr
    rows = stored(out)
    assert len(rows) == 4 and all(r["score"] is None and "no parseable reply" in r["unscored_reason"] for r in rows)
    report = (out / "report.md").read_text()
    assert "0/4 scored" in report and "4 × no parseable reply" in report


def test_a_dead_server_leaves_items_for_the_next_run(tmp_path: Path, serve) -> None:
    _, url = serve([Reply(status=500)])
    suite = small_suite(tmp_path, ["qags_xsum"])
    out = tmp_path / "out"
    result = run("--suite", str(suite), "--judge", f"prompted:{ensemble(tmp_path, {'down': url})}",
                 "--max-items", "3", "--out", str(out), "--resamples", "0", "--no-plots")  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "3 judgments are incomplete" in result.stderr and "Traceback" not in result.stderr
    assert not list((out / "judgments").glob("*.jsonl")) or stored(out) == []  # nothing invented, nothing stored
    assert (out / "report.md").is_file()


def test_every_set_writes_its_full_report(tmp_path: Path) -> None:
    """One whole input of each of the eight sets through a metric judge: every loader, every
    report section, every plot."""
    suite = small_suite(tmp_path)
    out = tmp_path / "out"
    result = run("--suite", str(suite), "--judge", "metric:rouge1", "--max-items", "1", "--out", str(out),
                 "--resamples", "50")  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "results.json").read_text())
    assert set(data["datasets"]) == {"qags_cnndm", "qags_xsum", "summeval", "topical_chat", "sfres", "sfhot",
                                     "hanna", "wiki_da"}  # fmt: skip
    report = (out / "report.md").read_text()
    for title in ("QAGS-CNN", "SummEval", "TopicalChat", "SFRES", "SFHOT", "HANNA", "Wiki-DA"):
        assert f"## {title}" in report
    assert len(list(out.glob("scatter_*.png"))) == 8 and list(out.glob("bars_*.png"))


@pytest.mark.slow
def test_tiny_prompted_judge_scores_whole_inputs_beside_a_metric(
    tmp_path: Path, smollm2_server, shared_data: Path
) -> None:
    """SmolLM2-135M (llama.cpp, CPU) with the annotator prompt on one whole input of the three sets
    with the shortest inputs (SummEval's articles, HANNA's stories and TopicalChat's six responses
    to a long dialogue cost minutes on 2 cores and test nothing more: every loader runs above)."""
    names = ["sfres", "sfhot", "wiki_da"]
    suite = small_suite(tmp_path, names)
    out = tmp_path / "out"
    result = run("--suite", str(suite), "--judge", "prompted:configs/ensemble/tiny_local.yaml#smollm2",
                 "--endpoint", f"smollm2={smollm2_server.base_url}", "--judge", "metric:rouge1",
                 "--max-items", "1", "--out", str(out), "--resamples", "50", timeout=600)  # fmt: skip
    assert result.returncode == 0, result.stderr
    data = json.loads((out / "results.json").read_text())
    assert set(data["datasets"]) == set(names)
    rows = stored(out)
    # --max-items 1 is one whole input per set: every system of it (2 SFRES responses, 2 SFHOT, 1 Wiki-DA)
    sample = open_suite(load_suite(suite), suite, shared_data)
    assert len(rows) == sum(len(load_suite_dataset(sample, name, 1).items) for name in names) == 5
    assert all(r["score"] is not None or r["unscored_reason"] for r in rows)
    assert sum(r["score"] is not None for r in rows) >= 3  # the grammar keeps most replies parseable
    assert len(list(out.glob("scatter_*.png"))) == len(names) * 2  # a scatter per set and judge
