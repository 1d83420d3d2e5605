"""Classic reference-based metrics through maintained libraries (rouge-score, sacrebleu).

Only metrics whose library runs without downloading anything are offered: no model hub is
reachable from this project's machines, so BERTScore, MoverScore, BARTScore, UniEval, LENS
(all need model weights) are *not* computed here. Score outputs with them elsewhere and pass
the results as a `scores:` file; the reference tables still show their published rows.
An item without a reference is unscored ("no reference"), never scored against nothing.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spanjudge.core.errors import InputError
from spanjudge.core.progress import Advance
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.judging.suite import AspectSpec

if TYPE_CHECKING:
    from spanjudge.eval.judging.judges import JudgeContext

NEEDS_MODEL_WEIGHTS = {
    "bertscore": "BERTScore",
    "moverscore": "MoverScore",
    "bartscore": "BARTScore",
    "unieval": "UniEval",
    "lens": "LENS",
    "bleurt": "BLEURT",
    "comet": "COMET",
}
_ROUGE_PARTS = {"": "fmeasure", "f": "fmeasure", "recall": "recall", "precision": "precision"}
_ROUGE_KINDS = {"rouge1": "rouge1", "rouge2": "rouge2", "rougel": "rougeL", "rougelsum": "rougeLsum"}
REFERENCE_POOLING = ("max", "mean")
Scorer = Callable[[str, Sequence[str]], float]
# A sentence ends at . ! ? (and closing quotes or brackets) before white space. rouge-score's own
# splitter needs NLTK's punkt data, which cannot be downloaded here.
_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+")


@dataclass(frozen=True)
class MetricSpec:
    """`NAME[-recall|-precision][+stem][+refs=max|mean]`, parsed.

    - `rougeLsum` is summary-level LCS (Lin 2004, ROUGE-L "summary level"): both texts are split
      into sentences and the union LCS is taken; `rougeL` is one LCS over the whole text.
    - `+stem`: Porter stemming of the tokens (rouge-score's `use_stemmer`).
    - `+refs=mean`: with several references, the mean of the per-reference scores (UniEval's
      SummEval baselines over its 11 references); default `max`, the best reference."""

    kind: str
    part: str = "fmeasure"
    stem: bool = False
    refs: str = "max"


def parse_metric(name: str) -> MetricSpec:
    base, *options = name.split("+")
    stem, refs = False, "max"
    for option in options:
        key, _, value = option.strip().lower().partition("=")
        if key == "stem" and not value:
            stem = True
        elif key == "refs" and value in REFERENCE_POOLING:
            refs = value
        else:
            raise InputError(
                f"metric '{name}': unknown option '+{option}'; options are +stem and +refs=max|mean "
                "(several references: the best one, or the mean over all)"
            )
    lowered = base.strip().lower()
    if lowered in ("bleu", "chrf"):
        if stem:
            raise InputError(f"metric '{name}': +stem applies to ROUGE only (sacrebleu tokenises on its own)")
        return MetricSpec(lowered, refs=refs)
    kind, _, part = lowered.partition("-")
    if kind in _ROUGE_KINDS and part in _ROUGE_PARTS:
        return MetricSpec(_ROUGE_KINDS[kind], _ROUGE_PARTS[part], stem, refs)
    raise InputError(
        f"unknown metric '{name}'; available: rouge1, rouge2, rougeL, rougeLsum (add -recall or -precision; "
        "default F1), bleu (sacrebleu sentence BLEU), chrf; options +stem (ROUGE) and +refs=max|mean"
    )


def sentence_lines(text: str) -> str:
    """One sentence per line, as rougeLsum reads its texts."""
    sentences = (s.strip() for line in text.splitlines() for s in _SENTENCE_END.split(line))
    return "\n".join(s for s in sentences if s)


@functools.cache
def _rouge_tokenizer(stem: bool) -> Any:
    """rouge_score's own tokenizer, each text tokenized once per process and `stem`, whatever the ROUGE kind:
    every reference is scored against every output of its input (SummEval: 11 references × 16 outputs), and
    Porter stemming is most of ROUGE's time."""
    from rouge_score import tokenizers

    class Memoized(tokenizers.Tokenizer):
        def __init__(self) -> None:
            self._tokens = functools.lru_cache(maxsize=8192)(tokenizers.DefaultTokenizer(stem).tokenize)

        def tokenize(self, text: str) -> list[str]:
            return list(self._tokens(text))  # a copy: the cached list is never handed out

    return Memoized()


def _rouge(spec: MetricSpec) -> Callable[[str, str], float]:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer([spec.kind], tokenizer=_rouge_tokenizer(spec.stem))
    prepare = sentence_lines if spec.kind == "rougeLsum" else (lambda text: text)

    def score(output: str, reference: str) -> float:
        return float(getattr(scorer.score(prepare(reference), prepare(output))[spec.kind], spec.part))

    return score


def _pooled(spec: MetricSpec, one: Callable[[str, str], float]) -> Scorer:
    def score(output: str, references: Sequence[str]) -> float:
        values = [one(output, ref) for ref in references]
        return max(values) if spec.refs == "max" else sum(values) / len(values)

    return score


def _bleu(spec: MetricSpec) -> Scorer:
    import sacrebleu

    if spec.refs == "mean":
        return _pooled(spec, lambda output, ref: float(sacrebleu.sentence_bleu(output, [ref]).score))
    # max: sacrebleu's own multi-reference BLEU (n-gram counts clipped by the best reference)
    return lambda output, references: float(sacrebleu.sentence_bleu(output, list(references)).score)


def _chrf(spec: MetricSpec) -> Scorer:
    import sacrebleu

    if spec.refs == "mean":
        return _pooled(spec, lambda output, ref: float(sacrebleu.sentence_chrf(output, [ref]).score))
    return lambda output, references: float(sacrebleu.sentence_chrf(output, list(references)).score)


def metric_scorer(name: str) -> Scorer:
    lowered = name.split("+")[0].strip().lower()
    if lowered in NEEDS_MODEL_WEIGHTS:
        raise InputError(
            f"metric '{name}': {NEEDS_MODEL_WEIGHTS[lowered]} needs model weights from the Hugging Face Hub, which "
            "this machine cannot reach; compute it elsewhere and pass the scores with --judge scores:FILE"
        )
    spec = parse_metric(name)
    if spec.kind == "bleu":
        return _bleu(spec)
    if spec.kind == "chrf":
        return _chrf(spec)
    # several references: the best match (as rouge-score's score_multi does) or the mean
    return _pooled(spec, _rouge(spec))


class MetricJudge:
    def __init__(self, name: str) -> None:
        self.scorer = metric_scorer(name)
        self.name = f"metric:{name}"
        # the references a metric is scored against are part of what it computed: QAGS and Wiki-DA
        # had none and SummEval one before the suite named the article, the source and all 11
        # references, so a store written under the old references must not be reused
        self.store_key = f"metric:{name}|references-2"
        self._memo: dict[tuple[str, str], float] = {}

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        # a reference-based metric does not depend on the aspect: score each output once
        results: dict[str, Judgment] = {}
        for item in items:
            if not item.references:
                results[item.id] = Judgment(None, "no reference")
            else:
                key = (dataset.name, item.id)
                if key not in self._memo:
                    self._memo[key] = self.scorer(item.output, item.references)
                results[item.id] = Judgment(self._memo[key])
            if progress:
                progress(1)
        return results

    def close(self) -> None:
        pass


def metric_judge(value: str, context: JudgeContext) -> MetricJudge:
    """`metric:<name>`."""
    return MetricJudge(value)
