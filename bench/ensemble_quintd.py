"""The teacher, measured: quintd-1's four LLM annotators alone and merged by vote, against the human spans.

    .venv/bin/python bench/ensemble_quintd.py               # dev split (tables 70-79): every member and merge
    .venv/bin/python bench/ensemble_quintd.py --split test  # test split (80-99), read once: members + dev's choice

The members are GPT-4 (quintd's metric), a second GPT-4 sample at temperature 1, GPT-3.5 and Llama 3
(`../shared/data/spans/quintd1/annotations/`). The merges are `spanjudge import`'s vote
(`data_gen.vote`: overlapping spans clustered, a cluster kept when K annotators mark it, its extent the
union, the majority's characters or the shortest span) over the subsets of `eval.spans.teachers.SUBSETS`, at
every K and extent. Each teacher is read as the import reads it (the same code), on the outputs of wikidata,
ice_hockey and owid, per domain and pooled: overlap and token F1, count and token Pearson r, γ (factgenie's
agreement, pygamma-agreement), the 'No Error' rate beside the humans', each with a 95 % bootstrap interval over
inputs. Dev chooses the teacher by the protocol's objective (mean of overlap F1, token F1, count r, token r,
pooled) and says whether any merge beats its best member on every column; the test split is read for the
members and dev's choice only, and chooses nothing. No model runs: the tables recompute from the data alone.
Results: bench/results/ensemble_quintd.{json,md}; the supervisor LLM's merge of the same inputs
(bench/ensemble_supervisor.py) joins the tables when its judgments are kept.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from spanjudge.data_gen.teacher import load_import_config
from spanjudge.data_gen.vote import MergeRule
from spanjudge.eval.distill.report import domain_rows, rounded
from spanjudge.eval.distill.study import IMPORT_CONFIG
from spanjudge.eval.spans.decision_fit import OBJECTIVE
from spanjudge.eval.spans.gamma import output_gammas
from spanjudge.eval.spans.quintd import QUINTD_SPLIT_DOMAINS, QUINTD_SPLITS, quintd_tables
from spanjudge.eval.spans.teachers import (
    COLUMNS,
    SUBSETS,
    Teacher,
    agreement_signal,
    beats_best_member,
    candidates,
    dev_choice,
    no_error_interval,
    output_agreement_signal,
    paired_difference,
    teacher_predictions,
    vote_name,
    with_derived,
)

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results/ensemble_quintd"
SUPERVISOR = REPO / "bench/results/ensemble_supervisor.json"  # the supervisor LLM's merged spans, when run
KEEP_ALL = MergeRule(method="vote", min_votes=1, extent="union")


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    options.add_argument("--split", choices=("dev", "test"), default="dev", help="dev chooses; test is read once")
    options.add_argument("--resamples", type=int, default=1000, help="bootstrap resamples over inputs")
    options.add_argument("--seed", type=int, default=0, help="the bootstrap's seed")
    options.add_argument("--no-gamma", dest="gamma", action="store_false", help="leave γ out (it takes minutes)")
    return options


def supervisor_teacher(split: str) -> tuple[str, dict[str, list[tuple[int, int]]]] | None:
    """The supervisor LLM's merged spans on `split`, when bench/ensemble_supervisor.py kept them."""
    if not SUPERVISOR.is_file():
        return None
    kept = json.loads(SUPERVISOR.read_text()).get("splits", {}).get(split)
    if not kept:
        return None
    return kept["name"], {k: [tuple(s) for s in v] for k, v in kept["spans"].items() if v is not None}


def measure(
    name: str, docs: list[Any], spans: dict[str, Any], split: str, args: argparse.Namespace
) -> list[dict[str, Any]]:
    """The teacher's rows per domain and pooled, each with its 'No Error' rate, objective and gap."""
    gammas = output_gammas(docs, spans) if args.gamma else None
    rows = domain_rows(name, docs, spans, None, split=split, resamples=args.resamples, seed=args.seed, gammas=gammas)
    for row in rows:
        subset = [d for d in docs if row["domain"] == "pooled" or d.input_id.split("/")[0] == row["domain"]]
        row.update(with_derived({**row, **no_error_interval(subset, spans, args.resamples, args.seed)}))
    return rows


