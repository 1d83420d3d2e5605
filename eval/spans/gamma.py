"""γ agreement (Mathet et al. 2015) of two span annotations, computed as factgenie computes it.

factgenie (`factgenie/iaa/gamma.py`, with `pygamma-agreement==0.5.9`, the version it pins) takes
each output on its own: the spans of both annotators form one pygamma `Continuum`, empty spans
dropped, and γ comes from `CombinedCategoricalDissimilarity(alpha=1, beta=1, delta_empty=1)` with
the soft alignment, numpy seeded with 42 before each output. An output where fewer than two
annotators marked anything has no γ; factgenie scores it by `s_empty = 1 / (1 + number of
spans)` instead (1 when neither marked anything). The reported values are the means over the
outputs that have each.

Here the two annotators are a system (the judge, a baseline, a second human) and the gold spans,
and every span has one category, "error": the judge's severities and the humans' categories
are different vocabularies, so γ measures where the errors are, as the other span metrics do.
The global numpy random state is saved and restored around each computation.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.eval.spans.documents import Span, SpanDocument

SETTINGS: dict[str, Any] = {"alpha": 1.0, "beta": 1.0, "delta_empty": 1.0, "soft": True, "seed": 42}
CATEGORY = "error"


@functools.cache
def _library() -> Any:
    """pygamma-agreement, imported and set up once per process (it is asked once per output)."""
    try:
        try:
            with _numba_compiles_cached():
                import pygamma_agreement
        except RuntimeError as exc:  # numba found nowhere writable to keep them: compiled as pygamma asks
            if "cannot cache" not in str(exc):
                raise
            import pygamma_agreement
    except ImportError as exc:
        raise InputError(
            f"γ agreement needs pygamma-agreement: pip install 'spanjudge[agreement]' (importing it failed: {exc})"
        ) from None
    import cvxopt.glpk

    cvxopt.glpk.options["msg_lev"] = "GLP_MSG_OFF"  # GLPK would print its solver log to stdout
    return pygamma_agreement


@contextmanager
def _numba_compiles_cached() -> Iterator[None]:
    """numba.njit with `cache=True` unless told otherwise, while pygamma-agreement is imported: it compiles its
    kernels with numba at import, 24 s on a 2-core CPU in every process, and does not ask numba to keep them;
    cached (numba writes them beside the module, or in its user cache where that is read-only, and recompiles
    when the source changes), the next process imports it in about 4 s."""
    try:
        import numba
    except ImportError:  # pygamma-agreement's own import then says what is missing
        yield
        return
    njit = numba.njit

    def cached(*args: Any, **options: Any) -> Any:
        options.setdefault("cache", True)
        return njit(*args, **options)

    numba.njit = cached
    try:
        yield
    finally:
        numba.njit = njit


@functools.cache
def _dissimilarity() -> Any:
    return _library().CombinedCategoricalDissimilarity(
        alpha=SETTINGS["alpha"], beta=SETTINGS["beta"], delta_empty=SETTINGS["delta_empty"]
    )


@contextmanager
def _quiet_seeded(seed: int) -> Iterator[None]:
    """pygamma logs a warning per output when the CBC solver is missing (it then uses GLPK,
    which gives the same alignment), and draws from numpy's global generator."""
    import numpy as np

    state, disabled = np.random.get_state(), logging.root.manager.disable
    logging.disable(logging.WARNING)
    np.random.seed(seed)
    try:
        yield
    finally:
        np.random.set_state(state)
        logging.disable(disabled)


def gamma_of_pair(system: Sequence[Span], gold: Sequence[Span]) -> float | None:
    """γ of one output's two annotations; None where fewer than two of them marked anything."""
    pa = _library()
    from pyannote.core import Segment

    continuum = pa.Continuum()
    for annotator, spans in (("system", system), ("gold", gold)):
        for start, end in spans:
            if end > start:
                continuum.add(annotator, Segment(start, end), CATEGORY)
    if len(continuum.annotators) < 2:
        return None
    dissimilarity = _dissimilarity()
    with _quiet_seeded(SETTINGS["seed"]):
        return float(continuum.compute_gamma(dissimilarity, soft=SETTINGS["soft"]).gamma)


def output_gammas(
    docs: Sequence[SpanDocument], predictions: Mapping[str, Sequence[Span] | None]
) -> dict[str, tuple[float | None, int]]:
    """Per scored output: (its γ or None, the spans both sides marked). As everywhere in the span
    metrics, an output without a prediction (absent or None) is unscored and left out."""
    values: dict[str, tuple[float | None, int]] = {}
    for doc in docs:
        predicted = predictions.get(doc.id)
        if predicted is not None:
            marked = sum(1 for s, e in [*predicted, *doc.gold_spans] if e > s)
            values[doc.id] = (gamma_of_pair(predicted, doc.gold_spans), marked)
    return values


def gamma_summary(values: Iterable[tuple[float | None, int]]) -> dict[str, Any]:
    """Mean γ over the outputs that have one, and factgenie's s_empty = 1 / (1 + spans) over the
    others; each mean None when no output has it."""
    gammas, s_empty = [], []
    for gamma, marked in values:
        if gamma is None:
            s_empty.append(1 / (1 + marked))
        else:
            gammas.append(gamma)
    return {
        "gamma": sum(gammas) / len(gammas) if gammas else None,
        "gamma_outputs": len(gammas),
        "s_empty": sum(s_empty) / len(s_empty) if s_empty else None,
        "s_empty_outputs": len(s_empty),
        "settings": {**SETTINGS, "category": CATEGORY, "library": "pygamma-agreement"},
    }


def gamma_agreement(docs: Sequence[SpanDocument], predictions: Mapping[str, Sequence[Span] | None]) -> dict[str, Any]:
    """`gamma_summary` of the scored outputs of `docs`."""
    return gamma_summary(output_gammas(docs, predictions).values())
