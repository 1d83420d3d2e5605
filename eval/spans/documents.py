"""What a span set is made of: output texts with their human-marked error spans.

Two span sets from ../shared/data/spans/ (see their MANIFEST.md):
- RotoWire factual-accuracy annotations (Thomson & Reiter): 30 test / 60 train NBA game
  summaries with token-level gold mistakes, converted to exact character offsets (`rotowire.py`).
- quintd-1 (Kasner & Dušek 2024): 2000 LLM data-to-text outputs over 5 domains with
  character-offset spans from crowd workers (`human`), a doubly annotated subset
  (`human_corr`) or GPT-4 (`gpt-4`) (`quintd.py`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.core.jsonl import jsonl_lines
from spanjudge.core.paths import data_dir

Span = tuple[int, int]  # character offsets into one output text, half-open [start, end)

# No catalog task is RotoWire-specific; table-to-text (input header "Table") is the closest
# data-to-text task, and tests/integration/test_spans.py checks it still exists. quintd-1 has its own.
SPAN_TASK_ID = "table_to_text"
SPAN_INPUT_HEADER = "Table"
QUINTD_TASK_ID = "quintd1"
QUINTD_INPUT_HEADER = "Data"


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


def default_root(root: Path | str | None) -> Path:
    return Path(root) if root is not None else data_dir()


def require_file(path: Path) -> Path:
    if not path.is_file():
        raise InputError(f"{path}: file not found")
    return path


def read_jsonl(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, object) for every line (`inference.jsonl.jsonl_lines`)."""
    return list(jsonl_lines(require_file(path)))
