"""Judges to meta-evaluate, named by a spec string on the command line:

    scores:<file.jsonl>             evaluations already computed (e.g. by `spanjudge score`)
    distilled:<model or adapter>    the distilled judge (spanjudge.inference.judge), run here
    prompted:<ensemble.yaml>[#a,b]  LLMs with the annotator prompt; several = plain average (§4.3)
    metric:<name>                   a classic metric (rouge1, rouge2, rougeL, rougeLsum[-recall|-precision],
                                    bleu, chrf; +stem, +refs=max|mean: see eval/baselines.py)

A judge returns, per item, a score or an unscored reason; it never invents a score (the interface
every kind implements is in `judgment.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from spanjudge.core.errors import InputError

from .judgment import MetaJudge


def make_judge(
    spec: str, *, out: Path, options: Mapping[str, str] | None = None, endpoints: Sequence[str] = ()
) -> MetaJudge:
    kind, sep, value = spec.partition(":")
    if not sep or not value:
        raise InputError(f"--judge expects KIND:VALUE (scores:, distilled:, prompted:, metric:), got {spec!r}")
    if kind == "scores":
        from .judge_files import ScoresFileJudge

        return ScoresFileJudge(Path(value))
    if kind == "distilled":
        from .judge_files import DistilledJudge

        return DistilledJudge(value, dict(options or {}))
    if kind == "prompted":
        from .prompted_judge import PromptedJudge

        path, _, models = value.partition("#")
        selected = tuple(m.strip() for m in models.split(",") if m.strip())
        return PromptedJudge(Path(path), selected, out / "cache.sqlite", endpoints)
    if kind == "metric":
        from .baselines import MetricJudge

        return MetricJudge(value)
    raise InputError(f"unknown judge kind '{kind}' in {spec!r}; use scores:, distilled:, prompted: or metric:")
