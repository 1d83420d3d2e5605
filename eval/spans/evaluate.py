"""`meta-eval --spans rotowire|quintd1`: error-span precision/recall and the quintd-1 paper's
agreement of each judge (and of the mark-every-number baseline) on a span set.

Four steps, one function each: the span set as documents and a meta-eval dataset (`load_span_set`),
each judge's stored judgments as spans (`judge_spans`), the measures of a set of spans against the gold
(`measured`), and the table (`spans_markdown`)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.fileio import atomic_write_text
from spanjudge.core.progress import labelled_bars
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judgment import MetaJudge
from spanjudge.eval.judging.store import JudgmentStore, judge_missing, judgment_path
from spanjudge.eval.judging.suite import AspectSpec, DatasetSpec
from spanjudge.eval.spans.agreement import metric_interval, span_agreement
from spanjudge.eval.spans.calibration import calibration, calibration_markdown, reliability_png
from spanjudge.eval.spans.decision_fit import check_held_out, fit_decision_rule
from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.eval.spans.gamma import gamma_agreement
from spanjudge.eval.spans.metrics import MATCHING, evaluate_spans, mark_numbers, snap_to_words
from spanjudge.eval.spans.sets import choose_set
from spanjudge.inference.decisions import save_rule

HUMAN_CEILING = "ceiling: second human annotator"
Spans = list[tuple[int, int]] | None  # a system's spans on one output; None: unscored


@dataclass(frozen=True)
class SpanSet:
    """A span set's documents (gold spans, snapped to words when asked) as a meta-eval dataset of one aspect."""

    docs: list[SpanDocument]
    dataset: MetaDataset
    aspect: AspectSpec


def evaluate_span_set(
    name: str,
    judges: Sequence[MetaJudge],
    out: Path,
    data_root: Path | None,
    max_items: int | None,
    *,
    gamma: bool = False,
    snap_words: bool = False,
    fit_decisions: bool = False,
) -> Path:
    """Error-span P/R/F1 of each judge, and of the mark-every-number baseline, on a span set.

    Each system also gets the quintd-1 paper's agreement (Pearson r of per-output error
    counts and of per-token error labels) with input-bootstrap intervals: `count_pearson` and
    `token_pearson` as {value, low, high, undefined_resamples, reason}, and the whole
    `span_agreement` row under `agreement`. With `gamma`, factgenie's γ agreement too
    (`gamma.py`). With `snap_words`, every span, predicted and gold, is first grown to whole
    words (`metrics.snap_to_words`); each row records whether it was.

    A set with a human ceiling (quintd1: the crowd's second annotator scored against the first on the outputs
    `human_corr` annotates twice, at most `max_items` of them) gets it as a last row, with the same metrics.

    A judge read with its probabilities gets their calibration (`eval.spans.calibration`: ECE per measure in
    spans.json and spans.md, a reliability diagram `calibration-JUDGE.png`). With `fit_decisions`, this set is
    the judges' dev split: their decision thresholds are fitted on it (`eval.spans.decision_fit`) and stored with each
    judge in a local folder. A judge whose stored thresholds were fitted on inputs of this set is refused.
    """
    spans = load_span_set(name, [j.name for j in judges], data_root, max_items, snap_words)
    docs = spans.docs
    for judge in judges:  # thresholds chosen on these inputs would report their own choice as a result
        check_held_out(getattr(judge, "decisions", None), docs, judge.name, name)
    results: dict[str, Any] = {
        "baseline: mark every number": measured(docs, {d.id: mark_numbers(d.output) for d in docs}, gamma, snap_words)
    }
    calibrated: dict[str, dict[str, Any]] = {}
    for judge in judges:
        predictions, expected, readings = judge_spans(judge, spans, out, name)
        results[judge.name] = measured(docs, predictions, gamma, snap_words, expected or None)
        if readings:  # a judge read with its probabilities: how well they match the humans
            calibrated[judge.name] = results[judge.name]["calibration"] = calibration(docs, readings)
            reliability_png(
                out / f"calibration-{_file_name(judge.name)}.png", calibrated[judge.name], f"{judge.name} on {name}"
            )
            if fit_decisions:
                results[judge.name]["decisions"] = _fit_and_store(judge, docs, readings, name)
    ceiling = choose_set(name).ceiling(data_root, max_items)
    if ceiling is not None:
        first, second = ceiling
        if snap_words:
            first = [_snapped(d) for d in first]
        results[HUMAN_CEILING] = measured(first, second, gamma, snap_words)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "spans.json", json.dumps(results, indent=2) + "\n")
    markdown = spans_markdown(name, len(docs), results, gamma, snap_words)
    if calibrated:
        markdown += "\n".join([*calibration_markdown(calibrated), *_decisions_lines(results)]) + "\n"
    atomic_write_text(out / "spans.md", markdown)
    return out / "spans.md"


