"""Does distillation work? GPT-4's quintd-1 error spans teach a small student on a 2-core CPU.

    .venv/bin/python bench/distill_quintd.py --label NAME [--recipe R] [--train-seed N] [--split test] [...]

The study's phases are the stage API `spanjudge.eval.distill` (this script parses and drives them):
1. **import** GPT-4's spans on the training tables (default 0-24 of wikidata, ice_hockey and owid) as
   training records (configs/import/quintd1_gpt4_wikidata.yaml; no model call);
2. **train** a LoRA on the student (Gemma 3 270M, which the protocol chose on dev; SmolLM2-135M-Instruct with
   `--student smollm2`) with `spanjudge train`: one epoch, lr 5e-4, LoRA r 16, long inputs cut as judging cuts them;
3. **judge** the held-out outputs (greedy, one sampled retry, the judge's probabilities read along each
   reply, `--samples N` for self-consistency; SmolLM2 served by llama.cpp with its GGUF LoRA, Gemma on
   transformers; on the test split the untrained base too, held to the contract's grammar);
4. **compare** with the **human** spans, beside the teacher and the mark-every-number baseline on the same
   outputs: parse rate, overlap and token P/R/F1, and quintd-1's agreement (Pearson r of per-output error
   counts and per-token labels), 95 % bootstrap intervals over inputs, per domain and pooled.

The protocol: every choice is made on the dev split (default tables 70-79); the test split
(80-99) is judged once per seed of a finished recipe (`--split test`) and chooses nothing. Seeds
of one recipe (`--recipe`, one `--label` and `--train-seed` each) are reported as mean [lowest,
highest]. bench/distill_protocol.sh runs the protocol's runs in order. Every phase keeps its result in
--work, so a killed run resumes where it stopped, and a finished phase is reused only for the same settings
(another setting under the same --label stops with a message). Results: bench/results/distill_quintd.{json,md}
(a row per judge and run; each recipe's seeds pooled), each judge's judgments in distill_judgments/ (all tables
recompute from them: --from-judgments), the student's decisions fitted on dev, reliability diagrams.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import MISSING, fields
from pathlib import Path

from spanjudge.eval.distill.phases import another_student, import_teacher, judge_held_out, run_settings, train_student
from spanjudge.eval.distill.recompute import diagram, from_judgments, rows_and_decisions
from spanjudge.eval.distill.report import write_results
from spanjudge.eval.distill.study import STUDENTS, StudySettings, leak, recipe_conflict, recipe_settings

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results/distill_quintd"
KEPT = REPO / "bench/results/distill_judgments"  # every run's judgments, compressed (eval.distill.judgments)


def parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--label", help="name of this run's rows in the results (one seed of a recipe)")
    parser.add_argument(
        "--from-judgments",
        nargs="*",
        metavar="LABEL",
        help="no model: recompute the rows of these protocol runs (default: all) from their kept judgments "
        "(bench/results/distill_judgments/), with the decisions fitted on each run's dev judgments",
    )
    parser.add_argument(
        "--recipe", help="the recipe this run is one training seed of (default: the label); its seeds' mean is reported"
    )
    parser.add_argument("--work", type=Path, help="working folder (default runs/bench/distill_quintd/LABEL)")
    parser.add_argument("--domains", nargs="+", help="training domains (default: %(default)s)")
    parser.add_argument(
        "--train-source",
        choices=("gpt-4", "human", "config"),
        help="whose quintd-1 spans train the student: GPT-4's, the humans' (the reference row), or the teacher "
        "--import-config names (e.g. configs/import/quintd1_vote_gpt4_twice.yaml: a vote of two annotators)",
    )
    parser.add_argument(
        "--train-tables",
        type=int,
        nargs=2,
        metavar=("FIRST", "STOP"),
        help="training tables of each domain (default: 0 25; 0 70 is the same size for one domain)",
    )
    parser.add_argument("--dev-tables", type=int, nargs=2, metavar=("FIRST", "STOP"), help="the split for choices")
    parser.add_argument(
        "--split",
        choices=("dev", "test"),
        help="which held-out split this run judges: dev (for choices) or test (once, for a finished recipe)",
    )
    parser.add_argument("--eval-domains", nargs="+", help="the held-out tables' domains (default: %(default)s)")
    parser.add_argument("--extra-domains", nargs="*", help="more training data: GPT-4's spans on these domains too")
    parser.add_argument("--extra-tables", type=int, nargs=2, metavar=("FIRST", "STOP"))
    parser.add_argument("--import-config", type=Path, help="the import rule (default: %(default)s)")
    parser.add_argument("--test-tables", type=int, nargs=2, metavar=("FIRST", "STOP"), help="the reported split")
    parser.add_argument("--student", choices=sorted(STUDENTS), help="the student model (default: %(default)s)")
    parser.add_argument("--epochs", type=float)
    parser.add_argument("--steps", type=int, help="optimizer steps (default: --epochs over the training records)")
    parser.add_argument("--batch", type=int, help="effective batch size")
    parser.add_argument(
        "--device-batch",
        type=int,
        help="examples per forward pass (memory; gradient accumulation keeps --batch; default: the student's, "
        "4 for SmolLM2 and 1 for Gemma 3)",
    )
    parser.add_argument("--lr", type=float)
    parser.add_argument("--rank", type=int, help="LoRA rank (alpha = 2 × rank)")
    parser.add_argument(
        "--repeat-no-error", type=int, help="train on 'No Error' records N times (data.repeat_no_error)"
    )
    weights = (
        "data.example_weights: agreement weighs each example by its vote teacher's agreement (--train-source config)"
    )
    parser.add_argument("--example-weights", choices=("none", "agreement"), help=weights)
    parser.add_argument(
        "--decision-weight",
        type=float,
        help="count each example's first completion token ('No Error' or 'Error 1:') this many times in the loss "
        "(training.decision_weight)",
    )
    parser.add_argument(
        "--too-long",
        choices=("cut", "skip"),
        help="a training record longer than 2048 tokens: cut its input as judging does (the default), or skip it "
        "(the runs before the default was cut)",
    )
    parser.add_argument("--train-seed", type=int, help="training.seed: another draw of the same recipe (default: 42)")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--retries", type=int)
    parser.add_argument(
        "--constrained",
        action="store_true",
        help="hold replies to the output contract's grammar (GBNF on llama.cpp, xgrammar on transformers)",
    )
    parser.add_argument(
        "--probabilities",
        action=argparse.BooleanOptionalAction,
        help="read the student's probabilities along its replies: the `+expected` rows (default: on)",
    )
    parser.add_argument(
        "--samples",
        type=int,
        metavar="N",
        help="also judge the student with self-consistency: N sampled replies per output merged (the `+consensus` "
        "rows; a judging option, not part of the recipe, so it can be added to a finished run)",
    )
    parser.add_argument("--resamples", type=int)
    parser.add_argument(
        "--gamma",
        action="store_true",
        help="also factgenie's γ agreement per row (pygamma-agreement; about 0.3 s an output and judge)",
    )
    parser.add_argument("--seed", type=int)
    parser.add_argument("--note", help="a remark printed with the run (e.g. what else shared the machine)")
    # the defaults are the study's own (StudySettings), declared there once
    parser.set_defaults(**{f.name: f.default if f.default_factory is MISSING else f.default_factory()
                           for f in fields(StudySettings) if f.name != "label"})  # fmt: skip
    return parser


def settings(args: argparse.Namespace) -> StudySettings:
    """The parsed options as the study's settings (tables as pairs)."""
    values = vars(args)
    return StudySettings(**{f.name: tuple(values[f.name]) if f.name.endswith("_tables") else values[f.name]
                            for f in fields(StudySettings)})  # fmt: skip


