"""The active-learning loop on quintd-1 (issue #50): select what the judge is least sure of, have people annotate
it, train on it, and compare with as many outputs chosen at random (`spanjudge.eval.distill.active`).

    .venv/bin/python bench/active_loop.py [--start smollm2-mixed-cut-s42] [--n 24] [--seeds 1 2 3] [--note TEXT]

It needs the start's protocol run in --protocol-work (bench/distill_protocol.sh LABEL makes it) and its dev
judgments kept in bench/results/distill_judgments/. Killing it and running it again resumes where it stopped.
Results: bench/results/active_loop.{json,md} (written after every arm), each arm's dev judgments in
bench/results/active_loop_judgments/; --from-judgments rewrites the report from those alone, without a model.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import MISSING, asdict, fields
from pathlib import Path

from spanjudge.core.errors import SpanjudgeError
from spanjudge.eval.distill.active import (
    Loop,
    LoopSettings,
    arm_difference,
    arm_label,
    pooled,
    start_rows,
    start_settings,
    summary,
    write,
)
from spanjudge.eval.distill.judgments import archived

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results"
KEPT = RESULTS / "active_loop_judgments"
PROTOCOL_KEPT = RESULTS / "distill_judgments"


def parse() -> tuple[LoopSettings, bool]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    for field in fields(LoopSettings):
        default = field.default if field.default is not MISSING else None
        flag = "--" + field.name.replace("_", "-")
        if isinstance(default, tuple):
            kind = type(default[0])
            parser.add_argument(flag, type=kind, nargs="+", default=list(default), help=f"default: {list(default)}")
        else:
            parser.add_argument(flag, type=type(default), default=default, help=f"default: {default}")
    parser.add_argument("--from-judgments", action="store_true", help="no model: the report from the kept judgments")
    args = vars(parser.parse_args())
    from_judgments = args.pop("from_judgments")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in args.items()}
    return LoopSettings(**values), from_judgments


def say(message: str) -> None:
    print(f"[active_loop {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def main() -> None:
    settings, from_judgments = parse()
    runs = json.loads((RESULTS / "distill_quintd.json").read_text())["runs"]
    if settings.start not in runs:
        sys.exit(f"active_loop: no protocol run {settings.start!r} in bench/results/distill_quintd.json")
    start = start_settings(runs[settings.start]["settings"], settings.start)
    loop = Loop(settings, start, KEPT, say)
    before = json.loads((RESULTS / "active_loop.json").read_text()) if (RESULTS / "active_loop.json").is_file() else {}
    done = {entry["label"]: entry for entry in before.get("arms", [])}
    docs, first = start_rows(loop, PROTOCOL_KEPT)
    pool: tuple[Path, int] | None = None
    entries, judged = [], {}
    for seed in settings.seeds:  # one seed of every arm before the next seed: a first comparison comes early
        for arm in settings.arms:
            label = arm_label(arm, seed)
            payload = archived(KEPT, label, "dev").get("student")
            if label in done and payload is not None:  # judged before: its kept judgments make its rows
                entry = done[label]
            elif from_judgments:
                continue
            else:
                if pool is None:
                    loop.check()
                    pool = loop.pool()
                entry = loop.arm(arm, seed, pool[0])
                payload = loop.judge_dev(label)[1]["student"]
            rows = loop.rows(label, docs, payload)
            entries.append({**entry, "dev": pooled(rows), "judge_wall_s": payload["wall_s"], "rows": rows})
            judged.setdefault(arm, []).append(payload)
            paired = None
            if {"confidence", "random"} <= judged.keys():
                paired = arm_difference(docs, judged, resamples=settings.resamples, seed=start.seed)
            pool_outputs = pool[1] if pool else before["settings"]["pool_outputs"]
            recorded = {
                **asdict(settings),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores, no GPU",
                "pool_outputs": pool_outputs,
                "domains": start.domains,
                "dev_tables": list(start.dev_tables),
            }
            recorded = {k: str(v) if isinstance(v, Path) else v for k, v in recorded.items()}
            results = {"settings": recorded, "start_rows": first, "arms": entries,
                       "summary": summary(pooled(first), entries, paired)}  # fmt: skip
            write(RESULTS, results)
            say(f"{label}: dev {entries[-1]['dev']}; results: {RESULTS / 'active_loop.md'}")


if __name__ == "__main__":
    try:
        main()
    except SpanjudgeError as exc:
        sys.exit(f"active_loop: {exc}")
