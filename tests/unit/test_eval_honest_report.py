"""Meta-evaluation reports a researcher can trust (issue #15, items 3 and 6): every empty cell
says why and is counted; published rows are compared only where they mean the same thing
(G-Eval's column order for SummEval's copied baselines; HANNA's ROUGE-1 is recall, not F1).
Real SummEval / QAGS rows through the real `spanjudge meta-eval` command (in this process)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from spanjudge.app.cli import main as cli_main
from spanjudge.eval.correlation.reference import load_reference_tables
from spanjudge.eval.correlation.report import published_match
from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite
from spanjudge.eval.judging.suite import load_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
TABLES = REPO / "configs" / "eval" / "reference_tables.yaml"
ITEMS = 32  # two whole SummEval articles


def _scores_file(path: Path, shared_data: Path) -> Path:
    """A stand-in for `spanjudge score` output on the sampled SummEval items: coherence constant,
    consistency scored for one item only, fluency never scored, relevance = the human score."""
    dataset = load_suite_dataset(open_suite(load_suite(SUITE), SUITE, shared_data), "summeval", ITEMS)
    lines = []
    for number, item in enumerate(dataset.items):
        scores = {
            "coherence": 50.0,
            "consistency": 40.0 if number == 0 else None,
            "fluency": None,
            "relevance": item.human["relevance"] * 20,
        }
        for aspect, score in scores.items():
            lines.append(json.dumps({"id": f"{item.id}@{aspect}", "evaluation": {"errors": [], "score": score}}))
    path.write_text("\n".join(lines) + "\n")
    return path


def _table_cells(report: str) -> list[str]:
    return [
        cell.strip() for line in report.splitlines() if line.startswith("| ") for cell in line.strip("|").split("|")
    ]


def test_every_empty_cell_says_why_and_is_counted(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scores = _scores_file(tmp_path / "scores.jsonl", shared_data)
    out = tmp_path / "run"
    # every thesis set carries references now (QAGS: its article); a copy whose QAGS-XSum has none
    # shows the "no reference" cell
    suite = yaml.safe_load(SUITE.read_text())
    suite["datasets"] = [{k: v for k, v in d.items() if d["name"] != "qags_xsum" or k != "references"}
                         for d in suite["datasets"]]  # fmt: skip
    bare = tmp_path / "suite.yaml"
    bare.write_text(yaml.safe_dump(suite, sort_keys=False))
    args = ["meta-eval", "--suite", str(bare), "--dataset", "summeval", "--dataset", "qags_xsum"]
    args += ["--max-items", str(ITEMS), "--out", str(out), "--no-plots", "--resamples", "20"]
    args += ["--judge", f"scores:{scores}", "--judge", "metric:bleu", "--data-dir", str(shared_data)]
    assert cli_main(args) == 0, capsys.readouterr().err
    report = (out / "report.md").read_text()
    cells = {(c["judge"], c["dataset"], c["aspect"], c["coefficient"]): c
             for c in json.loads((out / "results.json").read_text())["cells"]}  # fmt: skip
    judge = "scores:scores.jsonl"
    assert cells[(judge, "summeval", "coherence", "spearman")]["empty"] == "constant"
    assert cells[(judge, "summeval", "consistency", "spearman")]["empty"] == "too few"
    assert cells[(judge, "summeval", "fluency", "spearman")]["empty"] == "unscored"
    assert cells[(judge, "summeval", "relevance", "spearman")]["empty"] is None
    assert cells[(judge, "summeval", "average", "spearman")]["empty"] == "aspect empty"
    assert cells[("metric:bleu", "qags_xsum", "factual consistency", "pearson")]["empty"] == "no reference"

    # no bare dash anywhere in a table: each says why
    dashes = [c for c in _table_cells(report) if c.startswith("–")]
    assert dashes and all(re.fullmatch(r"– \([a-z ]+\)", c) for c in dashes), sorted(set(dashes))
    # ... and each table counts its empty cells by reason
    summeval = report.split("## SummEval")[1].split("## ")[0]
    assert "Empty cells: " in summeval
    assert (
        "2 × constant" in summeval
        and "2 × too few" in summeval
        and "2 × unscored" in summeval
        and "2 × aspect empty" in summeval
    )
    qags = report.split("## QAGS-XSUM")[1].split("## ")[0]
    assert "3 × no reference" in qags and "3 × unscored" in qags
    assert "2 × not published" in qags  # QAGS' own row prints only Pearson
    paired = report.split("## Paired tests")[1].split("## ")[0]
    assert "Empty cells: " in paired
    assert "Sample: --max-items 32: whole inputs drawn with seed 0" in report


def test_summeval_copied_baselines_are_read_in_g_evals_column_order() -> None:
    # G-Eval Table 1 orders coherence, consistency, fluency, relevance; the thesis heads its copy
    # consistency, coherence, relevance, fluency. ROUGE-1 in G-Eval: coherence ρ 0.167, relevance ρ 0.326.
    references = load_reference_tables(TABLES)

    def value(row: str, aspect: str, coefficient: str = "spearman") -> float:
        [found] = [p.value for p in references.lookup("summeval", aspect, coefficient) if p.row == row]
        return found

    assert value("ROUGE-1", "coherence") == 0.167 and value("ROUGE-1", "consistency") == 0.160
    assert value("ROUGE-1", "fluency") == 0.115 and value("ROUGE-1", "relevance") == 0.326
    assert value("G-Eval", "coherence", "kendall") == 0.457 and value("G-Eval", "average") == 0.514
    # the thesis' own rows were measured under its own heads: unchanged
    assert value("Llama-FT", "consistency") == 0.503 and value("Llama-FT", "fluency") == 0.358
    assert any("G-Eval's column order" in note for note in references.copied_notes("summeval"))
    assert references.copied_notes("hanna") == []


def test_rouge1_f1_is_not_paired_with_hannas_recall_row() -> None:
    references = load_reference_tables(TABLES)
    # HANNA's ROUGE-1 (Tables 5.5-5.7) is ROUGE-1 recall: only the recall variant is the same metric
    assert published_match("metric:rouge1", references, "hanna", "coherence", "pearson") is None
    assert published_match("metric:rouge1-recall", references, "hanna", "coherence", "pearson") == 0.567
    assert published_match("metric:bleu", references, "hanna", "average", "kendall") == 0.245
    # a table that does not say how its ROUGE was computed pairs with nothing
    assert published_match("metric:rouge1", references, "qags_cnndm", "factual consistency", "pearson") is None
