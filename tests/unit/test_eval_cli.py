"""`spanjudge meta-eval` as a user runs it: a classic metric reproducing a published row,
a scores file from `spanjudge score`, resumption, and user mistakes as one-line errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from spanjudge.eval.correlation.reference import load_reference_tables

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))


def run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([SPANJUDGE, "meta-eval", *args], capture_output=True, text=True, timeout=300, env=env)


def cells(out: Path) -> dict[tuple[str, str, str, str], dict]:
    data = json.loads((out / "results.json").read_text())
    return {(c["judge"], c["dataset"], c["aspect"], c["coefficient"]): c for c in data["cells"]}


def test_bleu_on_full_hanna_reproduces_the_published_rows(tmp_path: Path) -> None:
    """sacrebleu sentence BLEU against the Human story of the same prompt, global level over all
    1056 stories (Human included): thesis Tables 5.5-5.7, BLEU row, every cell within 0.01."""
    out = tmp_path / "hanna"
    result = run("--suite", str(SUITE), "--judge", "metric:bleu", "--dataset", "hanna", "--out", str(out),
                 "--resamples", "50")  # fmt: skip
    assert result.returncode == 0, result.stderr
    measured = cells(out)
    references = load_reference_tables(REPO / "configs/eval/reference_tables.yaml")
    compared = 0
    for aspect in ("coherence", "relevance", "engagement", "empathy", "surprise", "complexity", "average"):
        for coefficient in ("pearson", "spearman", "kendall"):
            [published] = [p for p in references.lookup("hanna", aspect, coefficient) if p.row == "BLEU"]
            cell = measured[("metric:bleu", "hanna", aspect, coefficient)]
            assert abs(cell["value"] - published.value) <= 0.01, (aspect, coefficient, cell["value"], published)
            compared += 1
    assert compared == 21
    coherence = measured[("metric:bleu", "hanna", "coherence", "pearson")]
    assert coherence["scored"] == coherence["items"] == 1056
    assert coherence["low"] < coherence["value"] < coherence["high"]
    report = (out / "report.md").read_text()
    assert "BLEU *(published)*" in report and "Ensemble *(published)*" in report and "Δ" in report
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert "scatter_hanna_metric_bleu.png" in pngs and "bars_hanna_pearson.png" in pngs
    assert all((out / p).stat().st_size > 5000 for p in pngs)


def test_scores_file_judge_resumes_and_reports_unscored(tmp_path: Path, shared_data: Path) -> None:
    # a stand-in for `spanjudge score` output: export the requests, answer them with a noisy
    # copy of the human scores (so the correlation is known to be high), leave some unscored
    requests = tmp_path / "requests.jsonl"
    exported = run("--suite", str(SUITE), "--export-requests", str(requests), "--dataset", "summeval",
                   "--max-items", "48", "--out", str(tmp_path / "unused"))  # fmt: skip
    assert exported.returncode == 0, exported.stderr
    rows = [json.loads(line) for line in requests.read_text().splitlines()]
    # --max-items 48: three whole SummEval articles (16 systems each), drawn with seed 0
    assert len(rows) == 48 * 4 and rows[0]["id"].endswith("@consistency") and rows[0]["task_id"] == "summeval"
    sampled = list(dict.fromkeys(row["id"].split("@")[0] for row in rows))
    assert len(sampled) == 48 and sampled != [f"summeval-{n}" for n in range(48)]
    summeval = [json.loads(line) for line in (shared_data / "meta_eval/summeval/summeval.jsonl").open()]
    rng = np.random.default_rng(0)
    lines = []
    for row in rows:
        item, aspect = row["id"].split("@")
        human = summeval[int(item.split("-")[1])]["scores"][aspect]
        noisy = float(np.clip(human * 20 + rng.normal(scale=5), 0, 100))  # a judge's scores are 0-100
        score = None if item in sampled[3:5] else noisy
        lines.append(json.dumps({"id": row["id"], "aspect": aspect, "evaluation": {"errors": [], "score": score},
                                 "unscored_reason": None if score is not None else "no parseable reply"}))  # fmt: skip
    scores = tmp_path / "scores.jsonl"
    scores.write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    common = ["--suite", str(SUITE), "--dataset", "summeval", "--max-items", "48", "--out", str(out), "--no-plots"]
    first = run(*common, "--judge", f"scores:{scores}", "--judge", "metric:rouge1", "--resamples", "100")
    assert first.returncode == 0, first.stderr
    measured = cells(out)
    coherence = measured[("scores:scores.jsonl", "summeval", "coherence", "spearman")]
    assert coherence["level"] == "input" and coherence["items"] == 48 and coherence["scored"] == 46
    assert coherence["unscored"] == 2 and coherence["value"] > 0.5
    report = (out / "report.md").read_text()
    assert "no parseable reply" in report and "Paired tests" in report
    data = json.loads((out / "results.json").read_text())
    assert {p["judge_b"] for p in data["paired"]} == {"metric:rouge1"}
    # resumption: the judgments are stored under the file's name and a hash of its content
    [stored] = (out / "judgments").glob("scores_scores.jsonl-*.jsonl")
    assert len(stored.read_text().splitlines()) == 48 * 4
    again = run(*common, "--judge", f"scores:{scores}", "--resamples", "100")
    assert again.returncode == 0, again.stderr
    assert len(stored.read_text().splitlines()) == 48 * 4  # nothing judged twice
    assert cells(out)[("scores:scores.jsonl", "summeval", "coherence", "spearman")]["value"] == coherence["value"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--judge", "rouge"], "--judge expects KIND:VALUE"),
        (["--judge", "magic:x"], "unknown judge kind 'magic'"),
        (["--judge", "metric:bertscore"], "needs model weights from the Hugging Face Hub"),
        (["--judge", "metric:nope"], "unknown metric 'nope'"),
        (["--judge", "scores:/nonexistent.jsonl"], "scores file not found"),
        (["--judge", "metric:bleu", "--dataset", "nosuch"], "--dataset 'nosuch' is not in"),
        (["--judge", "prompted:configs/ensemble/tiny_local.yaml#gpt9"], "no annotator 'gpt9'"),
        ([], "give at least one --judge"),
    ],
)
def test_user_mistakes_are_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    result = run("--suite", str(SUITE), "--out", str(tmp_path / "out"), *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr and "Traceback" not in result.stderr


def test_bad_suite_file_names_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "suite.yaml"
    bad.write_text(SUITE.read_text().replace("level: input", "level: document"))
    result = run("--suite", str(bad), "--judge", "metric:bleu", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and "datasets[2].level" in result.stderr and "Traceback" not in result.stderr


def test_a_damaged_scores_line_names_the_line(tmp_path: Path) -> None:
    scores = tmp_path / "scores.jsonl"
    scores.write_text('{"id": "summeval-0@coherence", "evaluation": {"score": 50}}\n{"id": \n')
    result = run("--suite", str(SUITE), "--judge", f"scores:{scores}", "--out", str(tmp_path / "out"))
    assert result.returncode == 2 and f"{scores}:2: not valid JSON" in result.stderr
