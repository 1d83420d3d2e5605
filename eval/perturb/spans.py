"""Error-span benchmarks: span P/R/F1, the RotoWire and quintd-1 gold-span sets, a number baseline.

A judge's error spans are compared with human ones on character offsets into one output
text, half-open [start, end). Three views, each summed over documents (micro):
exact spans, overlapping mistakes (the RotoWire shared-task protocol) and tokens.

Two span sets from ../shared/data/spans/ (see their MANIFEST.md):
- RotoWire factual-accuracy annotations (Thomson & Reiter): 30 test / 60 train NBA game
  summaries with token-level gold mistakes, converted here to exact character offsets.
- quintd-1 (Kasner & Dušek 2024): 2000 LLM data-to-text outputs over 5 domains with
  character-offset spans from crowd workers (`human`), a doubly annotated subset
  (`human_corr`) or GPT-4 (`gpt-4`).
"""

from __future__ import annotations

import csv
import datetime as dt
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanjudge.data_gen.quintd import (
    QUINTD_DOMAINS,
    QuintdOutput,
    read_quintd,
)
from spanjudge.inference.errors import InputError
from spanjudge.inference.paths import data_dir

Span = tuple[int, int]

# No catalog task is RotoWire-specific; table-to-text (input header "Table") is the closest
# data-to-text task, and tests/test_spans.py checks it still exists. quintd-1 has its own.
SPAN_TASK_ID = "table_to_text"
SPAN_INPUT_HEADER = "Table"
QUINTD_TASK_ID = "quintd1"
QUINTD_INPUT_HEADER = "Data"


# ---------------------------------------------------------------------------------------------
# Span metrics
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PRF:
    """Counts and the scores derived from them.

    Zero denominators give 0.0 (sklearn's zero_division=0): a judge that marks nothing has
    precision 0, and a document without gold spans has recall 0. Per-document values are
    therefore not meant to be averaged; sum the counts with `micro_total` and read the
    scores off the total.
    """

    tp: int
    fp: int
    fn: int

    @property
    def precision(self) -> float:
        return self.tp / (self.tp + self.fp) if self.tp + self.fp else 0.0

    @property
    def recall(self) -> float:
        return self.tp / (self.tp + self.fn) if self.tp + self.fn else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {
            "tp": self.tp,
            "fp": self.fp,
            "fn": self.fn,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }


def micro_total(parts: Iterable[PRF]) -> PRF:
    """Sum the counts over documents (micro average)."""
    tp = fp = fn = 0
    for part in parts:
        tp, fp, fn = tp + part.tp, fp + part.fp, fn + part.fn
    return PRF(tp, fp, fn)


def _check_spans(spans: Sequence[Span], what: str) -> list[Span]:
    checked = []
    for span in spans:
        start, end = int(span[0]), int(span[1])
        if start < 0 or end <= start:
            raise ValueError(f"{what} span {tuple(span)} is not a non-empty half-open [start, end) range")
        checked.append((start, end))
    return checked


def _exact_matches(predicted: Sequence[Span], gold: Sequence[Span]) -> list[bool]:
    """For each gold span (in the given order): was an identical unused prediction found."""
    unused: dict[Span, int] = {}
    for span in predicted:
        unused[span] = unused.get(span, 0) + 1
    matched = []
    for span in gold:
        hit = unused.get(span, 0) > 0
        if hit:
            unused[span] -= 1
        matched.append(hit)
    return matched


def _overlap_matches(predicted: Sequence[Span], gold: Sequence[Span]) -> list[bool]:
    """RotoWire protocol: gold spans left to right; each takes the first unused overlapping prediction.

    From the shared task's evaluate.py: "Once a submitted mistake has recalled a GSML mistake,
    the submitted mistake is consumed". Returns, per gold span in the given order, matched.
    """
    remaining = sorted(predicted)
    matched = [False] * len(gold)
    for g_index in sorted(range(len(gold)), key=lambda i: gold[i]):
        g_start, g_end = gold[g_index]
        for p_index, (p_start, p_end) in enumerate(remaining):
            if p_start < g_end and g_start < p_end:
                del remaining[p_index]
                matched[g_index] = True
                break
    return matched


