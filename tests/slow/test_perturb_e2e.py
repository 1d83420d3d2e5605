"""The four perturbation benchmarks end to end on CPU, on real data: built with rule-based
perturbations and LLM-made ones from the real tiny model (SmolLM2-135M on llama.cpp), then
scored by the real smoke judge (trained in conftest's `trained_judge`), with reports, plots and
span metrics. Samples are tiny so this stays a few minutes; the numbers are not meaningful,
the plumbing and the accounting (made / rejected / unscored) are what is checked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import pytest
from support.training_runs import TrainedRun

from spanjudge.app.cli import main as cli_main
from spanjudge.core.configio import configs_dir
from spanjudge.eval.perturb.benchmark import load_benchmark
from spanjudge.inference.judge import PreparedJudge

JUDGE_OPTIONS = ["--judge-option", "max_new_tokens=64", "--judge-option", "batch_size=8", "--judge-option", "retries=0"]
# The smoke judge reads its prompts in a short context, its inputs cut to fit as judging cuts any prompt
# (`max_context`): reading the whole article or table is most of a CPU judgment and tests nothing more here.
# Contexts from the longest prompts less their inputs (SmolLM2's tokens): a SummEval prompt's other parts take
# 250-320, a quintd-1 one's 430-550, a RotoWire one's 600-730.
SUMMEVAL_CONTEXT = 512  # the prompt's share of the context, for SummEval's articles
TABLES_CONTEXT = 832  # the prompt's share of the context, for quintd-1's and RotoWire's tables
BUILDS = {
    "dhp": ["--n", "1", "--perturbation", "dhp.char_deletion.minor", "--perturbation", "dhp.reordering.minor",
            "--perturbation", "dhp.fictional_entities.minor", "--aspect", "coherence", "--aspect", "fluency"],
    "dual": ["--n", "1", "--steps", "1"],
    "attacks": ["--n", "1", "--perturbation", "attack.word_exchange", "--perturbation", "attack.negation",
                "--aspect", "grammaticality", "--aspect", "non-contradiction", "--aspect", "overall"],
    "prompt": ["--n", "1"],
}  # fmt: skip


def _never_loaded(prepared: PreparedJudge) -> NoReturn:
    raise AssertionError("the judge's model was loaded, though every judgment was stored")


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.slow
def test_four_benchmarks_built_with_the_tiny_model_and_scored_by_the_smoke_judge(
    smollm2_server: object,
    trained_judge: TrainedRun,
    shared_data: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    perturber = ["--perturber", str(configs_dir() / "perturb" / "tiny_local.yaml"),
                 "--endpoint", smollm2_server.base_url]  # type: ignore[attr-defined]  # fmt: skip
    for kind, options in BUILDS.items():
        folder = tmp_path / kind
        args = ["perturb", "--benchmark", kind, "--source", "summeval", "--out", str(folder), *options]
        assert cli_main([*args, *perturber, "--data-dir", str(shared_data)]) == 0, capsys.readouterr().err
        benchmark = load_benchmark(folder)
        info = benchmark.info
        made, rejected = sum(info["made"].values()), sum(sum(r.values()) for r in info["rejected"].values())
        printed = capsys.readouterr().err
        assert f"({made} perturbed, {rejected} rejected)" in printed  # every outcome accounted for
        for item in benchmark.items:
            for start, end in item.spans:
                assert 0 <= start <= end <= len(item.output)
        if kind == "dhp":
            # rule-based sets are exact and complete: every sampled reference is perturbed
            assert info["made"]["dhp.char_deletion.minor"] == 1 and info["made"]["dhp.reordering.minor"] == 1
            llm = info["made"].get("dhp.fictional_entities.minor", 0)
            llm_rejected = sum(info["rejected"].get("dhp.fictional_entities.minor", {}).values())
            assert llm + llm_rejected == 1  # the tiny model's text: validated or rejected with a reason
            frozen = _rows(folder / "frozen.jsonl")
            assert len(frozen) == 1 and all(r["provenance"]["model"] for r in frozen if "provenance" in r)
            # a rebuild reuses the frozen LLM texts: no model call, identical items
            before = (folder / "items.jsonl").read_text()
            assert cli_main([*args, *perturber, "--data-dir", str(shared_data)]) == 0
            assert "made 0, reused 1" in capsys.readouterr().err
            assert (folder / "items.jsonl").read_text() == before
        if kind == "prompt":
            injected = [i for i in benchmark.items if i.perturbation]
            assert injected and all("Human expert rating" in i.inputs for i in injected)

        report_dir = tmp_path / f"{kind}-eval"
        context = ["--judge-option", f"max_context={SUMMEVAL_CONTEXT + 64}"]
        judge = ["--judge", f"distilled:{trained_judge.adapter}", *JUDGE_OPTIONS, *context]
        assert cli_main(["meta-eval", "--benchmark", str(folder), "--out", str(report_dir), *judge]) == 0
        [results_path] = list(report_dir.glob("*/results.json"))
        results = json.loads(results_path.read_text())
        judgments = _rows(next((report_dir / "judgments").glob("*.jsonl")))
        expected = sum(len(item.aspects) for item in benchmark.items)
        assert len(judgments) == expected  # every (text, aspect) judged once: scored or unscored with reason
        assert all((j["score"] is None) == bool(j["unscored_reason"]) for j in judgments)
        report = (results_path.parent / "report.md").read_text()
        assert report.startswith(f"# {kind} benchmark")
        if kind == "dhp":
            assert set(results["metrics"]["sets"]) == set(benchmark.perturbations)
            assert (results_path.parent / "dhp_discernment.png").exists() or results["metrics"]["sets_without_p"]
            assert results["spans"] is None or results["spans"]["texts"] > 0
        if kind == "attacks":
            assert (results_path.parent / "attacks_heatmap.png").stat().st_size > 10_000
            assert "GPT-3.5 (published, 002 Table 4)" in report
        if kind == "dual":
            assert set(results["metrics"]["aspects"]) == {"coherence", "consistency", "fluency", "relevance"}
            assert "(published)" in report
        # a re-run asks the judge nothing more, and so never loads its model
        mtime = next((report_dir / "judgments").glob("*.jsonl")).stat().st_mtime_ns
        with monkeypatch.context() as patched:
            patched.setattr(PreparedJudge, "load", _never_loaded)
            assert cli_main(["meta-eval", "--benchmark", str(folder), "--out", str(report_dir), *judge]) == 0
        assert next((report_dir / "judgments").glob("*.jsonl")).stat().st_mtime_ns == mtime


@pytest.mark.slow
@pytest.mark.parametrize("span_set", ["rotowire", "quintd1"])
def test_span_metrics_for_the_number_baseline_and_the_judge(
    span_set: str, trained_judge: TrainedRun, shared_data: Path, tmp_path: Path
) -> None:
    out = tmp_path / span_set
    args = ["meta-eval", "--spans", span_set, "--out", str(out), "--max-items", "1", "--data-dir", str(shared_data)]
    context = ["--judge-option", f"max_context={TABLES_CONTEXT + 64}"]
    assert cli_main([*args, "--judge", f"distilled:{trained_judge.adapter}", *JUDGE_OPTIONS, *context]) == 0
    results = json.loads((out / "spans.json").read_text())
    baseline = results.pop("baseline: mark every number")
    ceiling = results.pop("ceiling: second human annotator", None)
    assert (ceiling is not None) == (span_set == "quintd1")  # the human-human row of human_corr
    assert baseline["scored"] == 1 and baseline["overlap"]["tp"] > 0  # numbers are where these texts err
    [judge] = results.values()
    assert judge["scored"] + judge["unscored"] + judge["missing"] == 1
    assert "| baseline: mark every number | overlap |" in (out / "spans.md").read_text()


@pytest.mark.slow
def test_span_metrics_of_a_judge_read_with_its_probabilities_use_its_expected_counts(
    trained_judge: TrainedRun, shared_data: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--judge-option score=expected`: the spans the judge writes with probability ≥ 0.5 and its
    expected number of errors (what the count correlation uses), as the distillation protocol's
    `+expected` rows read them."""
    from spanjudge.eval.spans.agreement import span_agreement
    from spanjudge.eval.spans.quintd import load_quintd1

    out = tmp_path / "quintd1"
    options = ["--judge-option", "max_new_tokens=160", "--judge-option", "retries=0", "--judge-option",
               "constrained=true", "--judge-option", "score=expected",
               "--judge-option", f"max_context={TABLES_CONTEXT + 160}"]  # fmt: skip
    args = ["meta-eval", "--spans", "quintd1", "--out", str(out), "--max-items", "3", "--data-dir", str(shared_data)]
    assert cli_main([*args, "--judge", f"distilled:{trained_judge.adapter}", *options]) == 0
    results = json.loads((out / "spans.json").read_text())
    [name] = [key for key in results if key.startswith("distilled:")]
    assert name.endswith("(expected score)")
    [store] = (out / "judgments").glob("distilled*.jsonl")
    rows = {row["id"]: row for row in map(json.loads, store.read_text().splitlines())}
    scored = {k: row["detail"] for k, row in rows.items() if row["score"] is not None}
    assert scored, "the grammar-held judge scores its outputs"
    for detail in scored.values():
        assert detail["errors"] >= len(detail["spans"]) and 0 <= detail["expected_errors"] <= 8
    docs = load_quintd1(shared_data, limit=3)
    predictions = {k: [tuple(s) for s in d["spans"]] for k, d in scored.items()}
    again = span_agreement(docs, predictions, counts={k: d["expected_errors"] for k, d in scored.items()})
    assert results[name]["agreement"]["count_pearson"] == again["count_pearson"]
    # judgments kept without the expected reading (an older store) are not read as if they had it
    stale = [{**row, "detail": {"errors": 0, "spans": []}} for row in rows.values()]
    store.write_text("".join(json.dumps(row) + "\n" for row in stale))
    capsys.readouterr()
    assert cli_main([*args, "--judge", f"distilled:{trained_judge.adapter}", *options]) == 2
    assert "have no expected number of errors; delete" in capsys.readouterr().err


