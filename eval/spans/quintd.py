"""The quintd-1 span set (Kasner & Dušek 2024): `load_quintd1`, and the span set `quintd1[:dev|test]`."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from spanjudge.data_gen.quintd import QUINTD_DOMAINS, QuintdOutput, annotator_folder, read_quintd
from spanjudge.eval.spans.documents import (
    QUINTD_INPUT_HEADER,
    QUINTD_TASK_ID,
    GoldSpan,
    Span,
    SpanDocument,
    default_root,
)
from spanjudge.eval.spans.sets import Ceiling, Loaded, SpanSetKind

# the distillation protocol's held-out splits (tables [first, stop) of each domain; eval.distill.study): the dev
# split makes every choice, the test split reports; `meta-eval --spans quintd1:dev|test`
QUINTD_SPLITS: dict[str, tuple[int, int]] = {"dev": (70, 80), "test": (80, 100)}
QUINTD_SPLIT_DOMAINS = ("wikidata", "ice_hockey", "owid")


def load_quintd1(
    root: Path | str | None = None,
    annotator: str = "human",
    limit: int | None = None,
    domains: Sequence[str] = QUINTD_DOMAINS,
) -> list[SpanDocument]:
    """quintd-1 outputs with the chosen annotator's spans (start + len(text) characters).

    Read by `spanjudge.data_gen.quintd.read_quintd`, the importer's strict reader. A span that
    cannot be placed — empty text (5 of 5500 human spans, all owid at offset 0; 2 GPT-4 "no
    error" notes) or text not found at its offset (1 human span, 3 of 7012 GPT-4 spans) — is
    dropped, never moved, and counted in `SpanDocument.dropped_gold`. The documents use
    quintd-1's own catalog task (`quintd1`, aspect `accuracy`, input header `Data`). Ids are
    "quintd1/<domain>/<model>/<table_idx>"; where the annotator folder holds several records
    for one output (human_corr) each id gets "@<annotator_id>"; records repeated verbatim
    (same output, annotator and spans: 20 of human_corr's 200) are kept once. Documents are
    sorted by domain, model, table index and annotator; `limit` keeps the first ones.
    """
    base = default_root(root) / "spans" / "quintd1"
    documents = _documents(base.resolve(), annotator, tuple(domains), _files_signature(base, annotator))
    return list(documents[:limit] if limit is not None else documents)


def _files_signature(base: Path, annotator: str) -> tuple[tuple[str, int, int], ...]:
    """Every file the reader reads (the annotator's records, the generated outputs), with its size and mtime: a
    file changed on disk is a different key, so `_documents` never returns what a file no longer holds."""
    files = [*annotator_folder(base, annotator).glob("*.jsonl"), *(base / "outputs" / "test").glob("*/default/*.json")]
    return tuple((str(f), (st := f.stat()).st_size, st.st_mtime_ns) for f in sorted(files))


@functools.lru_cache(maxsize=8)
def _documents(
    base: Path, annotator: str, domains: tuple[str, ...], signature: tuple[tuple[str, int, int], ...]
) -> tuple[SpanDocument, ...]:
    """`load_quintd1`'s documents, read once per process and files' state (`signature`): the distillation
    protocol's recompute reads the same splits 68 times."""
    found = sorted(
        read_quintd(base, annotator, domains=domains, on_mismatch="drop", empty_spans="drop"),
        key=lambda o: (o.domain, o.model, o.index, o.annotator_id),
    )

    def content(o: QuintdOutput) -> tuple[Any, ...]:
        return o.domain, o.model, o.index, o.annotator_id, o.spans, o.dropped

    # human_corr repeats 20 records verbatim (same output, annotator and spans): keep one
    found = [o for i, o in enumerate(found) if i == 0 or content(o) != content(found[i - 1])]
    repeats = {key for key, n in _counts((o.domain, o.model, o.index) for o in found).items() if n > 1}
    documents = []
    for o in found:
        repeated = (o.domain, o.model, o.index) in repeats
        documents.append(
            SpanDocument(
                id=o.output_id + (f"@{o.annotator_id}" if repeated else ""),
                dataset=f"quintd1-{annotator}",
                task_id=QUINTD_TASK_ID,
                inputs={QUINTD_INPUT_HEADER: o.data},
                output=o.output,
                gold=tuple(
                    sorted((GoldSpan(s.start, s.end, s.category) for s in o.spans), key=lambda g: (g.start, g.end))
                ),
                dropped_gold=len(o.dropped),
                input_id=o.input_id,
            )
        )
    return tuple(documents)


def quintd_tables(
    annotator: str, tables: tuple[int, int], domains: Sequence[str] = ("wikidata",), root: Path | None = None
) -> list[SpanDocument]:
    """All systems' outputs of quintd-1 tables [first, stop) in `domains`, with `annotator`'s spans."""
    first, stop = tables
    docs = load_quintd1(root, annotator=annotator, domains=tuple(d for d in QUINTD_DOMAINS if d in domains))
    return [d for d in docs if first <= int(d.input_id.split("/")[1]) < stop]


def _counts(items: Iterable[Any]) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


def human_pairs(root: Path | str | None, limit: int | None = None) -> tuple[list[SpanDocument], dict[str, list[Span]]]:
    """quintd-1's outputs annotated by two different crowd workers (`human_corr`): the first
    annotator's documents (gold) and the second's spans keyed by those documents' ids, for
    scoring one human against the other. Outputs annotated twice by the same worker (20 of the
    100) have no second opinion and are left out; `limit` keeps the first pairs."""
    by_output: dict[str, list[SpanDocument]] = {}
    for doc in load_quintd1(root, annotator="human_corr"):
        by_output.setdefault(doc.id.split("@")[0], []).append(doc)
    pairs = [docs for docs in by_output.values() if len(docs) == 2][:limit]
    return [first for first, _ in pairs], {first.id: second.gold_spans for first, second in pairs}


def _load_set(argument: str, root: Path | None, limit: int | None) -> Loaded:
    """`quintd1`: every output with the people's spans; `quintd1:dev|test`: the protocol's split of it."""
    if argument:
        return quintd_tables("human", QUINTD_SPLITS[argument], QUINTD_SPLIT_DOMAINS, root)[:limit], None
    return load_quintd1(root, limit=limit), None


def _ceiling(argument: str, root: Path | None, limit: int | None) -> Ceiling | None:
    return None if argument else human_pairs(root, limit)  # the whole set: its doubly annotated outputs


SPAN_SET = SpanSetKind(
    "quintd1",
    "Kasner & Dušek 2024, quintd-1: LLM outputs on structured data with crowd-sourced error spans (quintd1:dev "
    "and quintd1:test: the distillation protocol's splits)",
    _load_set,
    arguments=("", *QUINTD_SPLITS),
    fit_split=lambda argument: argument or "dev",  # quintd1:test chooses nothing (decision_fit.check_fit_split)
    ceiling=_ceiling,
)
