"""Which rows a probability reader computes for one choice's alternatives (`probabilities.alternative_runs`):
each row read once, none that nothing reads."""

from __future__ import annotations

from spanjudge.inference.probabilities import alternative_runs


def test_an_ending_choice_reads_every_prefix_once_and_the_whole_tails() -> None:
    # score values as digit tokens: 87 and 85 share the row after 8; 10 is inside 100
    tails = [[8, 7], [8, 5], [9], [1, 0, 0], [1, 0]]
    assert alternative_runs(tails, end=True) == [((1, 0, 0), [1, 2, 3]), ((8, 5), [1, 2]), ((8, 7), [2]), ((9,), [1])]


def test_a_choice_that_goes_on_never_runs_a_tails_last_token() -> None:
    # the row after a tail's last token predicts what follows the choice, which nothing reads
    assert alternative_runs([[8, 7], [8, 5], [9], [1, 0, 0]], end=False) == [((1, 0), [1, 2]), ((8,), [1])]
    assert alternative_runs([[4], [5]], end=False) == []  # one-token alternatives: the reply's own row reads them


def test_every_row_read_is_given_by_exactly_one_run() -> None:
    tails = [[3, 1, 4], [3, 1, 5], [3, 9], [2], [2, 6, 5, 3]]
    runs = alternative_runs(tails, end=True)
    given = [run[:length] for run, lengths in runs for length in lengths]
    read = {tuple(tail[:length]) for tail in tails for length in range(1, len(tail) + 1)}
    assert sorted(given) == sorted(read) and len(given) == len(set(given))
