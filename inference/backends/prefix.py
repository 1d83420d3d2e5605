"""Shared prompt prefixes: which prompts share one worth reading once, and how long it is.

A judge prompt holds the task, the aspect's definition and the input before the output, so every
output of one input (SummEval's 16 summaries of an article, quintd's 4 outputs of a table) shares
all of its prompt but the output. An engine that keeps a prefix's KV cache reads it once per group.

The groups come from the token ids themselves, never from a key that could ignore a difference:
two prompts share exactly the tokens they have in common, so a different aspect or input ends the
shared part where it starts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..chat import shared_length

# a prefix worth a cache of its own covers at least this share of the shorter prompt and this many
# tokens: below it (prompts of one task that share only its instructions) a run would save little
# and cut the batches into small ones
MIN_SHARE = 0.5
MIN_TOKENS = 16
# a prompt joins a run only if the run keeps this share of its prefix: outputs of one input part a
# few tokens apart, while a prompt that parts much earlier (another aspect, another input) would
# make every member read more
KEEP_SHARE = 0.9


@dataclass(frozen=True)
class PrefixRun:
    """Prompts (their indices) read after one shared prefix of `length` tokens (0: nothing shared)."""

    length: int
    members: tuple[int, ...]


@dataclass(frozen=True)
class PrefixBatch:
    """Prompts generated together (`members`, indices), each after the prefix of its run (`runs`, one
    per member, in the batch's order of first appearance). A prompt alone is its own run, its prefix
    all of it but the last token. `same_prefixes`: the batch before read exactly these prefixes, so
    their cache is reused rather than read again (a run longer than a batch)."""

    members: tuple[int, ...]
    runs: tuple[PrefixRun, ...]
    run_of_member: tuple[int, ...]  # for each member, its run's position in `runs`
    same_prefixes: bool


def prefix_runs(prompts: Sequence[Sequence[int]]) -> list[PrefixRun]:
    """The prompts ordered so that those sharing a prefix are adjacent (sorted by their token ids),
    cut into runs; a run's `length` is the prefix all its members share, leaving each at least one
    token of its own to read. A prompt joins the run before it when it shares at least half of
    itself (and MIN_TOKENS) with the run's first prompt and the run keeps KEEP_SHARE of its prefix.
    A prompt that shares no worthwhile prefix is a run of one, length 0."""
    order = sorted(range(len(prompts)), key=lambda i: list(prompts[i]))
    runs: list[list[int]] = []
    lengths: list[int] = []
    for index in order:
        prompt = prompts[index]
        if runs:
            first = prompts[runs[-1][0]]
            common = min(shared_length(first, prompt), len(prompt) - 1, len(first) - 1)
            keeps = len(runs[-1]) == 1 or common >= KEEP_SHARE * lengths[-1]
            if len(runs[-1]) > 1:
                common = min(common, lengths[-1])  # sorted: the run's prefix is what the first shares with all
            if keeps and common >= MIN_TOKENS and common >= MIN_SHARE * min(len(first), len(prompt)):
                runs[-1].append(index)
                lengths[-1] = common
                continue
        runs.append([index])
        lengths.append(0)
    return [PrefixRun(length, tuple(members)) for length, members in zip(lengths, runs, strict=True)]


def prefix_batches(prompts: Sequence[Sequence[int]], batch_size: int) -> list[PrefixBatch]:
    """The prompts in batches of at most `batch_size`, each batch with the prefixes it reads first.

    Runs are packed whole into a batch while they fit, so several inputs share one batch (quintd's 4
    outputs per table fill a batch of 16 with 4 tables); a run longer than a batch fills batches of its
    own, which read its prefix once (`same_prefixes`)."""
    runs = [
        run if run.length else PrefixRun(len(prompts[run.members[0]]) - 1, run.members)  # alone: all but one token
        for run in prefix_runs(prompts)
    ]
    cut: list[list[tuple[int, PrefixRun]]] = [[]]
    for run in runs:
        members = list(run.members)
        if cut[-1] and len(cut[-1]) + len(members) > batch_size and len(members) <= batch_size:
            cut.append([])  # a run that fits a batch stays whole
        for member in members:
            if len(cut[-1]) == batch_size:
                cut.append([])
            cut[-1].append((member, run))
    batches: list[PrefixBatch] = []
    for rows in cut:
        if not rows:
            continue
        order = list(dict.fromkeys(run for _, run in rows))
        same = bool(batches) and tuple(order) == batches[-1].runs
        batch_members = tuple(member for member, _ in rows)
        batches.append(PrefixBatch(batch_members, tuple(order), tuple(order.index(run) for _, run in rows), same))
    return batches
