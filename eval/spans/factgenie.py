"""Any factgenie annotation campaign as a span set: `meta-eval --spans factgenie:FOLDER`.

A campaign folder (`metadata.json` + `files/*.jsonl`, as factgenie writes it for its own and for
imported campaigns; read by `inference.interchange.read_factgenie_campaign`, which checks every
span at its offset) gives one document per annotated output, its spans the gold. A campaign
holds the outputs but not the inputs they were generated from, so no judge can be run on it
here: the judges are scores files (`--judge scores:FILE.jsonl`, e.g. `spanjudge score` run on
the same outputs), matched by id. The id is the record's `metadata.spanjudge_id` where the
campaign was exported from a scores file (`spanjudge render --to factgenie`), else
`<dataset>/<split>/<setup_id>/<example_idx>`; the task and aspect are the record's metadata
`task`/`aspect` where given, else quintd-1's (`quintd1`, `accuracy`).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from spanjudge.core.errors import InputError
from spanjudge.inference.score.interchange import read_factgenie_campaign

from .documents import QUINTD_TASK_ID, GoldSpan, SpanDocument

PREFIX = "factgenie:"
DEFAULT_ASPECT = "accuracy"


def check_judges(names: list[str]) -> None:
    """InputError unless every judge is a scores file (`scores:FILE`): the others need the inputs."""
    unfit = [name for name in names if not name.startswith("scores:")]
    if unfit:
        raise InputError(
            f"a factgenie campaign holds the outputs but not their inputs, so {', '.join(unfit)} cannot judge them "
            "here: score the outputs with `spanjudge score` and give --judge scores:FILE.jsonl"
        )


def load_factgenie_spans(folder: Path, limit: int | None = None) -> tuple[list[SpanDocument], str]:
    """The campaign's annotated outputs as span documents (the first `limit`), and the aspect they
    were annotated for. Records must agree on task and aspect, and ids must be unique."""
    documents: list[SpanDocument] = []
    kinds: set[tuple[str, str]] = set()
    for record in read_factgenie_campaign(folder)[:limit]:
        dataset, split, setup_id, example_idx = record.key
        meta = record.metadata
        doc_id = str(meta.get("spanjudge_id") or f"{dataset}/{split}/{setup_id}/{example_idx}")
        task, aspect = str(meta.get("task") or QUINTD_TASK_ID), str(meta.get("aspect") or DEFAULT_ASPECT)
        kinds.add((task, aspect))
        gold = tuple(
            sorted(
                (GoldSpan(start, end, record.categories[kind]) for start, end, kind, _ in record.spans),
                key=lambda g: (g.start, g.end),
            )
        )
        documents.append(SpanDocument(doc_id, f"factgenie:{folder.name}", task, {}, record.output, gold))
    if not documents:
        raise InputError(f"{folder}: the campaign annotates no output")
    if len(kinds) > 1:
        raise InputError(f"{folder}: the records mix tasks/aspects {sorted(kinds)}; give one campaign per aspect")
    repeated = sorted(i for i, n in Counter(d.id for d in documents).items() if n > 1)
    if repeated:
        raise InputError(f"{folder}: output id(s) {', '.join(repeated[:5])} are annotated more than once")
    [(_, aspect)] = kinds
    return documents, aspect
