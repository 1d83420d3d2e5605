"""γ agreement (factgenie's procedure on pygamma-agreement) and word-boundary snapping."""

from __future__ import annotations

import numpy as np
import pytest

from spanjudge.eval.spans.documents import GoldSpan, SpanDocument
from spanjudge.eval.spans.gamma import gamma_agreement, gamma_of_pair
from spanjudge.eval.spans.metrics import snap_to_words

TEXT = "The Bruins won 3-1 at home, scoring twice in the first period."


def doc(doc_id: str, gold: list[tuple[int, int]]) -> SpanDocument:
    return SpanDocument(doc_id, "d", "t", {}, TEXT, tuple(GoldSpan(s, e, "0") for s, e in gold))


def test_snapping_grows_spans_to_whole_words_and_trims_whitespace() -> None:
    bruins = TEXT.index("Bruins")
    assert snap_to_words([(bruins + 2, bruins + 4)], TEXT) == [(bruins, bruins + 6)]  # inside one word
    won = TEXT.index("won")
    assert snap_to_words([(won - 1, won + 2)], TEXT) == [(won, won + 3)]  # a leading space, a cut word
    score = TEXT.index("3-1")
    assert snap_to_words([(score, score + 1)], TEXT) == [(score, score + 1)]  # "3" is a whole word before "-"
    assert snap_to_words([(won - 1, won)], TEXT) == []  # only whitespace: nothing left
    # two spans inside one word snap to the same range: kept once
    assert snap_to_words([(bruins, bruins + 1), (bruins + 3, bruins + 5)], TEXT) == [(bruins, bruins + 6)]
    assert snap_to_words([(0, len(TEXT))], TEXT) == [(0, len(TEXT))]


def test_gamma_is_one_for_identical_spans_and_falls_as_they_part() -> None:
    same = [(4, 10), (15, 18)]
    assert gamma_of_pair(same, same) == pytest.approx(1.0)
    shifted = gamma_of_pair([(5, 11), (15, 18)], same)
    apart = gamma_of_pair([(40, 46)], [(4, 10)])
    assert shifted is not None and apart is not None
    assert 1.0 > shifted > apart
    assert gamma_of_pair([], same) is None and gamma_of_pair(same, []) is None  # one annotator only


def test_gamma_is_seeded_and_leaves_numpy_as_it_was() -> None:
    np.random.seed(7)
    expected_next = np.random.random()
    np.random.seed(7)
    first = gamma_of_pair([(0, 3), (20, 30)], [(1, 3), (24, 33), (50, 55)])
    assert np.random.random() == expected_next  # the caller's random stream is untouched
    assert gamma_of_pair([(0, 3), (20, 30)], [(1, 3), (24, 33), (50, 55)]) == first


def test_outputs_without_gamma_get_factgenies_s_empty_and_unscored_ones_nothing() -> None:
    docs = [doc("both", [(4, 10)]), doc("gold-only", [(4, 10), (15, 18)]), doc("neither", []), doc("unscored", [])]
    result = gamma_agreement(docs, {"both": [(4, 10)], "gold-only": [], "neither": [], "unscored": None})
    assert result["gamma"] == pytest.approx(1.0) and result["gamma_outputs"] == 1
    # gold-only: 1 / (1 + 2 spans); neither: 1 / (1 + 0)
    assert result["s_empty_outputs"] == 2 and result["s_empty"] == pytest.approx((1 / 3 + 1) / 2)
    assert result["settings"]["soft"] is True and result["settings"]["delta_empty"] == 1.0
    assert gamma_agreement(docs, {})["gamma"] is None


def test_pygamma_kernels_are_compiled_once_and_kept_by_numba() -> None:
    """pygamma-agreement compiles its numba kernels at import (24 s on 2 cores); spanjudge imports it with numba's
    cache on, so the next process loads them instead of compiling again."""
    from numba.core.caching import NullCache

    from spanjudge.eval.spans.gamma import _library

    kernel = _library().numba_utils.levenshtein
    assert not isinstance(kernel._cache, NullCache)
    assert kernel.stats.cache_hits or kernel.stats.cache_misses  # compiled once, then read from the cache