def test_a_damaged_benchmark_file_names_the_line(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "b"
    args = ["perturb", "--benchmark", "attacks", "--source", "summeval", "--out", str(folder), "--n", "2",
            "--perturbation", "attack.word_exchange", "--data-dir", str(shared_data)]  # fmt: skip
    assert cli_main(args) == 0
    evaluate = ["meta-eval", "--benchmark", str(folder), "--out", str(tmp_path / "o"), "--judge", "metric:bleu"]
    lines = (folder / "items.jsonl").read_text().splitlines()
    damaged = lines[2].replace('"aspects": [', '"aspects": ["charm", ')
    (folder / "items.jsonl").write_text("\n".join([*lines[:2], damaged, *lines[3:]]) + "\n")
    capsys.readouterr()
    assert cli_main(evaluate) == 2
    assert "items.jsonl:3: aspect 'charm' is not an aspect" in capsys.readouterr().err
    (folder / "items.jsonl").write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    assert cli_main(evaluate) == 2
    err = capsys.readouterr().err
    assert "items.jsonl:2: not valid JSON" in err and "Traceback" not in err


def test_llm_perturbations_without_a_perturber_are_a_clear_error(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["perturb", "--benchmark", "dhp", "--source", "summeval", "--out", str(tmp_path / "b"), "--n", "1",
            "--perturbation", "dhp.grammatical_errors.minor", "--data-dir", str(shared_data)]  # fmt: skip
    assert cli_main(args) == 2
    err = capsys.readouterr().err
    assert "LLM-made" in err and "--perturber" in err and "Traceback" not in err
    assert cli_main(["perturb", "--benchmark", "dhp", "--source", "hanna", "--out", str(tmp_path / "c")]) == 2
    assert "built from summeval" in capsys.readouterr().err