def _from_matches(matched: Sequence[bool], n_predicted: int) -> PRF:
    tp = sum(matched)
    return PRF(tp=tp, fp=n_predicted - tp, fn=len(matched) - tp)


def exact_span_prf(predicted: Sequence[Span], gold: Sequence[Span]) -> PRF:
    """A prediction counts iff it equals a gold span not matched yet (one-to-one)."""
    pred, gold_ = _check_spans(predicted, "predicted"), _check_spans(gold, "gold")
    return _from_matches(_exact_matches(pred, gold_), len(pred))


def overlap_span_prf(predicted: Sequence[Span], gold: Sequence[Span]) -> PRF:
    """Mistake-level P/R of the RotoWire shared task (Thomson & Reiter 2021, evaluate.py).

    Gold spans, sorted by start, each consume the first (by start) unused predicted span
    that overlaps them by at least one character. tp = gold spans matched; recall = tp /
    gold, precision = tp / predictions, as evaluate.py divides the same matched count by
    both totals.
    """
    pred, gold_ = _check_spans(predicted, "predicted"), _check_spans(gold, "gold")
    return _from_matches(_overlap_matches(pred, gold_), len(pred))


def token_spans(text: str) -> list[Span]:
    """Character ranges of the whitespace-separated tokens of `text`, in order."""
    return [(m.start(), m.end()) for m in re.finditer(r"\S+", text)]


def _marked_tokens(spans: Sequence[Span], tokens: Sequence[Span]) -> set[int]:
    return {i for i, (t_start, t_end) in enumerate(tokens) for s, e in spans if s < t_end and t_start < e}


def token_prf(predicted: Sequence[Span], gold: Sequence[Span], text: str) -> PRF:
    """Token-level P/R: a whitespace token is marked if any of its characters lies in a span.

    This is the positional token view of the RotoWire evaluation (tokens marked by the gold
    and by the submission) carried over to character spans of any text.
    """
    pred, gold_ = _check_spans(predicted, "predicted"), _check_spans(gold, "gold")
    tokens = token_spans(text)
    p_tokens, g_tokens = _marked_tokens(pred, tokens), _marked_tokens(gold_, tokens)
    tp = len(p_tokens & g_tokens)
    return PRF(tp=tp, fp=len(p_tokens) - tp, fn=len(g_tokens) - tp)


# ---------------------------------------------------------------------------------------------
# Documents
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class GoldSpan:
    """One human-marked error: [start, end) into the output, with the data set's category."""

    start: int
    end: int
    category: str


@dataclass(frozen=True)
class SpanDocument:
    """One output to judge with its gold spans.

    `inputs` are keyed by the task's input headers; `dropped_gold` counts gold spans the
    loader could not place on the output (their text is not at their offset) — reported
    by `evaluate_spans`, never silently lost. `input_id` names the input the output was
    generated from (quintd-1: "<domain>/<table_idx>", shared by the four systems' outputs;
    RotoWire: the text id); bootstrap intervals resample inputs. Left empty it is the
    document's own id (every output its own input).
    """

    id: str
    dataset: str
    task_id: str
    inputs: dict[str, str]
    output: str
    gold: tuple[GoldSpan, ...]
    dropped_gold: int = field(default=0)
    input_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.input_id:
            object.__setattr__(self, "input_id", self.id)

    @property
    def gold_spans(self) -> list[Span]:
        return [(g.start, g.end) for g in self.gold]


def _default_root(root: Path | str | None) -> Path:
    return Path(root) if root is not None else data_dir()


def _require_file(path: Path) -> Path:
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    return path