def _fit_and_store(judge: MetaJudge, docs: Sequence[SpanDocument], readings: dict[str, Any], name: str) -> dict:
    """τ₀ and τ fitted on this span set (its dev split, `--fit-decisions`), stored with a judge in a local folder
    (its spanjudge.json's `decisions`); the rule as results record it (without the input digests)."""
    split = choose_set(name).fit_split()
    rule = fit_decision_rule(docs, readings, split=split, data=f"{name} ({len(docs)} outputs)").rule
    location = getattr(judge, "location", None)  # a distilled judge's model or adapter; a scores file has none
    folder = None if location is None else Path(location).expanduser()
    stored = save_rule(folder, rule) if folder is not None and folder.is_dir() else None
    return {
        **rule.model_dump(mode="json", exclude={"fitted_on": {"sha1"}}),
        "stored_in": str(stored) if stored else None,
    }


def _decisions_lines(results: dict[str, Any]) -> list[str]:
    fitted = {judge: r["decisions"] for judge, r in results.items() if "decisions" in r}
    if not fitted:
        return []
    lines = ["", "## Decision thresholds fitted on this set (its dev split)", "",
             "| judge | 'No Error' when P(no error) ≥ | keep a span at confidence ≥ | objective (written replies) "
             "| stored in |",
             "|---|---:|---:|---|---|"]  # fmt: skip
    for judge, rule in fitted.items():
        fit = rule["fitted_on"]
        lines.append(
            f"| {judge} | {_threshold(rule['no_error_threshold'])} | {_threshold(rule['min_confidence'])} | "
            f"{fit['value']:.3f} ({fit['written_value']:.3f}) | {rule['stored_in'] or '–'} |"
        )
    return lines


