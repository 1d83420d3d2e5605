"""Classic reference-based metrics through maintained libraries (rouge-score, sacrebleu).

Only metrics whose library runs without downloading anything are offered: no model hub is
reachable from this project's machines, so BERTScore, MoverScore, BARTScore, UniEval, LENS
(all need model weights) are *not* computed here. Score outputs with them elsewhere and pass
the results as a `scores:` file; the reference tables still show their published rows.
An item without a reference is unscored ("no reference"), never scored against nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from spanjudge.inference.errors import InputError

from .datasets import MetaDataset, MetaItem
from .judges import Judgment, Progress
from .suite import AspectSpec

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
Scorer = Callable[[str, Sequence[str]], float]


def _rouge(kind: str, part: str) -> Scorer:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer([kind], use_stemmer=False)

    def score(output: str, references: Sequence[str]) -> float:
        # several references: the best match, as rouge-score's score_multi does
        return max(getattr(scorer.score(ref, output)[kind], part) for ref in references)

    return score


def _bleu() -> Scorer:
    import sacrebleu

    return lambda output, references: float(sacrebleu.sentence_bleu(output, list(references)).score)


def _chrf() -> Scorer:
    import sacrebleu

    return lambda output, references: float(sacrebleu.sentence_chrf(output, list(references)).score)


def metric_scorer(name: str) -> Scorer:
    lowered = name.lower()
    if lowered in NEEDS_MODEL_WEIGHTS:
        raise InputError(
            f"metric '{name}': {NEEDS_MODEL_WEIGHTS[lowered]} needs model weights from the Hugging Face Hub, which "
            "this machine cannot reach; compute it elsewhere and pass the scores with --judge scores:FILE"
        )
    if lowered == "bleu":
        return _bleu()
    if lowered == "chrf":
        return _chrf()
    kind, _, part = lowered.partition("-")
    if kind in ("rouge1", "rouge2", "rougel") and part in _ROUGE_PARTS:
        return _rouge("rougeL" if kind == "rougel" else kind, _ROUGE_PARTS[part])
    raise InputError(
        f"unknown metric '{name}'; available: rouge1, rouge2, rougeL (add -recall or -precision; default F1), "
        "bleu (sacrebleu sentence BLEU), chrf"
    )


class MetricJudge:
    def __init__(self, name: str) -> None:
        self.scorer = metric_scorer(name)
        self.name = f"metric:{name}"
        self._memo: dict[tuple[str, str], float] = {}

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Progress | None = None
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
