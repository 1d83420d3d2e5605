"""Judges to meta-evaluate, named by a spec string on the command line:

    scores:<file.jsonl>             evaluations already computed (e.g. by `spanjudge score`)
    distilled:<model or adapter>    the distilled judge (spanjudge.inference.judge), run here
    prompted:<ensemble.yaml>[#a,b]  LLMs with the annotator prompt; several = plain average (§4.3)
    metric:<name>                   a classic metric (rouge1, rouge2, rougeL, rougeLsum[-recall|-precision],
                                    bleu, chrf; +stem, +refs=max|mean: see eval/judging/baselines.py)
    teacher:<annotator or config>   a quintd-1 annotator's spans (gpt-4, gpt-4-temperature-1, gpt-3.5, llama3,
                                    human) or an import config's teacher (a vote of several), for --spans quintd1
    factgenie:<campaign folder>     the spans and scores of a campaign spanjudge exported (render --to factgenie)

A judge returns, per item, a score or an unscored reason; it never invents a score (the interface
every kind implements is in `judgment.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from spanjudge.core.errors import InputError
from spanjudge.core.registry import Registry
from spanjudge.eval.judging.judgment import MetaJudge


@dataclass(frozen=True)
class JudgeContext:
    """What a judge kind's factory may use besides its VALUE: the run's folder, `--judge-option`s, `--endpoint`s."""

    out: Path
    options: Mapping[str, str] = field(default_factory=dict)
    endpoints: Sequence[str] = ()


JudgeFactory = Callable[[str, JudgeContext], MetaJudge]

# The registry: KIND -> its factory (VALUE, context) -> MetaJudge; another package adds a kind as an entry
# point of the group `spanjudge.judges`
JUDGE_KINDS: Registry[JudgeFactory] = Registry(
    "judge kind",
    "spanjudge.judges",
    {
        "scores": "spanjudge.eval.judging.judge_files:scores_judge",
        "distilled": "spanjudge.eval.judging.judge_files:distilled_judge",
        "prompted": "spanjudge.eval.judging.prompted_judge:prompted_judge",
        "metric": "spanjudge.eval.judging.baselines:metric_judge",
        "teacher": "spanjudge.eval.spans.teacher_judge:teacher_judge",
        "factgenie": "spanjudge.eval.spans.factgenie:campaign_judge",
    },
)


def make_judge(
    spec: str, *, out: Path, options: Mapping[str, str] | None = None, endpoints: Sequence[str] = ()
) -> MetaJudge:
    """The judge a `--judge KIND:VALUE` names."""
    kind, sep, value = spec.partition(":")
    kinds = ", ".join(f"{name}:" for name in JUDGE_KINDS.names())
    if not sep or not value:
        raise InputError(f"--judge expects KIND:VALUE ({kinds}), got {spec!r}")
    if kind not in JUDGE_KINDS.names():
        raise InputError(f"unknown judge kind '{kind}' in {spec!r}; use {kinds}")
    return JUDGE_KINDS.load(kind)(value, JudgeContext(out, dict(options or {}), tuple(endpoints)))
