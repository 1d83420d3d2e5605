"""QAGS human scores from the raw crowd file (Wang et al., 2020): each summary sentence gets
the majority of its three yes/no votes; the summary's score is the mean over its sentences."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from spanjudge.core.errors import InputError


def sentence_vote(responses: Sequence[Mapping[str, Any]], where: str) -> float:
    """1.0 when most workers answered "yes" (3 workers: no ties), else 0.0."""
    answers = [str(r.get("response", "")).strip().lower() for r in responses]
    if not answers or any(a not in ("yes", "no") for a in answers):
        raise InputError(f"{where}: QAGS responses must be 'yes'/'no', got {answers}")
    yes = answers.count("yes")
    if 2 * yes == len(answers):
        raise InputError(f"{where}: QAGS sentence has a tied vote ({yes} of {len(answers)})")
    return 1.0 if 2 * yes > len(answers) else 0.0


def summary_score(sentences: object, where: str) -> float:
    """Mean over the summary's sentences of the majority vote."""
    if not isinstance(sentences, list) or not sentences:
        raise InputError(f"{where}: 'summary_sentences' must be a non-empty list")
    votes = []
    for index, sentence in enumerate(sentences):
        if not isinstance(sentence, Mapping) or not isinstance(sentence.get("responses"), list):
            raise InputError(f"{where}: summary sentence {index} has no 'responses' list")
        votes.append(sentence_vote(sentence["responses"], f"{where} sentence {index}"))
    return sum(votes) / len(votes)
