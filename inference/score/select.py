"""`spanjudge select`: the outputs the judge is least sure of, as a factgenie campaign for people to
annotate: the first step of the active-learning loop (select, annotate, import the human spans as
training records, train again; docs/guide/score.md#select-what-the-judge-is-least-sure-of).

The uncertainty of a scored output (higher: less sure), by `--by`:
- `confidence`: 1 − the lowest confidence among its spans (each span's, from `score --probabilities`:
  the probability the judge gives to writing that error); an output without spans: 1 − P(no error);
- `no-error`: how close its P(no error) is to one half, 1 − |2 · P(no error) − 1|;
- `seeds`: how much judges scoring the same outputs disagree (e.g. one student trained with several
  seeds: one results file each): the mean over pairs of 1 − the Jaccard overlap of the characters their
  spans cover (two judges that mark nothing agree);
- `random`: a uniform draw (`--seed`), the loop's control arm.

The N most uncertain go into the campaign with the judge's spans (those of the first results file) as
pre-annotations, most uncertain first; ties keep the data's order. An unscored output has no spans to
show and no uncertainty to rank by: it is left out, and counted.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any, Literal

from spanjudge.core.errors import InputError

By = Literal["confidence", "no-error", "seeds", "random"]
BY: tuple[By, ...] = ("confidence", "no-error", "seeds", "random")
Row = Mapping[str, Any]


@dataclass(frozen=True)
class Selection:
    rows: list[Row]  # the chosen rows of the first results file, most uncertain first
    uncertainty: list[float]  # each one's, in the same order (empty for random: nothing is measured)
    unscored: int  # rows left out because a judge left them unscored


def select_rows(results: Sequence[Sequence[Row]], n: int, by: str, seed: int = 0) -> Selection:
    """The `n` rows to annotate next (see the module); `results`: one list of rows per results file."""
    if by not in BY:
        raise InputError(f"--by must be one of {', '.join(BY)}, not '{by}'")
    if by == "seeds" and len(results) < 2:
        raise InputError("--by seeds compares judges: give two or more results files of the same outputs")
    if by != "seeds" and len(results) > 1:
        raise InputError(f"--by {by} reads one results file; several are compared with --by seeds")
    first = list(results[0])
    by_id = [_by_id(rows, f"results file {number}") for number, rows in enumerate(results, 1)]
    for number, rows in enumerate(by_id[1:], 2):
        if rows.keys() != by_id[0].keys():
            missing = sorted(by_id[0].keys() ^ rows.keys())[:3]
            raise InputError(f"results file {number} does not score the same outputs as the first (e.g. {missing})")
        _check_same_run(by_id[0], rows, number)
    scored = [row for row in first if all(_scored(rows[str(row["id"])]) for rows in by_id)]
    if by == "random":
        chosen = random.Random(seed).sample(scored, min(n, len(scored)))
        return Selection(chosen, [], len(first) - len(scored))
    measure = [_uncertainty(row, by, [rows[str(row["id"])] for rows in by_id]) for row in scored]
    order = sorted(range(len(scored)), key=lambda i: -measure[i])[:n]  # stable: ties keep the data's order
    return Selection([scored[i] for i in order], [measure[i] for i in order], len(first) - len(scored))


def _by_id(rows: Sequence[Row], where: str) -> dict[str, Row]:
    found: dict[str, Row] = {}
    for row in rows:
        item = str(row["id"])
        if item in found:
            raise InputError(f"{where}: id '{row['id']}' appears twice")
        if "\t" in item or "\n" in item or "\r" in item:  # the printed list is one id a line, for `import --ids`
            raise InputError(f"{where}: id {item!r} holds a tab or a line break, which a list of ids cannot carry")
        found[item] = row
    return found


# what must be the same for two judges' rows of one output to be compared (as `compare` checks them): the
# output and its prompt, how it was judged; the judges themselves differ (one student per seed)
SAME_OUTPUT = {"task": "task", "aspect": "aspect", "prompt_sha256": "prompt (inputs, output, aspect definition)"}
SAME_RUN = {"decoding": "decoding", "prompt_template_sha256": "prompt template"}


def _check_same_run(first: Mapping[str, Row], other: Mapping[str, Row], number: int) -> None:
    """--by seeds: results file `number` judged the same outputs, the same way, as the first, by another judge."""
    for item, row in first.items():
        theirs = other[item]
        for field, label in (*SAME_OUTPUT.items(), *SAME_RUN.items()):
            if field in row and field in theirs and row[field] != theirs[field]:
                raise InputError(
                    f"results file {number}, id '{item}': another {label} than the first file's ({theirs[field]!r}, "
                    f"not {row[field]!r}); --by seeds compares judges of the same outputs, judged the same way"
                )
    models = ({row.get("model") for row in first.values()} & {row.get("model") for row in other.values()}) - {None}
    if models:
        raise InputError(
            f"results file {number} holds the same judge as the first ({sorted(map(str, models))[0]}): --by seeds "
            "compares several judges (e.g. one student per training seed)"
        )


def _scored(row: Row) -> bool:
    return row["evaluation"]["score"] is not None


def _uncertainty(row: Row, by: str, judged: list[Row]) -> float:
    if by == "seeds":
        covered = [_characters(r) for r in judged]
        pairs = list(combinations(covered, 2))
        return sum(1 - _jaccard(a, b) for a, b in pairs) / len(pairs)
    probabilities = row.get("probabilities")
    if not isinstance(probabilities, Mapping):
        raise InputError(
            f"id '{row['id']}': no probabilities in the results; --by {by} needs a judge scored with "
            "`spanjudge score --probabilities` (or use --by seeds or random)"
        )
    p_no_error = _probability(probabilities.get("p_no_error"), row, "p_no_error")
    if by == "no-error":
        return 1 - abs(2 * p_no_error - 1)
    confidences = [
        _probability(e["confidence"], row, f"error {number}'s confidence")
        for number, e in enumerate(row["evaluation"]["errors"], 1)
        if e.get("confidence") is not None
    ]
    return 1 - min(confidences) if confidences else 1 - p_no_error


def _probability(value: object, row: Row, name: str) -> float:
    """A probability read from a results row, or one InputError naming the row and the field."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:  # NaN fails too
        raise InputError(f"id '{row['id']}': {name} is {value!r}, not a probability from 0 to 1")
    return float(value)


def _characters(row: Row) -> set[int]:
    """The characters of the output its located spans cover."""
    return {i for e in row["evaluation"]["errors"] if e.get("start") is not None for i in range(e["start"], e["end"])}


def _jaccard(a: set[int], b: set[int]) -> float:
    return 1.0 if not a and not b else len(a & b) / len(a | b)
