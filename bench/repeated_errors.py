"""How often a protocol student writes the same error twice: greedy decoding's loop (issue #67). No model runs.

For every protocol run whose dev judgments are kept (bench/results/distill_judgments/LABEL/dev/), each greedy reply
is read as written (an unscored reply too, which the parser refuses: it ran out of tokens inside an error) and its
error blocks, a location line and the explanation line after it (`contract.render`'s fields), are compared: a reply
repeats itself when one block is written again word for word. Counted per run, apart for the scored replies and
the unscored ones, by domain and pooled.

    .venv/bin/python bench/repeated_errors.py     # → bench/results/repeated_errors.{json,md}
"""

from __future__ import annotations

import collections
import gzip
import json
import re
import sys
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402

from spanjudge.inference.contract.render import EXPLANATION_FIELD, LOCATION_FIELD  # noqa: E402

JUDGMENTS = BENCH / "results" / "distill_judgments"
KEPT = "dev/student+probabilities.json.gz"
OUT = BENCH / "results" / "repeated_errors"
DOMAINS = ("wikidata", "ice_hockey", "owid")
BLOCK = re.compile(f"^{re.escape(LOCATION_FIELD)}(.*)\n{re.escape(EXPLANATION_FIELD)}(.*)$", re.MULTILINE)


def repeats(reply: str) -> bool:
    """Whether `reply` writes one error block (location and explanation) twice."""
    blocks = BLOCK.findall(reply)
    return len(blocks) != len(set(blocks))


def run_row(label: str, rows: dict[str, Any]) -> dict[str, Any]:
    """One run's counts: replies, and those that repeat a block, scored and unscored, per domain and pooled."""
    counts: dict[str, collections.Counter[str]] = {d: collections.Counter() for d in (*DOMAINS, "pooled")}
    for output_id, row in rows.items():
        domain = next(d for d in DOMAINS if f"/{d}/" in output_id)
        kind = "unscored" if row.get("unscored_reason") else "scored"
        for where in (domain, "pooled"):
            counts[where][kind] += 1
            counts[where][f"{kind}_repeating"] += repeats(row.get("reply") or "")
    return {"label": label, **{where: dict(c) for where, c in counts.items()}}


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    def cell(counts: dict[str, int], kind: str) -> str:
        return f"{counts.get(f'{kind}_repeating', 0)}/{counts.get(kind, 0)}"

    head = " | ".join(f"{d} scored | {d} unscored" for d in (*DOMAINS, "pooled"))
    return [
        "# Replies that write an error twice (`bench/repeated_errors.py`)",
        "",
        f"Machine: {machine()} (no model runs). Every protocol run's kept dev replies (quintd-1 tables 70–79), greedy, "
        "as its engine wrote them: replies that write one error block (location and explanation) again word for "
        "word, of the scored replies and of the unscored ones (which ran out of tokens in both tries).",
        "",
        f"| run | {head} |",
        "|---|" + "---:|" * (2 * (len(DOMAINS) + 1)),
        *(
            f"| {r['label']} | "
            + " | ".join(f"{cell(r[d], 'scored')} | {cell(r[d], 'unscored')}" for d in (*DOMAINS, "pooled"))
            + " |"
            for r in rows
        ),
    ]


def main() -> None:
    rows = [
        run_row(p.name, json.loads(gzip.decompress((p / KEPT).read_bytes()))["rows"])
        for p in sorted(JUDGMENTS.iterdir())
        if (p / KEPT).is_file()
    ]
    write_report(OUT, {"machine": machine(), "rows": rows}, markdown(rows))


if __name__ == "__main__":
    main()