def _read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    records = []
    for number, line in enumerate(_require_file(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise InputError(f"{path}:{number}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}:{number}: expected a JSON object, got {type(record).__name__}")
        records.append((number, record))
    return records


# --- RotoWire ---------------------------------------------------------------------------------

_GSML_COLUMNS = ("TEXT_ID", "TOKENS", "DOC_TOKEN_START", "DOC_TOKEN_END", "TYPE")
_PLAYER_STATS = (
    ("MIN", "MIN"),
    ("PTS", "PTS"),
    ("FG", ("FGM", "FGA")),
    ("3P", ("FG3M", "FG3A")),
    ("FT", ("FTM", "FTA")),
    ("REB", "REB"),
    ("OREB", "OREB"),
    ("AST", "AST"),
    ("STL", "STL"),
    ("BLK", "BLK"),
    ("TO", "TO"),
    ("PF", "PF"),
)


def _team_line(line: Mapping[str, str], role: str) -> str:
    quarters = "-".join(line.get(f"TEAM-PTS_QTR{q}", "?") for q in range(1, 5))
    return (
        f"{line.get('TEAM-CITY', '?')} {line.get('TEAM-NAME', '?')} ({role}): record "
        f"{line.get('TEAM-WINS', '?')}-{line.get('TEAM-LOSSES', '?')}, PTS {line.get('TEAM-PTS', '?')} "
        f"(quarters {quarters}), FG% {line.get('TEAM-FG_PCT', '?')}, 3P% {line.get('TEAM-FG3_PCT', '?')}, "
        f"FT% {line.get('TEAM-FT_PCT', '?')}, REB {line.get('TEAM-REB', '?')}, AST {line.get('TEAM-AST', '?')}, "
        f"TOV {line.get('TEAM-TOV', '?')}"
    )


def _game_date(day: str) -> str:
    """'12_29_14' → '2014-12-29 (Monday)': mistakes about the weekday are common in the gold."""
    try:
        date = dt.datetime.strptime(day, "%m_%d_%y").date()
    except ValueError:
        return day
    return f"{date.isoformat()} ({date.strftime('%A')})"


def render_box_score(record: Mapping[str, Any]) -> str:
    """The game as compact text: date, both team lines, one line per player who played.

    RotoWire's raw record also carries the reference summary and repeats each statistic as
    a {player index: value} map; we keep only the box score the annotators checked against
    (about 2–3k characters per game, so no truncation is needed), list players by team in
    box-score order and name the ones who did not play (MIN "N/A") on one line per team.
    """
    box = record.get("box_score") or {}
    names = box.get("PLAYER_NAME") or {}
    lines = [
        f"Date: {_game_date(str(record.get('day', '?')))}",
        _team_line(record.get("home_line") or {}, "home"),
        _team_line(record.get("vis_line") or {}, "visitors"),
    ]
    for city in (record.get("home_city"), record.get("vis_city")):
        team = [i for i in sorted(names, key=int) if (box.get("TEAM_CITY") or {}).get(i) == city]
        played = [i for i in team if (box.get("MIN") or {}).get(i) not in (None, "N/A")]
        lines.append(f"{city} players (starter position, statistics):")
        for i in played:
            stats = []
            for label, key in _PLAYER_STATS:
                if isinstance(key, tuple):
                    made, tried = ((box.get(k) or {}).get(i, "?") for k in key)
                    stats.append(f"{label} {made}/{tried}")
                else:
                    stats.append(f"{label} {(box.get(key) or {}).get(i, '?')}")
            position = (box.get("START_POSITION") or {}).get(i, "N/A")
            lines.append(f"- {names[i]}" + (f" ({position})" if position != "N/A" else "") + ": " + ", ".join(stats))
        idle = [names[i] for i in team if i not in played]
        if idle:
            lines.append(f"{city} did not play: {', '.join(idle)}")
    return "\n".join(lines)


def _gsml_int(row: Mapping[str, str], column: str, where: str) -> int:
    try:
        return int(row[column])
    except (TypeError, ValueError):
        raise InputError(f"{where}: {column} is {row.get(column)!r}, not a token number") from None


def _rotowire_gold(path: Path) -> dict[str, list[tuple[int, int, str, str, str]]]:
    """gsml.csv rows by text id: (first token, last token, type, tokens, where), token ids 1-based."""
    with _require_file(path).open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        missing = [c for c in _GSML_COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{path}:1: missing column(s) {', '.join(missing)}")
        rows: dict[str, list[tuple[int, int, str, str, str]]] = {}
        for row in reader:
            where = f"{path}:{reader.line_num}"
            first, last = _gsml_int(row, "DOC_TOKEN_START", where), _gsml_int(row, "DOC_TOKEN_END", where)
            if first < 1 or last < first:
                raise InputError(f"{where}: token range {first}..{last} is empty or not 1-based")
            text_id = (row["TEXT_ID"] or "").removesuffix(".txt")
            rows.setdefault(text_id, []).append((first, last, row["TYPE"], row["TOKENS"], where))
    return rows


def rotowire_token_text(tokens: str) -> str:
    """A gold TOKENS cell with its whitespace normalised, for comparing with the output text."""
    return " ".join(tokens.split())


def load_rotowire(root: Path | str | None = None, split: str = "test", limit: int | None = None) -> list[SpanDocument]:
    """RotoWire accuracy gold spans on the tokenized texts the token ids refer to.

    The output is texts/<id>.txt exactly as shipped (space-separated tokens, e.g. "Kings ( 13
    - 18 )"): gsml.csv's DOC_TOKEN_START/END are 1-based, inclusive whitespace-token indices
    into it, so the character span runs from the start of the first token to the end of the
    last — exact by construction, checked against the TOKENS column in the tests. Documents
    come in text-id order; `limit` keeps the first ones.
    """
    base = _default_root(root) / "spans" / "rotowire_accuracy" / split
    if not base.is_dir():
        raise InputError(f"{base}: RotoWire split '{split}' not found (expected test or train)")
    gold_rows = _rotowire_gold(base / "gsml.csv")
    records: dict[str, dict[str, Any]] = {}
    for number, record in _read_jsonl(base / "shared_task.jsonl"):
        text_id = record.get("shared_task_text_id")
        if not isinstance(text_id, str) or "box_score" not in record:
            raise InputError(f"{base / 'shared_task.jsonl'}:{number}: no shared_task_text_id or box_score")
        records[text_id] = record
    text_ids = sorted(p.stem for p in (base / "texts").glob("*.txt"))
    if not text_ids:
        raise InputError(f"{base / 'texts'}: no texts found")
    unknown = sorted(set(gold_rows) - set(text_ids))
    if unknown:
        raise InputError(f"{base / 'gsml.csv'}: gold spans for unknown text(s) {', '.join(unknown[:5])}")
    documents = []
    for text_id in text_ids[:limit] if limit is not None else text_ids:
        if text_id not in records:
            raise InputError(f"{base / 'shared_task.jsonl'}: no record for text {text_id}")
        output = (base / "texts" / f"{text_id}.txt").read_text(encoding="utf-8")
        tokens = token_spans(output)
        gold = []
        for first, last, category, _, where in gold_rows.get(text_id, []):
            if last > len(tokens):
                raise InputError(f"{where}: token {last} is past the end of {text_id}.txt ({len(tokens)} tokens)")
            gold.append(GoldSpan(tokens[first - 1][0], tokens[last - 1][1], category))
        documents.append(
            SpanDocument(
                id=f"rotowire/{split}/{text_id}",
                dataset="rotowire_accuracy",
                task_id=SPAN_TASK_ID,
                inputs={SPAN_INPUT_HEADER: render_box_score(records[text_id])},
                output=output,
                gold=tuple(sorted(gold, key=lambda g: (g.start, g.end))),
                input_id=text_id,
            )
        )
    return documents


# --- quintd-1 ---------------------------------------------------------------------------------


def load_quintd1(
    root: Path | str | None = None,
    annotator: str = "human",
    limit: int | None = None,
    domains: Sequence[str] = QUINTD_DOMAINS,
) -> list[SpanDocument]:
    """quintd-1 outputs with the chosen annotator's spans (start + len(text) characters).

    Read by `spanjudge.data_gen.quintd.read_quintd`, the importer's strict reader. A span that
    cannot be placed — empty text (5 of 5500 human spans, all owid at offset 0; 2 GPT-4 "no
    error" notes) or text not found at its offset (1 human span, 3 of 7012 GPT-4 spans) — is
    dropped, never moved, and counted in `SpanDocument.dropped_gold`. The documents use
    quintd-1's own catalog task (`quintd1`, aspect `accuracy`, input header `Data`). Ids are
    "quintd1/<domain>/<model>/<table_idx>"; where the annotator folder holds several records
    for one output (human_corr) each id gets "@<annotator_id>"; records repeated verbatim
    (same output, annotator and spans: 20 of human_corr's 200) are kept once. Documents are
    sorted by domain, model, table index and annotator; `limit` keeps the first ones.
    """
    base = _default_root(root) / "spans" / "quintd1"
    found = sorted(
        read_quintd(base, annotator, domains=domains, on_mismatch="drop", empty_spans="drop"),
        key=lambda o: (o.domain, o.model, o.index, o.annotator_id),
    )

    def content(o: QuintdOutput) -> tuple[Any, ...]:
        return o.domain, o.model, o.index, o.annotator_id, o.spans, o.dropped

    # human_corr repeats 20 records verbatim (same output, annotator and spans): keep one
    found = [o for i, o in enumerate(found) if i == 0 or content(o) != content(found[i - 1])]
    repeats = {key for key, n in _counts((o.domain, o.model, o.index) for o in found).items() if n > 1}
    documents = []
    for o in found[:limit] if limit is not None else found:
        repeated = (o.domain, o.model, o.index) in repeats
        documents.append(
            SpanDocument(
                id=f"quintd1/{o.domain}/{o.model}/{o.index}" + (f"@{o.annotator_id}" if repeated else ""),
                dataset=f"quintd1-{annotator}",
                task_id=QUINTD_TASK_ID,
                inputs={QUINTD_INPUT_HEADER: o.data},
                output=o.output,
                gold=tuple(
                    sorted((GoldSpan(s.start, s.end, s.category) for s in o.spans), key=lambda g: (g.start, g.end))
                ),
                dropped_gold=len(o.dropped),
                input_id=o.input_id,
            )
        )
    return documents


def _counts(items: Iterable[Any]) -> dict[Any, int]:
    counts: dict[Any, int] = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts


# ---------------------------------------------------------------------------------------------
# Baseline and evaluation
# ---------------------------------------------------------------------------------------------

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")


def mark_numbers(text: str) -> list[Span]:
    """Trivial baseline: every number (digits, with inner . or , groups) is an error.

    Numbers are the largest RotoWire error type, so this floor shows what a judge must beat.
    """
    return [(m.start(), m.end()) for m in _NUMBER.finditer(text)]


def evaluate_spans(docs: Sequence[SpanDocument], predictions: Mapping[str, Sequence[Span] | None]) -> dict[str, Any]:
    """Micro exact / overlap / token P/R/F1 over the scored documents, plus per-category recall.

    A document whose prediction is None (the judge produced no evaluation) or that is absent
    from `predictions` is unscored: counted, and left out of every total — not treated as
    "no errors", which would reward silence with free precision. Per-category recall is the
    share of gold spans of each category matched in the exact and the overlap matching.
    `gold_dropped` sums the loaders' unplaceable gold spans over the scored documents.
    """
    exact, overlap, token = [], [], []
    by_category: dict[str, dict[str, int]] = {}
    unscored = missing = dropped = 0
    for doc in docs:
        if doc.id not in predictions:
            missing += 1
            continue
        predicted = predictions[doc.id]
        if predicted is None:
            unscored += 1
            continue
        dropped += doc.dropped_gold
        pred = _check_spans(predicted, f"{doc.id}: predicted")
        gold = doc.gold_spans
        exact_hits, overlap_hits = _exact_matches(pred, gold), _overlap_matches(pred, gold)
        exact.append(_from_matches(exact_hits, len(pred)))
        overlap.append(_from_matches(overlap_hits, len(pred)))
        token.append(token_prf(pred, gold, doc.output))
        for span, e_hit, o_hit in zip(doc.gold, exact_hits, overlap_hits, strict=True):
            tally = by_category.setdefault(span.category, {"gold": 0, "exact": 0, "overlap": 0})
            tally["gold"] += 1
            tally["exact"] += int(e_hit)
            tally["overlap"] += int(o_hit)
    return {
        "documents": len(docs),
        "scored": len(exact),
        "unscored": unscored,
        "missing": missing,
        "gold_dropped": dropped,
        "exact": micro_total(exact).as_dict(),
        "overlap": micro_total(overlap).as_dict(),
        "token": micro_total(token).as_dict(),
        "per_category_recall": {
            category: {
                "gold": t["gold"],
                "exact": t["exact"] / t["gold"],
                "overlap": t["overlap"] / t["gold"],
            }
            for category, t in sorted(by_category.items())
        },
    }