def _file_name(judge: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", judge).strip("-") or "judge"


def _threshold(value: float | None) -> str:
    return "– (written)" if value is None else f"{value:g}"


def load_span_set(
    name: str, judge_names: Sequence[str], data_root: Path | None, max_items: int | None, snap_words: bool
) -> SpanSet:
    """A registered span set (`sets.SPAN_SETS`, named `NAME[:ARGUMENT]`) as documents and a dataset of its one
    aspect: faithfulness (RotoWire), accuracy (quintd-1), the campaign's own (factgenie)."""
    chosen = choose_set(name)
    chosen.check_judges(judge_names)
    docs, aspect_name = chosen.load(data_root, max_items)
    if snap_words:
        docs = [_snapped(d) for d in docs]
    task = load_catalog().task(docs[0].task_id)
    aspect = AspectSpec(name=aspect_name or next(iter(task.aspects)), human="-")
    spec = DatasetSpec(name=f"spans-{Path(name).name}", level="global", aspects=(aspect,))
    items = [
        MetaItem(
            dataset=spec.name,
            input_id=d.id,
            system="output",
            task_id=task.id,
            inputs=d.inputs,
            output=d.output,
            where=f"{name}: {d.id}",
            id=d.id,
            human={},
        )
        for d in docs
    ]
    return SpanSet(list(docs), MetaDataset(spec, task, items, Path(name)), aspect)


def judge_spans(
    judge: MetaJudge, spans: SpanSet, out: Path, name: str
) -> tuple[dict[str, Spans], dict[str, float], dict[str, dict[str, Any] | None]]:
    """The judge's spans per document (judging those its store lacks); for a judge read with its probabilities
    (score=expected), its expected number of errors per scored document; and, where every scored judgment was
    read with its probabilities, each one's reading as `eval.spans.calibration` takes it (None: unscored)."""
    spec, aspect, items = spans.dataset.spec, spans.aspect, spans.dataset.items
    store = JudgmentStore(judgment_path(out, judge))
    todo = [i for i in items if (spec.name, aspect.name, i.id) not in store.found]
    with labelled_bars() as bars:
        label = f"{spec.name.removeprefix('spans-')}/{judge.name}"
        judge_missing(judge, store, spans.dataset, aspect, todo, bars(label, len(todo)))
    predictions: dict[str, Spans] = {}
    expected: dict[str, float] = {}
    readings: dict[str, dict[str, Any] | None] = {}
    for item in items:
        found = store.found.get((spec.name, aspect.name, item.id))
        if found is None:
            continue
        detail = found.detail or {}
        written = detail.get("spans") if found.score is not None else None
        pairs = cast(list[tuple[int, int]], written)  # [start, end] pairs, as the judge's detail keeps them
        predictions[item.id] = None if written is None else [(start, end) for start, end in pairs]
        if written is not None and "expected_errors" in detail:
            expected[item.id] = float(cast(float, detail["expected_errors"]))
        readings[item.id] = None if written is None else _reading(detail)
    scored = sum(p is not None for p in predictions.values())
    # judgments stored before score=expected kept its reading (or by hand) would be read as written ones
    wants_expected = getattr(judge, "score_kind", None) == "expected"
    if (expected or wants_expected) and len(expected) != scored:
        raise SpanjudgeError(
            f"{judge.name}: {scored - len(expected)} of its {scored} judgments on {name} have no expected "
            f"number of errors; delete {store.path} to judge them again"
        )
    if any(found is not None and "p_no_error" not in found for found in readings.values()):
        readings = {}  # judged without probabilities (or stored before they were kept): nothing to calibrate
    return predictions, expected, readings


def _reading(detail: dict[str, Any]) -> dict[str, Any]:
    """A stored judgment's detail as the calibration and the fit read it (the written reply's spans)."""
    if "p_no_error" not in detail:
        return {}
    return {
        "spans": detail["written_spans"],
        "span_written": detail["span_confidence"],
        "errors": detail["written_errors"],
        "p_no_error": detail["p_no_error"],
        "expected_errors": detail["expected_errors"],
    }


def measured(
    docs: Sequence[SpanDocument],
    predictions: Mapping[str, Spans],
    gamma: bool,
    snap_words: bool,
    counts: dict[str, float] | None = None,
) -> dict[str, Any]:
    """P/R/F1 (exact, overlap, token), count r and token r with their intervals, and γ when asked, of
    `predictions` against the documents' gold spans (`counts`: error counts to correlate instead of the spans')."""
    if snap_words:
        text = {d.id: d.output for d in docs}
        predictions = {k: None if v is None else snap_to_words(v, text[k]) for k, v in predictions.items()}
    result = evaluate_spans(docs, predictions)
    row = span_agreement(docs, predictions, counts=counts)
    result |= {
        "count_pearson": metric_interval(row, "count_pearson"),
        "token_pearson": metric_interval(row, "token_pearson"),
        "agreement": row,
        "snap_to_words": snap_words,
    }
    return result | ({"gamma": gamma_agreement(docs, predictions)} if gamma else {})


def spans_markdown(name: str, documents: int, results: dict[str, Any], gamma: bool, snap_words: bool) -> str:
    """spans.md: what the columns mean and each variant's matching rule, then a row per system and variant (exact,
    overlap, token, mpp)."""
    lines = [
        f"# Error-span precision / recall on {name} ({documents} documents)",
        "",
        "Count r / token r: Pearson r with the gold spans of the number of errors per output and of the"
        " per-token error labels (the quintd-1 paper's agreement), with 95% input-bootstrap intervals.",
        "",
        "Each variant's matching rule, all micro-averaged over the scored documents:",
        "",
        *(f"- {rule}" for rule in MATCHING.values()),
        "",
        *(
            [
                "γ: factgenie's γ agreement (pygamma-agreement, one category), mean over the outputs both sides marked;"
                " s_empty: factgenie's score of the others, 1 / (1 + spans)."
            ]
            if gamma
            else []
        ),
        *(["Every span, predicted and gold, snapped to whole words first."] if snap_words else []),
        *(
            [
                f"{HUMAN_CEILING}: quintd-1's doubly annotated outputs (human_corr), the second crowd worker's spans"
                " scored against the first's: how far two humans agree."
            ]
            if HUMAN_CEILING in results
            else []
        ),
        "",
        "| system | variant | precision | recall | F1 | scored | unscored | count r | token r |"
        + (" γ | s_empty |" if gamma else ""),
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if gamma else ""),
    ]
    for system, r in results.items():
        g = r.get("gamma")
        gamma_cells = ""
        if g:
            gamma_cells = f" {_mean(g['gamma'], g['gamma_outputs'])} | {_mean(g['s_empty'], g['s_empty_outputs'])} |"
        for variant in MATCHING:
            v = r[variant]
            lines.append(f"| {system} | {variant} | {v['precision']:.3f} | {v['recall']:.3f} | {v['f1']:.3f} | "
                         f"{r['scored']} | {r['unscored'] + r['missing']} | {_shown(r['count_pearson'])} | "
                         f"{_shown(r['token_pearson'])} |" + gamma_cells)  # fmt: skip
    return "\n".join(lines) + "\n"


def _snapped(doc: SpanDocument) -> SpanDocument:
    gold = [GoldSpan(*span, g.category) for g in doc.gold for span in snap_to_words([(g.start, g.end)], doc.output)]
    return replace(doc, gold=tuple(gold))


def _shown(interval: dict[str, Any]) -> str:
    if interval["value"] is None:
        return f"n/a ({interval['reason']})"
    if interval["low"] is None:
        return f"{interval['value']:.3f}"
    return f"{interval['value']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"


def _mean(value: float | None, n: int) -> str:
    return "n/a" if value is None else f"{value:.3f} (n={n})"
