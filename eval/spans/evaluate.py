"""`meta-eval --spans rotowire|quintd1`: error-span precision/recall and the quintd-1 paper's
agreement of each judge (and of the mark-every-number baseline) on a span set."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from spanjudge.core.progress import labelled_bars


def evaluate_span_set(
    name: str, judges: Sequence[Any], out: Path, data_root: Path | None, max_items: int | None
) -> Path:
    """Error-span P/R/F1 of each judge, and of the mark-every-number baseline, on a span set.

    Each system also gets the quintd-1 paper's agreement (Pearson r of per-output error
    counts and of per-token error labels) with input-bootstrap intervals: `count_pearson` and
    `token_pearson` as {value, low, high, undefined_resamples, reason}, and the whole
    `span_agreement` row under `agreement`.
    """
    import json

    from spanjudge.core.errors import InputError
    from spanjudge.core.fileio import atomic_write_text
    from spanjudge.inference.catalog import load_catalog

    from ..datasets import MetaDataset, MetaItem
    from ..store import JudgmentStore, judge_missing, judgment_path
    from ..suite import AspectSpec, DatasetSpec
    from .agreement import metric_interval, span_agreement
    from .metrics import evaluate_spans, mark_numbers
    from .quintd import load_quintd1
    from .rotowire import load_rotowire

    def with_agreement(predictions: dict[str, Any]) -> dict[str, Any]:
        result = evaluate_spans(docs, predictions)
        row = span_agreement(docs, predictions)
        return result | {
            "count_pearson": metric_interval(row, "count_pearson"),
            "token_pearson": metric_interval(row, "token_pearson"),
            "agreement": row,
        }

    loaders = {"rotowire": load_rotowire, "quintd1": load_quintd1}
    if name not in loaders:
        raise InputError(f"--spans must be one of {', '.join(loaders)}, got {name!r}")
    docs = loaders[name](data_root, limit=max_items)  # type: ignore[operator]
    task = load_catalog().task(docs[0].task_id)
    aspect = AspectSpec(name=next(iter(task.aspects)), human="-")  # faithfulness (RotoWire), accuracy (quintd-1)
    spec = DatasetSpec(name=f"spans-{name}", level="global", aspects=(aspect,))
    items = [MetaItem(d.id, spec.name, d.id, "output", task.id, d.inputs, d.output, {}) for d in docs]
    dataset = MetaDataset(spec, task, items, Path(name))
    baseline = with_agreement({d.id: mark_numbers(d.output) for d in docs})
    results: dict[str, Any] = {"baseline: mark every number": baseline}
    for judge in judges:
        store = JudgmentStore(judgment_path(out, judge))
        todo = [i for i in items if (spec.name, aspect.name, i.id) not in store.found]
        with labelled_bars() as bars:
            judge_missing(judge, store, dataset, aspect, todo, bars(f"{name}/{judge.name}", len(todo)))
        predictions: dict[str, Any] = {}
        for item in items:
            found = store.found.get((spec.name, aspect.name, item.id))
            if found is None:
                continue
            spans = (found.detail or {}).get("spans") if found.score is not None else None
            predictions[item.id] = None if spans is None else [tuple(s) for s in spans]
        results[judge.name] = with_agreement(predictions)
    out.mkdir(parents=True, exist_ok=True)
    lines = [
        f"# Error-span precision / recall on {name} ({len(docs)} documents)",
        "",
        "Count r / token r: Pearson r with the gold spans of the number of errors per output and of the"
        " per-token error labels (the quintd-1 paper's agreement), with 95% input-bootstrap intervals.",
        "",
        "| system | variant | precision | recall | F1 | scored | unscored | count r | token r |",
        "|---|---|---|---|---|---|---|---|---|",
    ]

    def shown(interval: dict[str, Any]) -> str:
        if interval["value"] is None:
            return f"n/a ({interval['reason']})"
        if interval["low"] is None:
            return f"{interval['value']:.3f}"
        return f"{interval['value']:.3f} [{interval['low']:.3f}, {interval['high']:.3f}]"

    for system, r in results.items():
        for variant in ("exact", "overlap", "token"):
            v = r[variant]
            lines.append(f"| {system} | {variant} | {v['precision']:.3f} | {v['recall']:.3f} | {v['f1']:.3f} | "
                         f"{r['scored']} | {r['unscored'] + r['missing']} | {shown(r['count_pearson'])} | "
                         f"{shown(r['token_pearson'])} |")  # fmt: skip
    atomic_write_text(out / "spans.json", json.dumps(results, indent=2) + "\n")
    atomic_write_text(out / "spans.md", "\n".join(lines) + "\n")
    return out / "spans.md"