def main() -> None:
    args = parser().parse_args()
    path = RESULTS.with_suffix(".json")
    saved = json.loads(path.read_text()) if path.is_file() else {"splits": {}}
    chosen = saved.get("choice", {}).get("teacher")
    if args.split == "test" and chosen is None:
        sys.exit("ensemble_quintd: run the dev split first; the test split is read for dev's choice only")
    rule = load_import_config(IMPORT_CONFIG).source.rule
    docs = quintd_tables("human", QUINTD_SPLITS[args.split], QUINTD_SPLIT_DOMAINS)
    teachers = [t for t in candidates() if args.split == "dev" or t.merge is None or t.name == chosen]
    rows: dict[str, list[dict[str, Any]]] = {}
    spans: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    for number, teacher in enumerate(teachers, 1):
        spans[teacher.name] = teacher_predictions(teacher, rule, docs)
        rows[teacher.name] = measure(teacher.name, docs, spans[teacher.name], args.split, args)
        print(f"[{number}/{len(teachers)} {time.monotonic() - started:.0f}s] {teacher.name}", flush=True)
    supervised = supervisor_teacher(args.split)
    if supervised is not None:
        spans[supervised[0]] = supervised[1]
        rows[supervised[0]] = measure(supervised[0], docs, supervised[1], args.split, args)
    pooled = {name: next(r for r in found if r["domain"] == "pooled") for name, found in rows.items()}
    members = {t.name: t for t in candidates() if t.merge is None}
    merges = {t.name: t.members for t in teachers if t.merge is not None}
    if supervised is not None:  # the supervisor merges all four members
        merges[supervised[0]] = tuple(members)
    verdicts = {name: beats_best_member(pooled[name], [pooled[m] for m in merged]) for name, merged in merges.items()}
    for name, merged in merges.items():  # the difference from its best member (by the objective), paired
        best = max(merged, key=lambda m: pooled[m]["objective"])
        difference = paired_difference(docs, spans[name], spans[best], args.resamples, args.seed)
        verdicts[name]["difference"] = {"member": best, **difference}
    saved["splits"][args.split] = {"rows": rows, "verdicts": verdicts, "outputs": len(docs)}
    if args.split == "dev":  # does agreement say which spans the humans mark too? (every cluster kept)
        saved["splits"]["dev"]["agreement"] = [
            agreement_signal(Teacher(vote_name(subset, 1, "union"), members, KEEP_ALL), rule, docs)
            for subset, members in SUBSETS.items()
        ]
    if args.split == "dev":
        choice = dev_choice(pooled)
        # does the chosen vote's agreement on an output say how good it is there? (data.example_weights)
        chosen_teacher = next(t for t in teachers if t.name == choice)
        if chosen_teacher.merge is not None:
            saved["splits"]["dev"]["output_agreement"] = output_agreement_signal(
                chosen_teacher, rule, docs, args.resamples, args.seed
            )
        saved["choice"] = {
            "teacher": choice,
            "objective": OBJECTIVE,
            "value": pooled[choice]["objective"],
            "best_member": dev_choice({m: pooled[m] for m in members}),
            "merges_beating_best_member_everywhere": sorted(n for n, v in verdicts.items() if v["all"]),
        }
    saved["settings"] = {"resamples": args.resamples, "seed": args.seed, "gamma": args.gamma, "subsets": SUBSETS}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(saved, indent=2, ensure_ascii=False) + "\n")
    RESULTS.with_suffix(".md").write_text(markdown(saved))
    print(RESULTS.with_suffix(".md").read_text())


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "–"
    low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
    return f"{value:.3f} [{rounded(low)}, {rounded(high)}]" if low is not None else f"{value:.3f}"


def _no_error(row: dict[str, Any]) -> str:
    if row.get("no_error_rate") is None:
        return "–"
    return f"{_cell(row, 'no_error_rate')} ({row['human_no_error_rate']:.3f})"


def _signed(found: dict[str, Any]) -> str:
    if found["difference"] is None:
        return "–"
    return f"{found['difference']:+.3f} [{found['low']:+.3f}, {found['high']:+.3f}]"


HEADER = (
    "| teacher | domain | outputs | overlap F1 | token F1 | count r | token r | γ | 'No Error' (humans) | objective |",
    "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|",
)


def _line(name: str, row: dict[str, Any]) -> str:
    cells = " | ".join(_cell(row, k) for k in ("overlap_f1", "token_f1", "count_pearson", "token_pearson"))
    gamma = "–" if row.get("gamma") is None else f"{row['gamma']:.3f}"
    return (
        f"| {name} | {row['domain']} | {row['scored']}/{row['n_outputs']} | {cells} | {gamma} | {_no_error(row)} | "
        f"{row['objective']:.3f} |"
    )


