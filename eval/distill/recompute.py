"""A run's rows from its kept judgments, without a model: the decisions fitted on its dev judgments, the
calibration of its probabilities with their reliability diagrams, and every table of the report
(`spanjudge distill` after judging, and `--recompute` for the runs already in the results)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spanjudge.core.errors import InputError
from spanjudge.eval.distill.judgments import STUDENT_READ, archive, archived, dev_rule, readings, rule_for_split
from spanjudge.eval.distill.phases import Say, held_out_documents, result_rows
from spanjudge.eval.distill.report import write_results
from spanjudge.eval.distill.study import StudySettings, judging_key
from spanjudge.eval.spans.calibration import calibration, reliability_png
from spanjudge.inference.decisions import DecisionRule

FIELDS = ("recipe", "domains", "eval_domains", "max_new_tokens", "retries", "resamples", "train_seed", "student_engine")


def decisions(args: StudySettings, docs: list[Any], kept: Path, judged: dict[str, Any]) -> DecisionRule | None:
    """The student's decision thresholds for the run's split: fitted on its dev judgments (those just made, on
    dev; the kept ones, on test), refused for inputs they were fitted on."""
    dev_docs, _ = held_out_documents(args, "dev")
    dev = judged if args.split == "dev" else archived(kept, args.label, "dev")
    first, stop = args.dev_tables
    data = f"quintd-1 dev tables {first}-{stop - 1} of {', '.join(args.eval_domains)}"
    rule = dev_rule(dev_docs, dev.get(STUDENT_READ), data)
    rule_for_split(rule, docs, args.split, args.label)
    return rule


def recorded(rule: DecisionRule | None) -> dict[str, Any] | None:
    """The rule as the results record it: its values and what chose them, without the inputs' digests."""
    return None if rule is None else rule.model_dump(mode="json", exclude={"fitted_on": {"sha1"}})


def diagram(args: StudySettings, docs: list[Any], judged: dict[str, Any], folder: Path) -> Path | None:
    """The reliability diagram of the student's probabilities on the run's split, pooled over its domains."""
    payload = judged.get(STUDENT_READ)
    if payload is None:
        return None
    measures = calibration(docs, readings(payload))
    title = f"{args.label}: student on the {args.split} split ({len(docs)} outputs)"
    return reliability_png(folder / f"{args.label}-{args.split}.png", measures, title)


def rows_and_decisions(
    args: StudySettings, docs: list[Any], judged: dict[str, Any], teacher: dict[str, Any], kept: Path, say: Say
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    rule = decisions(args, docs, kept, judged)
    if rule is not None:
        say(f"decisions fitted on dev: {rule.describe()}")
    return result_rows(docs, judged, teacher, args, say, rule), recorded(rule)


def _kept_in_work(work: Path, args: StudySettings, kept: Path) -> dict[str, Any]:
    """A run's judgments of its split found in its work folder (made before they were kept with the results),
    kept now; empty when the work folder has none."""
    key = judging_key(args.eval_domains, args.dev_tables if args.split == "dev" else args.test_tables,
                      args.max_new_tokens, args.retries)  # fmt: skip
    found = {}
    for path in sorted((work / "judgments").glob(f"*_{key}.json")):
        name = path.name.split("_")[0]
        found[name] = json.loads(path.read_text(encoding="utf-8"))
        archive(kept, args.label, args.split, name, found[name])
    return found


def from_judgments(results: Path, kept: Path, works: Path, labels: list[str], say: Say) -> list[str]:
    """Recompute the rows of the protocol runs `labels` (default: every one) from their kept judgments, every
    split they have; the labels recomputed. Gamma is recomputed for runs whose rows have it (about 0.3 s an
    output and judge)."""
    if not results.with_suffix(".json").is_file():
        raise InputError(f"{results.with_suffix('.json')}: no results to recompute (run the study first)")
    runs = json.loads(results.with_suffix(".json").read_text())["runs"]
    done = []
    for label in labels or [label for label, run in runs.items() if run["settings"].get("protocol")]:
        if label not in runs:
            raise InputError(f"no run {label!r} in {results.with_suffix('.json')}")
        run = runs[label]
        settings = run["settings"]
        values = {field: settings[field] for field in FIELDS if field in settings}
        values["student"] = settings.get("student_model", "smollm2")  # unrecorded: SmolLM2, the default then
        for split in sorted({row["split"] for row in run["rows"]}, key=lambda split: split != "dev"):
            gamma = any("gamma" in row for row in run["rows"] if row["split"] == split)
            args = StudySettings(label=label, split=split, gamma=gamma, dev_tables=tuple(settings["dev_tables"]),
                                 test_tables=tuple(settings["test_tables"]), **values)  # fmt: skip
            judged = archived(kept, label, split) or _kept_in_work(works / label, args, kept)
            if not judged:
                say(f"{label} ({split}): no judgments kept; its rows stay as they are")
                continue
            docs, teacher = held_out_documents(args)
            rows, rule = rows_and_decisions(args, docs, judged, teacher, kept, say)
            diagram(args, docs, judged, results.parent / "distill_calibration")
            write_results(results, rows, {**settings, "decisions": rule, "judge_wall_s": {}})
            runs = json.loads(results.with_suffix(".json").read_text())["runs"]
            done.append(f"{label} ({split})")
    return done
