"""No train/test leakage (issue #15, item 1): `annotate` and `import` leave out inputs of the
meta-evaluation sets (real SummEval / SFRES data, real CLI, stand-in model servers), training
records its inputs' digests, and meta-eval warns when a judge is scored on its training inputs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.standin import Reply

from spanjudge.core.overlap import input_digest, normalise_text
from spanjudge.data_gen.decontaminate import load_blocklist
from spanjudge.eval.correlation.runner import run_meta_eval, training_inputs
from spanjudge.eval.judging.judges import make_judge
from spanjudge.eval.judging.suite import load_suite

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
FRESH = "A small town in the hills opened its first public library on Saturday, after ten years of fundraising."

pytestmark = pytest.mark.timeout(300)


def test_the_rule_ignores_case_spacing_and_edge_punctuation_only() -> None:
    assert normalise_text("  «The CAT\n\t sat.»  ") == "the cat sat"
    assert input_digest({"Article": "The cat sat."}) == input_digest({"Source": "  the CAT\n sat "})
    assert input_digest({"Article": "The cat sat."}) != input_digest({"Article": "The cat sat on."})
    assert input_digest({"a": "x", "b": "y"}) == input_digest({"b": "y", "a": "x"})  # order of headers


def _summeval_article(shared_data: Path) -> tuple[str, str]:
    row = json.loads((shared_data / "meta_eval/summeval/summeval.jsonl").open().readline())
    return row["doc_id"], row["source"]


def _disguised(text: str) -> str:
    """The same article as another corpus might carry it: other case, spacing, a closing quote."""
    return "  " + text.upper().replace(" ", "  \n ", 3) + ' "'


def _write_sources(tmp_path: Path, rows: list[dict[str, Any]]) -> Path:
    data = tmp_path / "corpus.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    sources = {
        "seed": 0,
        "n_systems": 1,
        "n_aspects": 1,
        "sources": [
            {"name": "corpus", "format": "jsonl", "path": str(data), "task": "news_summarization",
             "aspects": ["relevance"],
             "fields": {"input_id": "input_id", "system": "system", "inputs_from": "inputs", "output": "output"}}
        ],
    }  # fmt: skip
    path = tmp_path / "sources.yaml"
    path.write_text(yaml.safe_dump(sources))
    return path


def _write_ensemble(tmp_path: Path, url: str) -> Path:
    def role(name: str) -> dict[str, Any]:
        return {"name": name, "backend": {"kind": "openai", "model": name, "endpoints": [url], "retries": 0}}

    ensemble = {"name": "stand-ins", "annotators": [role("a")], "supervisor": role("sup")}
    path = tmp_path / "ensemble.yaml"
    path.write_text(yaml.safe_dump(ensemble))
    return path


def _annotate(ensemble: Path, sources: Path, out: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [SPANJUDGE, "annotate", "--ensemble", str(ensemble), "--sources", str(sources), "--out", str(out)]
    return subprocess.run([*command, *extra], capture_output=True, text=True, timeout=240)


def _records(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for name in ("train", "validation") for line in (out / f"{name}.jsonl").open()]


def test_annotate_excludes_meta_eval_inputs_and_lists_them(serve, tmp_path: Path, shared_data: Path) -> None:
    _, url = serve([Reply(text="No Error\n\nOverall score: Good")])
    doc_id, article = _summeval_article(shared_data)
    sources = _write_sources(
        tmp_path,
        [
            {"input_id": "leak", "system": "s1", "inputs": {"Article": _disguised(article)}, "output": "A summary."},
            {"input_id": "fresh", "system": "s1", "inputs": {"Article": FRESH}, "output": "A library opened."},
        ],
    )
    ensemble = _write_ensemble(tmp_path, url)

    result = _annotate(ensemble, sources, tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert [r["input_id"] for r in _records(tmp_path / "out")] == ["fresh"]
    run = json.loads((tmp_path / "out" / "run.json").read_text())["decontamination"]
    assert run["against"].endswith("eval/thesis.yaml") and not run["allow_overlap"]
    assert run["overlapping_inputs"] == 1 and run["excluded_examples"] == 1
    assert run["overlaps"] == [f"corpus/leak ({tmp_path / 'corpus.jsonl'}:1) = summeval/{doc_id}"]
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())["decontamination"]
    assert stats["excluded_examples"] == 1 and "casefolded" in stats["rule"]
    assert "1 inputs occur in the meta-evaluation sets" in result.stderr

    allowed = _annotate(ensemble, sources, tmp_path / "allowed", "--allow-overlap")
    assert allowed.returncode == 0, allowed.stderr
    assert sorted(r["input_id"] for r in _records(tmp_path / "allowed")) == ["fresh", "leak"]
    assert allowed.stderr.count("warning: --allow-overlap") == 2  # before the run and in the summary
    kept = json.loads((tmp_path / "allowed" / "run.json").read_text())["decontamination"]
    assert kept["allow_overlap"] and kept["warning"] and kept["overlapping_inputs"] == 1
    assert kept["excluded_examples"] == 0


def test_a_file_to_decontaminate_against(tmp_path: Path, shared_data: Path) -> None:
    held_out = tmp_path / "held_out.jsonl"
    held_out.write_text(json.dumps({"id": "x", "inputs": {"Article": FRESH.lower()}}) + "\n")
    blocklist = load_blocklist(held_out, shared_data)
    assert blocklist.find({"Article": FRESH}) == "x"
    suite = load_blocklist(SUITE, shared_data, only=["sfres"])
    assert suite.find({"Article": FRESH}) is None and all(w.startswith("sfres/") for w in suite.digests.values())


def test_import_excludes_meta_eval_inputs(tmp_path: Path, shared_data: Path) -> None:
    _, article = _summeval_article(shared_data)

    def record(input_id: str, text: str) -> dict[str, Any]:
        return {"dataset": "corpus", "input_id": input_id, "system": "s", "inputs": {"Article": text},
                "outputs": {"Summary": "A summary."}, "aspect_name": "relevance", "task_name": "news_summarization",
                "evaluation": {"errors": [], "score": 80}}  # fmt: skip

    (tmp_path / "release.json").write_text(json.dumps([record("leak", article), record("fresh", FRESH)]))
    config = {"name": "t", "source": {"format": "openlgauge", "path": "release.json"}, "validation_fraction": 0}
    (tmp_path / "import.yaml").write_text(yaml.safe_dump(config))
    out = tmp_path / "out"
    command = [SPANJUDGE, "import", "--config", str(tmp_path / "import.yaml"), "--out", str(out)]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert [r["input_id"] for r in _records(out)] == ["fresh"]
    run = json.loads((out / "run.json").read_text())
    assert run["records"] == 1 and run["decontamination"]["excluded_examples"] == 1


def test_meta_eval_warns_once_per_judge_trained_on_its_items(tmp_path: Path, shared_data: Path) -> None:
    """The warning reads the judge's spanjudge.json `train_inputs` (written by training, see
    test_checks_before_model.py) and counts the items of each set it was trained on."""
    from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite

    suite = load_suite(SUITE)
    items = load_suite_dataset(open_suite(suite, SUITE, shared_data), "sfres", max_items=8).items
    trained = sorted({input_digest(i.inputs) for i in items[:3]})
    adapter = tmp_path / "run" / "adapter"
    adapter.mkdir(parents=True)
    (adapter / "spanjudge.json").write_text(json.dumps({"train_inputs": {"rule": "...", "sha1": trained}}))
    assert training_inputs(str(tmp_path / "run")) == frozenset(trained)  # the run folder finds its adapter

    judge = make_judge("metric:bleu", out=tmp_path / "eval")
    result = run_meta_eval(
        suite.model_copy(update={"bootstrap": suite.bootstrap.model_copy(update={"resamples": 0})}),
        SUITE, [judge], tmp_path / "eval", data_root=shared_data, max_items=8, datasets=["sfres", "sfhot"],
        trained_on={judge.name: training_inputs(str(adapter))},
    )  # fmt: skip
    (warning,) = [w for w in result.warnings if "trained on" in w]
    hits = [i for i in items if input_digest(i.inputs) in trained]
    assert warning.startswith(f"{judge.name} was trained on {len({i.input_id for i in hits})} inputs")
    assert f"sfres {len({i.input_id for i in hits})} inputs / {len(hits)} items" in warning
    assert "sfhot" not in warning
