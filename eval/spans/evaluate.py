"""`meta-eval --spans rotowire|quintd1`: error-span precision/recall and the quintd-1 paper's
agreement of each judge (and of the mark-every-number baseline) on a span set."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from spanjudge.core.progress import labelled_bars

HUMAN_CEILING = "ceiling: second human annotator"


def evaluate_span_set(
    name: str,
    judges: Sequence[Any],
    out: Path,
    data_root: Path | None,
    max_items: int | None,
    *,
    gamma: bool = False,
    snap_words: bool = False,
) -> Path:
    """Error-span P/R/F1 of each judge, and of the mark-every-number baseline, on a span set.

    Each system also gets the quintd-1 paper's agreement (Pearson r of per-output error
    counts and of per-token error labels) with input-bootstrap intervals: `count_pearson` and
    `token_pearson` as {value, low, high, undefined_resamples, reason}, and the whole
    `span_agreement` row under `agreement`. With `gamma`, factgenie's γ agreement too
    (`gamma.py`). With `snap_words`, every span, predicted and gold, is first grown to whole
    words (`metrics.snap_to_words`); each row records whether it was.

    On quintd1 a last row is the human ceiling: the crowd's second annotator scored against the
    first on the outputs `human_corr` annotates twice (at most `max_items` of them), with the
    same metrics.
    """
    import json

    from spanjudge.core.catalog import load_catalog
    from spanjudge.core.errors import InputError, SpanjudgeError
    from spanjudge.core.fileio import atomic_write_text

    from ..datasets import MetaDataset, MetaItem
    from ..store import JudgmentStore, judge_missing, judgment_path
    from ..suite import AspectSpec, DatasetSpec
    from .agreement import metric_interval, span_agreement
    from .documents import GoldSpan, SpanDocument
    from .factgenie import PREFIX as FACTGENIE
    from .factgenie import check_judges, load_factgenie_spans
    from .gamma import gamma_agreement
    from .metrics import evaluate_spans, mark_numbers, snap_to_words
    from .quintd import human_pairs, load_quintd1
    from .rotowire import load_rotowire

    def snapped(doc: SpanDocument) -> SpanDocument:
        gold = [GoldSpan(*span, g.category) for g in doc.gold for span in snap_to_words([(g.start, g.end)], doc.output)]
        return replace(doc, gold=tuple(gold))

    def with_agreement(
        on: Sequence[SpanDocument], predictions: dict[str, Any], counts: dict[str, float] | None = None
    ) -> dict[str, Any]:
        if snap_words:
            text = {d.id: d.output for d in on}
            predictions = {k: None if v is None else snap_to_words(v, text[k]) for k, v in predictions.items()}
        result = evaluate_spans(on, predictions)
        row = span_agreement(on, predictions, counts=counts)
        result |= {
            "count_pearson": metric_interval(row, "count_pearson"),
            "token_pearson": metric_interval(row, "token_pearson"),
            "agreement": row,
            "snap_to_words": snap_words,
        }
        return result | ({"gamma": gamma_agreement(on, predictions)} if gamma else {})

    loaders = {"rotowire": load_rotowire, "quintd1": load_quintd1}
    aspect_name = None
    if name.startswith(FACTGENIE):
        check_judges([j.name for j in judges])
        docs, aspect_name = load_factgenie_spans(Path(name.removeprefix(FACTGENIE)), max_items)
    elif name in loaders:
        docs = loaders[name](data_root, limit=max_items)  # type: ignore[operator]
    else:
        raise InputError(f"--spans must be one of {', '.join(loaders)} or {FACTGENIE}FOLDER, got {name!r}")
    if snap_words:
        docs = [snapped(d) for d in docs]
    task = load_catalog().task(docs[0].task_id)
    # faithfulness (RotoWire), accuracy (quintd-1), the campaign's own (factgenie)
    aspect = AspectSpec(name=aspect_name or next(iter(task.aspects)), human="-")
    spec = DatasetSpec(name=f"spans-{Path(name).name}", level="global", aspects=(aspect,))
    items = [MetaItem(d.id, spec.name, d.id, "output", task.id, d.inputs, d.output, {}) for d in docs]
    dataset = MetaDataset(spec, task, items, Path(name))
    baseline = with_agreement(docs, {d.id: mark_numbers(d.output) for d in docs})
    results: dict[str, Any] = {"baseline: mark every number": baseline}
    for judge in judges:
        store = JudgmentStore(judgment_path(out, judge))
        todo = [i for i in items if (spec.name, aspect.name, i.id) not in store.found]
        with labelled_bars() as bars:
            label = f"{spec.name.removeprefix('spans-')}/{judge.name}"
            judge_missing(judge, store, dataset, aspect, todo, bars(label, len(todo)))
        predictions: dict[str, Any] = {}
        expected: dict[str, float] = {}  # a judge read with its probabilities (score=expected): its expected counts
        for item in items:
            found = store.found.get((spec.name, aspect.name, item.id))
            if found is None:
                continue
            detail = found.detail or {}
            spans = detail.get("spans") if found.score is not None else None
            predictions[item.id] = None if spans is None else [tuple(s) for s in spans]
            if spans is not None and "expected_errors" in detail:
                expected[item.id] = float(detail["expected_errors"])
        scored = sum(p is not None for p in predictions.values())
        # judgments stored before score=expected kept its reading (or by hand) would be read as written ones
        wants_expected = getattr(judge, "score_kind", None) == "expected"
        if (expected or wants_expected) and len(expected) != scored:
            raise SpanjudgeError(
                f"{judge.name}: {scored - len(expected)} of its {scored} judgments on {name} have no expected "
                f"number of errors; delete {store.path} to judge them again"
            )
        results[judge.name] = with_agreement(docs, predictions, expected or None)
    if name == "quintd1":
        first, second = human_pairs(data_root, max_items)
        if snap_words:
            first = [snapped(d) for d in first]
        results[HUMAN_CEILING] = with_agreement(first, second)
    out.mkdir(parents=True, exist_ok=True)
    gamma_header = " γ | s_empty |" if gamma else ""
    lines = [
        f"# Error-span precision / recall on {name} ({len(docs)} documents)",
        "",
        "Count r / token r: Pearson r with the gold spans of the number of errors per output and of the"
        " per-token error labels (the quintd-1 paper's agreement), with 95% input-bootstrap intervals.",
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
        "| system | variant | precision | recall | F1 | scored | unscored | count r | token r |" + gamma_header,
        "|---|---|---|---|---|---|---|---|---|" + ("---|---|" if gamma else ""),
    ]

    def shown(interval: dict[str, Any]) -> str:
        if interval["value"] is None:
            return f"n/a ({interval['reason']})"
        if interval["low"] is None:
            return f"{interval['value']:.3f}"
        return f"{interval['value']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"

    def mean(value: float | None, n: int) -> str:
        return "n/a" if value is None else f"{value:.3f} (n={n})"

    for system, r in results.items():
        g = r.get("gamma")
        gamma_cells = ""
        if g:
            gamma_cells = f" {mean(g['gamma'], g['gamma_outputs'])} | {mean(g['s_empty'], g['s_empty_outputs'])} |"
        for variant in ("exact", "overlap", "token"):
            v = r[variant]
            lines.append(f"| {system} | {variant} | {v['precision']:.3f} | {v['recall']:.3f} | {v['f1']:.3f} | "
                         f"{r['scored']} | {r['unscored'] + r['missing']} | {shown(r['count_pearson'])} | "
                         f"{shown(r['token_pearson'])} |" + gamma_cells)  # fmt: skip
    atomic_write_text(out / "spans.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / "spans.md", "\n".join(lines) + "\n")
    return out / "spans.md"
