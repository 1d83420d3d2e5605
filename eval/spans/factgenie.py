"""Any factgenie annotation campaign as a span set: `meta-eval --spans factgenie:FOLDER`.

A campaign folder (`metadata.json` + `files/*.jsonl`, as factgenie writes it for its own and for
imported campaigns; read by `inference.interchange.read_factgenie_campaign`, which checks every
span at its offset) gives one document per annotated output, its spans the gold. A campaign
holds the outputs but not the inputs they were generated from, so no judge can be run on it
here: the judges are scores files (`--judge scores:FILE.jsonl`, e.g. `spanjudge score` run on
the same outputs) or campaigns spanjudge exported (`--judge factgenie:FOLDER`, written by `spanjudge
render --to factgenie` or `select`), matched by id. The id is the record's `metadata.spanjudge_id`
where the campaign was exported from a scores file, else `<dataset>/<split>/<setup_id>/<example_idx>`
slugified as factgenie slugifies them: a campaign factgenie wrote after people annotated the outputs
has only those, and an exported campaign of the same outputs is found by them too. The task and
aspect are the record's metadata `task`/`aspect` where given, else quintd-1's (`quintd1`, `accuracy`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from slugify import slugify

from spanjudge.core.errors import InputError
from spanjudge.core.progress import Advance
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judges import JudgeContext
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.judging.suite import AspectSpec
from spanjudge.eval.spans.documents import QUINTD_TASK_ID, GoldSpan, SpanDocument
from spanjudge.eval.spans.sets import SpanSetKind
from spanjudge.inference.score.interchange import AnnotatedOutput, read_factgenie_campaign

PREFIX = "factgenie:"
DEFAULT_ASPECT = "accuracy"


def key_id(record: AnnotatedOutput) -> str:
    """`<dataset>/<split>/<setup_id>/<example_idx>`, slugified as factgenie reads them."""
    dataset, split, setup_id, example_idx = record.key
    return f"{slugify(dataset)}/{slugify(split)}/{slugify(setup_id)}/{example_idx}"


def output_id(record: AnnotatedOutput) -> str:
    """The output's id: spanjudge's where the campaign was exported from a scores file, else its key."""
    return str(record.metadata.get("spanjudge_id") or key_id(record))


def load_factgenie_spans(folder: Path, limit: int | None = None) -> tuple[list[SpanDocument], str]:
    """The campaign's annotated outputs as span documents (the first `limit`), and the aspect they
    were annotated for. Records must agree on task and aspect, and ids must be unique."""
    documents: list[SpanDocument] = []
    kinds: set[tuple[str, str]] = set()
    for record in read_factgenie_campaign(folder)[:limit]:
        meta = record.metadata
        doc_id = output_id(record)
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


class CampaignJudge:
    """`--judge factgenie:FOLDER`: the spans and score of a campaign spanjudge exported, for each output found in
    it by its spanjudge id or by its key (dataset/split/setup_id/example_idx). A record of another text than the
    output of that id is one error; an output with no record, or a record with no spanjudge score (a campaign
    spanjudge did not write), is unscored, never "No Error"."""

    def __init__(self, folder: Path) -> None:
        self.name = f"{PREFIX}{folder.name}"
        self._records: dict[str, AnnotatedOutput] = {}
        for record in read_factgenie_campaign(folder):
            self._records[key_id(record)] = self._records[output_id(record)] = record

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        results = {}
        for item in items:
            record = self._records.get(item.id)
            score = record.metadata.get("score") if record else None
            if record is None:
                results[item.id] = Judgment(None, f"{self.name} has no record of this output")
            elif record.output != item.output:
                raise InputError(f"{self.name}: its record of '{item.id}' is of another text than {dataset.name}'s")
            elif isinstance(score, bool) or not isinstance(score, int | float):
                results[item.id] = Judgment(None, f"{self.name}: the record has no spanjudge score")
            else:
                spans = [[start, end] for start, end, _, _ in record.spans]
                unlocated = record.metadata.get("unlocated_errors", 0)
                errors = len(spans) + (unlocated if isinstance(unlocated, int) else 0)
                results[item.id] = Judgment(float(score), detail={"spans": spans, "errors": errors})
            if progress:
                progress(1)
        return results

    def close(self) -> None:
        pass


def campaign_judge(value: str, context: JudgeContext) -> CampaignJudge:
    """`factgenie:<campaign folder>`."""
    folder = Path(value)
    if not folder.is_dir():
        raise InputError(f"{PREFIX}{value}: not a campaign folder (metadata.json + files/*.jsonl)")
    return CampaignJudge(folder)


SPAN_SET = SpanSetKind(
    "factgenie",
    "any factgenie annotation campaign: its outputs and their spans, not the inputs (judges are scores files or "
    "exported campaigns)",
    lambda argument, root, limit: load_factgenie_spans(Path(argument), limit),
    free_argument="FOLDER",
    has_inputs=False,
)
