"""A prompted LLM judge: the annotator prompt (thesis Fig. A.16) through the backend layer.

With several models (an ensemble YAML, optionally narrowed with `#name,name`) the item's score
is the plain average of the models' 1-5 ratings, without outlier removal (thesis §4.3), mapped
to 0-100. A model whose reply never parses (after the ensemble's parse retries) adds nothing;
an item no model rated is unscored. Every call goes through the SQLite cache, so a re-run after
a crash repeats no call; a call that failed (server down) leaves the item for the next run.
`for_sample(k)` is the same ensemble decoding with seed `sample_seed(k)` (meta-eval --samples).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from spanjudge.core.errors import InputError
from spanjudge.core.progress import Advance
from spanjudge.data_gen.annotate import run_with_retries
from spanjudge.data_gen.config import ModelRole, load_ensemble, parse_endpoint_options
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.judging.sampling import sample_seed
from spanjudge.eval.judging.suite import AspectSpec
from spanjudge.inference.backends import CachedBackend, LLMCache, make_backend
from spanjudge.inference.contract import parse_annotator
from spanjudge.inference.contract.model import rating_to_score
from spanjudge.inference.prompts import render_annotator_prompt

if TYPE_CHECKING:
    from spanjudge.eval.judging.judges import JudgeContext


class PromptedJudge:
    def __init__(
        self, ensemble_path: Path, models: Sequence[str], cache_path: Path, endpoints: Sequence[str] = ()
    ) -> None:
        self.ensemble = load_ensemble(ensemble_path, parse_endpoint_options(list(endpoints)))
        known = {a.name: a for a in self.ensemble.annotators}
        unknown = [m for m in models if m not in known]
        if unknown:
            raise InputError(f"prompted judge: no annotator '{unknown[0]}' in {ensemble_path} (has {', '.join(known)})")
        self.roles: list[ModelRole] = [known[m] for m in models] if models else list(self.ensemble.annotators)
        self.name = "prompted:" + "+".join(r.name for r in self.roles)
        # the roles as configured (models, servers, sampling), not only their names, key the store
        config = [r.model_dump_json() for r in self.roles] + [self.ensemble.sampling.model_dump_json()]
        self.store_key = "prompted:" + "|".join(config)
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        self.cache = LLMCache(cache_path)
        self.backends = {r.name: CachedBackend(make_backend(r.backend), self.cache) for r in self.roles}
        self.sampling = self.ensemble.sampling

    def for_sample(self, k: int) -> PromptedJudge:
        """Sample k >= 1: the ensemble's sampling with a seed derived from k, stored apart from
        sample 0 (this judge as configured). It shares this judge's servers and cache; close this one."""
        twin = copy.copy(self)
        twin.sampling = self.sampling.model_copy(update={"seed": sample_seed(k)})
        twin.store_key = f"{self.store_key}|sample={k}"
        return twin

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        task_aspect = dataset.task.aspect(aspect.judge_aspect)
        prompts = [render_annotator_prompt(dataset.task, task_aspect, item.inputs, item.output) for item in items]
        ratings: dict[str, dict[str, int]] = {item.id: {} for item in items}
        failures: dict[str, list[str]] = {item.id: [] for item in items}
        incomplete: set[str] = set()
        for role in self.roles:
            outcomes = run_with_retries(
                self.backends[role.name], prompts, self.sampling, self.ensemble.parse_retry, parse_annotator
            )
            for item, outcome in zip(items, outcomes, strict=True):
                if not outcome.complete:
                    incomplete.add(item.id)
                elif outcome.parsed is not None:
                    ratings[item.id][role.name] = outcome.parsed.rating
                else:
                    failures[item.id].append(f"{role.name}: {outcome.parse_failure}")
        results: dict[str, Judgment] = {}
        for item in items:
            if item.id in incomplete:
                continue
            rated = ratings[item.id]
            detail: dict[str, object] = {"ratings": rated, "parse_failures": failures[item.id]}
            if rated:
                mean = sum(rated.values()) / len(rated)
                results[item.id] = Judgment(rating_to_score(mean), None, detail)
            else:
                results[item.id] = Judgment(None, "no parseable reply: " + "; ".join(failures[item.id]), detail)
            if progress:
                progress(1)
        return results

    def close(self) -> None:
        for backend in self.backends.values():
            backend.close()
        self.cache.close()


def prompted_judge(value: str, context: JudgeContext) -> PromptedJudge:
    """`prompted:<ensemble.yaml>[#a,b]`: the ensemble's models, or those named after `#`."""
    path, _, models = value.partition("#")
    selected = tuple(m.strip() for m in models.split(",") if m.strip())
    return PromptedJudge(Path(path), selected, context.out / "cache.sqlite", context.endpoints)
