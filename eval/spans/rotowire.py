"""The RotoWire factual-accuracy span set (Thomson & Reiter): the GSML gold parser, the
box-score renderer that is the judge's input, and `load_rotowire`."""

from __future__ import annotations

import csv
import datetime as dt
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.eval.spans.documents import (
    SPAN_INPUT_HEADER,
    SPAN_TASK_ID,
    GoldSpan,
    SpanDocument,
    default_root,
    read_jsonl,
    require_file,
)
from spanjudge.eval.spans.metrics import token_spans
from spanjudge.eval.spans.sets import SpanSetKind

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
    with require_file(path).open(newline="", encoding="utf-8") as handle:
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


def load_rotowire(root: Path | str | None = None, split: str = "test", limit: int | None = None) -> list[SpanDocument]:
    """RotoWire accuracy gold spans on the tokenized texts the token ids refer to.

    The output is texts/<id>.txt exactly as shipped (space-separated tokens, e.g. "Kings ( 13
    - 18 )"): gsml.csv's DOC_TOKEN_START/END are 1-based, inclusive whitespace-token indices
    into it, so the character span runs from the start of the first token to the end of the
    last — exact by construction, checked against the TOKENS column in the tests. Documents
    come in text-id order; `limit` keeps the first ones.
    """
    base = default_root(root) / "spans" / "rotowire_accuracy" / split
    if not base.is_dir():
        raise InputError(f"{base}: RotoWire split '{split}' not found (expected test or train)")
    gold_rows = _rotowire_gold(base / "gsml.csv")
    records: dict[str, dict[str, Any]] = {}
    for number, record in read_jsonl(base / "shared_task.jsonl"):
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


SPAN_SET = SpanSetKind(
    "rotowire",
    "Thomson & Reiter 2021, the RotoWire accuracy shared task's test texts",
    lambda argument, root, limit: (load_rotowire(root, limit=limit), None),
)
