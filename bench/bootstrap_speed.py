"""Bootstrap speed: 1,000 input resamples for every set x aspect of the thesis suite and all
three coefficients (Pearson, Spearman, Kendall tau-b), on the real human scores.

    .venv/bin/python bench/bootstrap_speed.py [--resamples 1000] [--seed 0]

The judge is a stand-in with realistic ties: the human score plus noise, binned to the
judge's 0-100 grid in steps of 5. Each cell is timed at the suite's level for that set and,
separately, at all three levels (global / input / item). Results:
bench/results/bootstrap_speed.{json,md}. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

from spanjudge.core.paths import data_dir
from spanjudge.eval.correlation.bootstrap import input_weights
from spanjudge.eval.correlation.coefficients import COEFFICIENTS, LEVELS, Groups, level_values
from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite
from spanjudge.eval.judging.suite import load_suite

REPO = Path(__file__).resolve().parents[1]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    suite = load_suite(SUITE)
    data = open_suite(suite, SUITE, data_dir())
    rng = np.random.default_rng(args.seed)
    rows = []
    for spec in suite.datasets:
        dataset = load_suite_dataset(data, spec.name)
        groups = Groups.from_labels([i.input_id for i in dataset.items], [i.system for i in dataset.items])
        started = time.perf_counter()
        weights = input_weights(groups.n_inputs, args.resamples, args.seed)
        draw_s = time.perf_counter() - started
        for aspect in spec.aspects:
            human = np.array([i.human[aspect.name] for i in dataset.items])
            scaled = (human - human.min()) / max(np.ptp(human), 1e-9) * 100
            judge = np.clip(np.round((scaled + rng.normal(scale=25, size=human.size)) / 5) * 5, 0, 100)
            for level in LEVELS:
                for coefficient in COEFFICIENTS:
                    started = time.perf_counter()
                    values = level_values(judge, human, groups, level, coefficient, weights).values
                    seconds = time.perf_counter() - started
                    rows.append(
                        {
                            "dataset": spec.name,
                            "aspect": aspect.name,
                            "level": level,
                            "suite_level": level == spec.level,
                            "coefficient": coefficient,
                            "items": len(dataset.items),
                            "inputs": groups.n_inputs,
                            "seconds": seconds,
                            "weights_seconds": draw_s,
                            "defined_resamples": int(np.sum(~np.isnan(values))),
                        }
                    )
    suite_rows = [r for r in rows if r["suite_level"]]
    totals = {
        "suite_levels_seconds": sum(r["seconds"] for r in suite_rows),
        "all_levels_seconds": sum(r["seconds"] for r in rows),
        "cells_suite_levels": len(suite_rows),
        "cells_all_levels": len(rows),
    }
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "numpy": np.__version__}
    out = REPO / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    payload = {"resamples": args.resamples, "seed": args.seed, "machine": machine, "totals": totals, "rows": rows}
    (out / "bootstrap_speed.json").write_text(json.dumps(payload, indent=2) + "\n")
    lines = [
        "# Bootstrap speed",
        "",
        f"{args.resamples} input resamples per cell; machine: {machine['platform']}, {machine['cpus']} CPUs, "
        f"numpy {machine['numpy']}. Produced by `bench/bootstrap_speed.py`.",
        "",
        f"- All 8 sets x their aspects x 3 coefficients at each set's suite level: "
        f"**{totals['suite_levels_seconds']:.2f} s** ({totals['cells_suite_levels']} cells)",
        f"- The same at all three levels (global, input, item): **{totals['all_levels_seconds']:.2f} s** "
        f"({totals['cells_all_levels']} cells)",
        "",
        "| Set | Items | Inputs | Level | Pearson s | Spearman s | Kendall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for spec in suite.datasets:
        for level in LEVELS:
            cell = [r for r in rows if r["dataset"] == spec.name and r["level"] == level]
            per = {c: sum(r["seconds"] for r in cell if r["coefficient"] == c) for c in COEFFICIENTS}
            mark = " (suite)" if level == spec.level else ""
            lines.append(
                f"| {spec.name} | {cell[0]['items']} | {cell[0]['inputs']} | {level}{mark} | "
                + " | ".join(f"{per[c]:.3f}" for c in COEFFICIENTS)
                + " |"
            )
    lines.append("")
    lines.append("Seconds are summed over the set's aspects.")
    (out / "bootstrap_speed.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines[4:7]))


if __name__ == "__main__":
    main()