def markdown(saved: dict[str, Any]) -> str:
    choice = saved.get("choice", {})
    lines = [
        "# The teacher, measured: quintd-1's LLM annotators alone and merged by vote (`bench/ensemble_quintd.py`)",
        "",
        "Against the **human** spans of wikidata, ice_hockey and owid (all four systems); dev = tables 70–79, "
        "test = tables 80–99. Intervals: 95 % bootstrap over inputs. 'No Error': the share of outputs the teacher "
        "marks nothing in, the humans' share in brackets. Objective: the protocol's, "
        f"{OBJECTIVE} (pooled). A vote `voteK-EXTENT(SUBSET)` keeps the clusters of overlapping spans that K of the "
        "subset's annotators mark (`data_gen.vote`). Subsets: "
        + "; ".join(f"{name} = {', '.join(members)}" for name, members in SUBSETS.items())
        + ". No model runs; the teachers are read as `spanjudge import` reads them.",
        "",
    ]
    for split in ("dev", "test"):
        found = saved["splits"].get(split)
        if found is None:
            continue
        rows = found["rows"]
        members = [n for n in rows if not n.startswith(("vote", "supervisor"))]
        lines += [f"## {split} split: the members", "", *HEADER]
        lines += [_line(n, r) for n in members for r in rows[n]]
        others = [n for n in rows if n not in members]
        pooled = {n: next(r for r in rows[n] if r["domain"] == "pooled") for n in others}
        if others:
            lines += ["", f"## {split} split: the merges (pooled; per domain in the JSON)", "", *HEADER]
            lines += [_line(n, pooled[n]) for n in sorted(others, key=lambda n: -pooled[n]["objective"])]
        verdicts = found.get("verdicts", {})
        if verdicts:
            everywhere = sorted(name for name, verdict in verdicts.items() if verdict["all"])
            lines += [
                "",
                "Merges that beat the best of their own members on every column (overlap F1, token F1, count r, "
                f"token r, γ, 'No Error' gap to the humans), pooled, on {split}: "
                + (", ".join(everywhere) or "none")
                + ". Columns each merge beats its best member on:",
                "",
                "| merge | " + " | ".join(COLUMNS) + " |",
                "|---|" + "---|" * len(COLUMNS),
            ]
            for name in sorted(verdicts, key=lambda n: -pooled[n]["objective"]):
                marks = " | ".join(
                    "–" if verdicts[name][c]["beats"] is None else ("yes" if verdicts[name][c]["beats"] else "no")
                    for c in COLUMNS
                )
                lines.append(f"| {name} | {marks} |")
            lines += [
                "",
                f"The best merges minus their best member (by the objective, on {split}), pooled, with a 95 % "
                "interval over the same input resamples (paired):",
                "",
                "| merge | best member | overlap F1 | token F1 | count r | token r | objective |",
                "|---|---|---:|---:|---:|---:|---:|",
            ]
            for name in sorted(verdicts, key=lambda n: -pooled[n]["objective"])[:5]:
                difference = verdicts[name]["difference"]
                cells = " | ".join(
                    _signed(difference[c])
                    for c in ("overlap_f1", "token_f1", "count_pearson", "token_pearson", "objective")
                )
                lines.append(f"| {name} | {difference['member']} | {cells} |")
        if split == "dev" and found.get("agreement"):
            lines += [
                "",
                "**Does agreement mark what the humans mark?** Every cluster kept (K = 1); each span's votes "
                '(annotators marking it) against "overlaps a human span": the AUC of votes / members (0.5: no '
                "signal; the students' span confidence: 0.520), and per number of votes the spans and the share "
                "that overlap a human span. `place, most votes first`: the AUC of each span's place when an output's "
                "errors are written most votes first (earlier ranked higher), what a student reading its spans' "
                "confidence from its count decisions could draw from a target so ordered.",
                "",
                "| merge | spans | AUC | place, most votes first | by votes: spans (share overlapping a human span) |",
                "|---|---:|---:|---:|---|",
            ]
            for signal in found["agreement"]:
                levels = ", ".join(
                    f"{v}: {x['spans']} ({x['overlap_human']:.2f})" for v, x in signal["by_votes"].items()
                )
                cells = " | ".join(rounded(signal.get(key)) for key in ("spans", "auc", "auc_place_votes_first"))
                lines.append(f"| {signal['teacher']} | {cells} | {levels} |")
        if split == "dev" and found.get("output_agreement"):
            signal = found["output_agreement"]
            low, high = signal["interval"]
            groups = signal["f1_by_agreement"]
            lines += [
                "",
                f"**Does agreement on an output say how good the chosen teacher is there?** {signal['teacher']}: "
                "each output's agreement (the share of its span clusters every member marks; 1 where all call it "
                "clean) against the teacher's character F1 with the humans on it (1 where neither marks anything): "
                f"Spearman ρ {signal['spearman']:.3f} [{low:.2f}, {high:.2f}] over {signal['outputs']} outputs. "
                "Mean F1 where the members agree "
                + "; ".join(f"{name}: {rounded(x['mean_f1'])} ({x['outputs']} outputs)" for name, x in groups.items())
                + ". This is the signal `data.example_weights: agreement` trains on.",
            ]
        if split == "dev" and choice:
            lines += [
                "",
                f"**Dev's choice:** {choice['teacher']} (objective {choice['value']:.3f}); the best member: "
                f"{choice['best_member']}.",
            ]
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
