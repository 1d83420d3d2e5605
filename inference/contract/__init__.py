"""The judge's output contract: types, the text formats, tolerant parsers and span anchoring.

One import place for every stage::

    from spanjudge.inference.contract import Evaluation, ErrorAnnotation, parse_judge, render_judge
"""

from .anchor import anchor_errors, anchor_evaluation
from .model import (
    MAX_ERRORS,
    AnchorMethod,
    AnnotatorEvaluation,
    ErrorAnnotation,
    Evaluation,
    ParseFailure,
    ScoreLabel,
    cap_errors,
    rating_to_score,
    round_to_multiple_of_five,
)
from .parse import parse_annotator, parse_judge, parse_supervisor
from .render import NO_ERROR, format_score, render_errors, render_judge

__all__ = [
    "MAX_ERRORS",
    "NO_ERROR",
    "AnchorMethod",
    "AnnotatorEvaluation",
    "ErrorAnnotation",
    "Evaluation",
    "ParseFailure",
    "ScoreLabel",
    "anchor_errors",
    "anchor_evaluation",
    "cap_errors",
    "format_score",
    "parse_annotator",
    "parse_judge",
    "parse_supervisor",
    "rating_to_score",
    "render_errors",
    "render_judge",
    "round_to_multiple_of_five",
]