def main() -> None:
    options = parser()
    args = options.parse_args()
    if args.from_judgments is not None:
        done = from_judgments(RESULTS, KEPT, REPO / "runs/bench/distill_quintd", args.from_judgments, print)
        return print(f"recomputed: {', '.join(done) or 'nothing'}; {RESULTS.with_suffix('.md')}")
    if args.label is None:
        options.error("--label is required (or --from-judgments)")
    if args.samples < 0:  # before hours of import and training, not when the judge is made
        options.error(f"--samples is 0 (no self-consistency rows) or more, not {args.samples}")
    if args.device_batch is not None and args.device_batch < 1:
        options.error(f"--device-batch is at least 1 example a forward pass, not {args.device_batch}")
    s = settings(args)
    previous = RESULTS.with_suffix(".json")
    runs = json.loads(previous.read_text()).get("runs", {}) if previous.is_file() else {}
    problem = leak(s) or recipe_conflict(s.recipe or s.label, s.label, recipe_settings(s), runs)
    if problem:
        sys.exit(problem)
    os.chdir(REPO)  # the commands run in the checkout, as its relative paths expect
    work = (s.work or REPO / "runs" / "bench" / "distill_quintd" / s.label).resolve()
    work.mkdir(parents=True, exist_ok=True)

    def say(message: str) -> None:
        print(f"[distill_quintd {time.strftime('%H:%M:%S')}] {message}", flush=True)

    imported = import_teacher(work, s)
    say(f"teacher records: {imported['train']} train / {imported['validation']} validation")
    train = train_student(work, s)
    changed = another_student(s.label, train, s.split, runs)
    if changed and s.split == "test":  # its thresholds were fitted on another student's dev judgments
        sys.exit(changed)
    say(f"student trained: {train}" + (f"; {changed}" if changed else ""))
    docs, judged, teacher = judge_held_out(work, s, say, keep=KEPT)
    rows, rule = rows_and_decisions(s, docs, judged, teacher, KEPT, say)
    diagram(s, docs, judged, RESULTS.parent / "distill_calibration")
    write_results(RESULTS, rows, {**run_settings(s, imported, train, judged), "decisions": rule})
    say(f"results: {RESULTS.with_suffix('.md')}")
    print(RESULTS.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
