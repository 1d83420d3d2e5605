"""Judging in one process, then in N worker processes with the cores shared out (`--judging-workers`), on the same
outputs in one run: seconds an output and whether the workers write the same judge's judgments (issue #67: fast
judging).

    .venv/bin/python bench/judging_workers.py --label NAME --run runs/bench/distill_quintd/LABEL \
        [--engine transformers-drafted-stop] [--tables 70 72] [--workers 2]

The judge is the run's trained student judging as the protocol judges (its engine, greedy, at most 512 new tokens
(the t50 recipes'; `--max-new-tokens`), one retry, a 4,096-token context, probabilities). The items are every
system's output of the given quintd-1 tables of wikidata, ice_hockey and owid. Each reading's wall time is
`judge_span_documents`' (the judges loaded before it: loading is not counted, in either). The rows: one process
with every core as threads, then `--workers` processes; each against the one-process reading (identical replies,
and the differences of the probabilities over them) and against the run's kept protocol judgments of the same
outputs, where kept (`bench/results/distill_judgments/RUN/SPLIT`; `--kept LABEL`: another label's, such as a run that
judged in a run folder not its own). `--against-kept`: no one-process reading here; the kept reading and its wall
time stand for it (on the same host and engine only). Rows merge into
bench/results/judging_workers.{json,md} under --label (a rerun replaces its label). Run it alone: two CPU-heavy
jobs on 2 cores distort each other. Not a test.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
os.environ.setdefault("HF_HUB_OFFLINE", "1")  # every model here is local

from gemma_judging_speed import compare  # noqa: E402
from report_files import merge_labelled_row  # noqa: E402

from spanjudge.core.cpus import cpu_threads  # noqa: E402
from spanjudge.eval.distill.judgments import archived  # noqa: E402
from spanjudge.eval.distill.phases import judge_maker  # noqa: E402
from spanjudge.eval.distill.study import StudySettings  # noqa: E402
from spanjudge.eval.spans.judging import judge_span_documents  # noqa: E402
from spanjudge.eval.spans.quintd import QUINTD_SPLIT_DOMAINS, QUINTD_SPLITS, quintd_tables  # noqa: E402
from spanjudge.inference.cpu_precision import _cpuinfo  # noqa: E402
from spanjudge.inference.shipped_models import gemma3_gguf  # noqa: E402

REPO = BENCH.parent
KEPT = BENCH / "results" / "distill_judgments"
OUT = BENCH / "results" / "judging_workers"


def judge(settings: StudySettings, adapter: Path, docs: list[Any], path: Path) -> dict[str, Any]:
    """The protocol's judge of `adapter` (its settings' engine and workers) on `docs`, kept in `path`."""
    import torch

    torch.set_num_threads(cpu_threads())  # one process: every core, as the protocol's judge has them
    make = judge_maker(settings.student_engine, adapter, gemma3_gguf(), None, settings, False, True)
    judged_by = make()  # loaded (and its workers started) before the clock starts
    try:
        return judge_span_documents(judged_by, docs, path)
    finally:
        judged_by.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--label", required=True, help="the row's label")
    parser.add_argument("--run", type=Path, required=True, help="a protocol run folder with a trained student")
    parser.add_argument("--engine", default="transformers-drafted-stop", help="the protocol's --student-engine")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 72), metavar=("FIRST", "STOP"))
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument(
        "--kept", metavar="LABEL", help="the protocol label whose kept judgments to compare with (default: the run's)"
    )
    parser.add_argument(
        "--against-kept",
        action="store_true",
        help="no one-process reading here: the kept judgments' own wall time is the one process's (the same host "
        "and engine only; say so)",
    )
    args = parser.parse_args()
    adapter = args.run / "student" / "adapter"
    if not adapter.is_dir():
        parser.error(f"--run {args.run}: no trained student there (student/adapter); run the protocol first")
    first, stop = args.tables
    split = next((name for name, (a, b) in QUINTD_SPLITS.items() if a <= first and stop <= b), None)
    if split is None:
        parser.error(f"--tables {first} {stop}: not within one split ({QUINTD_SPLITS})")
    docs = quintd_tables("human", (first, stop), QUINTD_SPLIT_DOMAINS)
    kept_label = args.kept or args.run.name
    kept = archived(KEPT, kept_label, split).get("student+probabilities")
    if args.against_kept and (kept is None or any(d.id not in kept["rows"] for d in docs)):
        parser.error(f"--against-kept: no kept {split} judgments of {kept_label} for every output of these tables")
    settings = StudySettings(student="gemma3", student_engine=args.engine, max_new_tokens=args.max_new_tokens)
    readings = {}
    with tempfile.TemporaryDirectory() as work:
        for workers in (args.workers,) if args.against_kept else (1, args.workers):
            print(f"judging {len(docs)} outputs with {workers} worker(s)", flush=True)
            readings[workers] = judge(
                replace(settings, judging_workers=workers), adapter, docs, Path(work) / f"workers{workers}.json"
            )
    if args.against_kept:  # the kept reading stands for the one process: its rows of these outputs, its time
        assert kept is not None
        readings = {1: {"wall_s": kept["wall_s"], "rows": {d.id: kept["rows"][d.id] for d in docs}}, **readings}
    one = readings[1]
    rows = []
    for workers, judged in readings.items():
        rows.append(
            {
                "workers": workers,
                "threads": cpu_threads() if workers == 1 else max(1, cpu_threads() // workers),
                "kept": workers == 1 and args.against_kept,  # this reading is the protocol's kept one, not rerun
                "wall_s": judged["wall_s"],
                "s_per_output": round(judged["wall_s"] / len(docs), 2),
                "speedup": round(one["wall_s"] / judged["wall_s"], 2),
                "against_one_process": compare(judged["rows"], one["rows"]),
                "against_kept": None if kept is None else compare(judged["rows"], kept["rows"]),
            }
        )
    merge_labelled_row(
        OUT,
        {
            "label": args.label,
            "cpu": _cpuinfo()[0],
            "run": args.run.name,
            "kept_label": kept_label,
            "engine": args.engine,
            "tables": [first, stop],
            "outputs": len(docs),
            "readings": rows,
        },
        markdown,
    )


def _gap(spread: dict[str, float | None]) -> str:
    return "–" if spread["median"] is None else f"{spread['median']:.1e} / {spread['max']:.1e}"


def _same(reading: dict[str, Any] | None) -> str:
    if reading is None:
        return "– (none kept)"
    return f"{reading['identical_replies']}/{reading['outputs']}; P(no error) {_gap(reading['p_no_error'])}"


def markdown(where: str, rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "# Judging in worker processes (`bench/judging_workers.py`)",
        "",
        f"Machine: {where}. The protocol's judge of a run's student (its engine, greedy, ≤ 512 new tokens, 1 retry, "
        "4,096-token context, probabilities) on every system's output of the tables named (wikidata, ice_hockey, "
        "owid): in one process with every core as threads, then in worker processes with the cores shared out, "
        "one run; `(kept)`: the protocol's kept reading stands for the one process (its own time, on the same host, "
        "another day). Wall time: the judging's, the judges loaded before it. Same judge: replies identical to the "
        "one-process reading's, and to the protocol's kept judgments of the run; P(no error): median / max "
        "|difference| over the identical replies.",
        "",
        "| label | CPU | run | engine | tables | outputs | workers × threads | wall s | s/output | speed-up | "
        "against one process | against the kept judgments |",
        "|---|---|---|---|---|---:|---|---:|---:|---:|---|---|",
    ]
    for row in rows:
        tables = f"{row['tables'][0]}–{row['tables'][1] - 1}"
        for r in row["readings"]:
            shape = f"{r['workers']} × {r['threads']}{' (kept)' if r.get('kept') else ''}"
            lines.append(
                f"| {row['label']} | {row['cpu']} | {row['run']} | {row['engine']} | {tables} | {row['outputs']} | "
                f"{shape} | {r['wall_s']} | {r['s_per_output']} | {r['speedup']}× | "
                f"{_same(r['against_one_process'])} | {_same(r['against_kept'])} |"
            )
    return lines


if __name__ == "__main__":
    main()
