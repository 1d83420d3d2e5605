"""`--judge teacher:NAME`: a quintd-1 annotator's spans, or a teacher an import config merges, as a judge.

    spanjudge meta-eval --spans quintd1:dev --judge teacher:llama3 --judge teacher:gpt-4 --out runs/members
    spanjudge meta-eval --spans quintd1:dev --judge teacher:configs/import/quintd1_vote_gpt4_twice.yaml --out ...

NAME is one of quintd-1's annotators (gpt-4, gpt-4-temperature-1, gpt-3.5, llama3, human), or a `spanjudge
import` config of format quintd1 (one annotator, or several merged by vote): the judge's spans are exactly what
that import would train on, and its score the import rule's. An output the teacher has no record of is unscored
("no record"), never 'No Error'. No model runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import get_args

from spanjudge.core.configio import configs_dir
from spanjudge.core.errors import InputError
from spanjudge.core.progress import Advance
from spanjudge.data_gen.quintd import QUINTD_DOMAINS
from spanjudge.data_gen.teacher import QuintdAnnotator, QuintdImport, QuintdSpans, load_import_config, teacher_spans
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judges import JudgeContext
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.judging.suite import AspectSpec
from spanjudge.eval.spans.documents import default_root
from spanjudge.eval.spans.teachers import Teacher

ANNOTATORS: tuple[str, ...] = get_args(QuintdAnnotator)  # one record an output each (not human_corr's pairs)
GPT4_RULE = configs_dir() / "import" / "quintd1_gpt4_wikidata.yaml"  # its rule gives an annotator's spans a score


def _source(value: str) -> QuintdImport:
    """The import source NAME names: an annotator read with the GPT-4 teacher's rule, or a config's own."""
    if value in ANNOTATORS:  # read as the ensemble study reads a member (`teachers.Teacher.source`)
        shipped = load_import_config(GPT4_RULE).source
        assert isinstance(shipped, QuintdImport)
        return Teacher(value, (value,)).source(shipped.rule, QUINTD_DOMAINS)
    path = Path(value)
    if not path.is_file():
        names = ", ".join(ANNOTATORS)
        raise InputError(f"teacher:{value}: neither a quintd-1 annotator ({names}) nor an import config file")
    source = load_import_config(path).source
    if not isinstance(source, QuintdImport):
        raise InputError(f"teacher:{value}: an import config of format quintd1, not {source.format}")
    return source.model_copy(update={"table_range": None})


class TeacherJudge:
    """The teacher's spans on the quintd-1 documents of a span set (ids quintd1/<domain>/<model>/<table>)."""

    def __init__(self, value: str) -> None:
        self.source = _source(value)
        self.name = f"teacher:{value}"
        self._found: dict[tuple[str, ...], dict[str, QuintdSpans]] = {}

    def _spans(self, domains: set[str]) -> dict[str, QuintdSpans]:
        """The teacher's errors on every output of `domains` (read once per set of domains)."""
        key = tuple(d for d in QUINTD_DOMAINS if d in domains)
        if key not in self._found:
            root = default_root(self.source.data_root) / "spans" / "quintd1"
            source = self.source.model_copy(update={"domains": key})
            self._found[key] = {s.item.output_id: s for s in teacher_spans(root, source)}
        return self._found[key]

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        domains = {i.id.split("/")[1] for i in items if i.id.startswith("quintd1/")}
        unknown = [i.id for i in items if not i.id.startswith("quintd1/") or i.id.split("/")[1] not in QUINTD_DOMAINS]
        if unknown:
            raise InputError(f"{self.name} judges quintd-1 outputs only (--spans quintd1...), not {unknown[0]!r}")
        found = self._spans(domains)
        results = {}
        for item in items:
            spans = found.get(item.id.split("@")[0])
            if spans is None:
                results[item.id] = Judgment(None, f"{self.name} has no record of this output")
            else:
                placed = [[e.start, e.end] for e in spans.errors if e.start is not None and e.end is not None]
                score = self.source.rule.score([e.severity for e in spans.errors])
                results[item.id] = Judgment(score, detail={"spans": placed, "teacher": spans.teacher})
            if progress:
                progress(1)
        return results

    def close(self) -> None:
        pass


def teacher_judge(value: str, context: JudgeContext) -> TeacherJudge:
    """`teacher:<annotator or quintd1 import config>`."""
    return TeacherJudge(value)
