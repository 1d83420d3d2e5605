"""Where a protocol student's judging time goes on the transformers engine, by step (issue #67, "judging fast enough
to search"): the wall time spent in each of the engine's own steps while it judges the dev outputs of the tables
named, as the protocol judges them (greedy, ≤ 320 new tokens unless --max-new-tokens, 1 retry, 4,096-token context,
probabilities), drafted decoding writing --batch-size replies together, with --stop its replies stopped at a repeat.

The steps are timed by wrapping the engine's methods (writing a reply; a drafted writing's decoder passes,
checking passes and whole-layer checks; the reading's first rows, alternatives' passes and output-layer products),
so nested steps overlap: a checking pass is inside its writing. One run; loading excluded. The replies are not
compared with anything here (bench/drafted_judging.py does that on the protocol's kept judgments).

    .venv/bin/python bench/judging_profile.py --run runs/bench/distill_quintd/gemma3-mixed-cut-s42 \\
        --decoding drafted --tables 70 71      # → a row of bench/results/judging_profile.{json,md}
    .venv/bin/python bench/judging_profile.py --run runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1 \
        --stop --max-new-tokens 512 --batch-size 4 --tables 70 71
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import merge_labelled_row  # noqa: E402

from spanjudge.eval.spans.judging import judge_span_documents  # noqa: E402
from spanjudge.eval.spans.quintd import QUINTD_SPLIT_DOMAINS, quintd_tables  # noqa: E402
from spanjudge.inference.backends import transformers_drafted, transformers_local, transformers_reader  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402

OUT = BENCH / "results" / "judging_profile"
JUDGING = {"max_new_tokens": 320, "retries": 1, "max_context": 4096, "probabilities": True}  # the protocol's
STEPS = {  # a row's column: the method timed
    "generate": (transformers_local.TransformersBackend, "generate"),
    "reading": (transformers_local.TransformersBackend, "read_probabilities"),
    "drafted passes": (transformers_drafted.DraftedReader, "_states"),
    "rows' passes": (transformers_drafted.DraftedReader, "_row_states"),
    "whole-layer checks": (transformers_drafted.DraftedReader, "_first_disagreement"),
    "alternatives' passes": (transformers_reader.ProbabilityReader, "_read_runs"),
    "output-layer products": (transformers_reader.ProbabilityReader, "_output_rows"),
}


def timed(spent: dict[str, float], calls: dict[str, int], rows: dict[str, int]) -> None:
    """Wrap each step of STEPS so that its wall time, calls (and the output rows made) add up in these counters."""
    for name, (owner, method) in STEPS.items():
        original: Callable[..., Any] = getattr(owner, method)

        def wrapped(*args: Any, _name: str = name, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return _original(*args, **kwargs)
            finally:
                spent[_name] += time.perf_counter() - started
                calls[_name] += 1
                if _name == "output-layer products":
                    rows[_name] += int(args[1].shape[0])

        setattr(owner, method, wrapped)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--run", type=Path, required=True, help="a protocol run's work folder (student/adapter)")
    parser.add_argument("--decoding", choices=("batched", "drafted"), default="drafted")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 71), metavar=("FIRST", "STOP"))
    parser.add_argument("--label", help="the row's label (default: run, decoding and tables)")
    parser.add_argument("--batch-size", type=int, default=1, help="replies written together (drafted: rows a pass)")
    parser.add_argument("--stop", action="store_true", help="stop_at_repeat (drafted: the search's judge)")
    parser.add_argument("--max-new-tokens", type=int, default=JUDGING["max_new_tokens"])
    args = parser.parse_args()
    adapter = args.run / "student" / "adapter"
    if not adapter.is_dir():
        parser.error(f"--run {args.run}: no trained student there (student/adapter); run the protocol first")
    import torch

    spent: dict[str, float] = collections.defaultdict(float)
    calls: dict[str, int] = collections.defaultdict(int)
    rows: dict[str, int] = collections.defaultdict(int)
    timed(spent, calls, rows)
    options = {"decoding": args.decoding, "batch_size": args.batch_size, "stop_at_repeat": args.stop}
    judging = {**JUDGING, "max_new_tokens": args.max_new_tokens}
    judge = Judge.from_pretrained(adapter, engine="transformers", engine_options=options, **judging)
    first, stop = args.tables
    docs = quintd_tables("human", (first, stop), QUINTD_SPLIT_DOMAINS)
    with tempfile.TemporaryDirectory() as work:
        try:
            judged = judge_span_documents(judge, docs, Path(work) / "judgments.json")
        finally:
            judge.close()
    label = args.label or f"{args.run.name} {args.decoding} x{args.batch_size} {first}-{stop - 1}"
    row = {
        "label": label,
        "decoding": args.decoding,
        "batch_size": args.batch_size,
        "stop_at_repeat": args.stop,
        "max_new_tokens": args.max_new_tokens,
        "tables": [first, stop],
        "outputs": len(docs),
        "threads": torch.get_num_threads(),
        "wall_s": judged["wall_s"],
        "steps": {name: {"s": round(spent[name], 1), "calls": calls[name]} for name in STEPS},
        "output_rows": rows["output-layer products"],
    }
    merge_labelled_row(OUT, row, markdown)


def _step(row: dict[str, Any], name: str) -> str:
    step = row["steps"].get(name)  # rows made before a step was timed lack it
    return "–" if step is None else f"{step['s']} ({step['calls']})"


def markdown(where: str, rows: list[dict[str, Any]]) -> list[str]:
    head = " | ".join(f"{name} s (calls)" for name in STEPS)
    return [
        "# Where a student's judging time goes, by step (`bench/judging_profile.py`)",
        "",
        f"Machine: {where}. The protocol's judging (greedy, 1 retry, probabilities; ≤ 320 new tokens unless the row "
        "says) of every system's output of the quintd-1 dev tables named, in wikidata, ice_hockey and owid; seconds "
        "spent in each of the engine's steps (nested: a drafted pass is inside `generate`), their calls, and the rows "
        "the output layer made. Batch: the replies drafted decoding writes together (rows of one pass); stop: "
        "`stop_at_repeat`. One run per row; loading excluded.",
        "",
        f"| label | decoding | batch | stop | new tokens | outputs | threads | wall s | {head} | output rows |",
        "|---|---|---:|---|---:|---:|---:|---:|" + "---:|" * len(STEPS) + "---:|",
        *(_line(r) for r in rows),
    ]


def _line(r: dict[str, Any]) -> str:
    stop = "yes" if r.get("stop_at_repeat") else "no"
    setting = f"{r['decoding']} | {r.get('batch_size', 1)} | {stop} | {r.get('max_new_tokens', 320)}"
    steps = " | ".join(_step(r, n) for n in STEPS)
    return (
        f"| {r['label']} | {setting} | {r['outputs']} | {r['threads']} | {r['wall_s']} | {steps} | {r['output_rows']} |"
    )


if __name__ == "__main__":
    main()
