"""The distillation study's results: agreement rows per domain, recipes pooled over their seeds, and the
markdown report (`bench/results/distill_quintd.{json,md}`), all recomputable from the rows alone."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from spanjudge.eval.distill.calibration_table import calibration_tables
from spanjudge.eval.distill.choice import bar_checks, bar_lines, choice_lines, dev_choice, rounded, seed_stats
from spanjudge.eval.distill.study import IMPORT_CONFIG, checkout_free
from spanjudge.eval.spans.calibration import MEASURES
from spanjudge.eval.spans.decision_fit import AGREEMENT
from spanjudge.eval.spans.metrics import MATCHING
from spanjudge.inference.decisions import DecisionRule

IMPORT_CONFIG_NAME = checkout_free(IMPORT_CONFIG)  # as runs record it: from `configs/` on


def domain_rows(
    name: str,
    docs: list[Any],
    spans: dict[str, Any],
    judged: dict[str, Any] | None,
    *,
    split: str,
    resamples: int,
    seed: int,
    counts: dict[str, float] | None = None,
    gammas: dict[str, tuple[float | None, int]] | None = None,
    written: bool = True,
    readings: dict[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One agreement row per domain of `docs` and one pooled over them, for the judge `name` on `split`;
    with `gammas` (`output_gammas` of the judge), factgenie's γ agreement too. `written`: the spans are those of
    the judge's written replies (not a reading of its probabilities or of its sampled replies). `readings`
    (`judgments.readings`): the calibration of the judge's probabilities, ECE, n and AUC per measure."""
    from spanjudge.eval.spans.agreement import span_agreement
    from spanjudge.eval.spans.calibration import calibration
    from spanjudge.eval.spans.gamma import gamma_summary

    domains = list(dict.fromkeys(d.input_id.split("/")[0] for d in docs))
    rows = []
    for domain in [*domains, "pooled"] if len(domains) > 1 else domains:
        subset = [d for d in docs if domain == "pooled" or d.input_id.split("/")[0] == domain]
        agreement = span_agreement(subset, spans, n_resamples=resamples, seed=seed, counts=counts)
        row = {"judge": name, "split": split, "domain": domain, **agreement}
        if gammas is not None:
            summary = gamma_summary(gammas[d.id] for d in subset if d.id in gammas)
            row["gamma"], row["gamma_outputs"] = summary["gamma"], summary["gamma_outputs"]
        if readings is not None:
            measures = calibration(subset, readings)
            row["calibration"] = {m: {k: found[k] for k in ("ece", "n", "auc")} for m, found in measures.items()}
        row["no_error_outputs"] = sum(1 for d in subset if spans.get(d.id) == [])
        row["human_no_error_outputs"] = sum(1 for d in subset if not d.gold_spans)
        if judged is not None:
            kept = [judged["rows"][d.id] for d in subset]
            # a reply whose errors were all left unanchored has no spans but is not 'No Error'
            if written:
                row["no_error_outputs"] = sum(1 for r in kept if r["spans"] is not None and r["errors"] == 0)
            row["evaluations_per_s"] = judged["evaluations_per_s"]
            row["retries"] = sum(r["attempts"] - 1 for r in kept if r["attempts"])
            row["inputs_cut"] = sum(1 for r in kept if r.get("truncated") and r["spans"] is not None)
            row["skipped_too_long"] = sum(1 for r in kept if r["spans"] is None and r["attempts"] == 0)
        rows.append(row)
    return rows


def write_results(results: Path, rows: list[dict[str, Any]], settings: dict[str, Any]) -> None:
    """Keep this run's rows beside every other run's in `results`.json (and its report in `results`.md); a
    protocol run keeps its rows of the other split, dev's first whichever split was judged last."""
    path = results.with_suffix(".json")
    previous = json.loads(path.read_text()) if path.is_file() else {"runs": {}}
    runs = previous.get("runs", {})
    before = runs.get(settings["label"])
    if before is not None and before["settings"].get("protocol"):
        split = rows[0]["split"]
        # a stable order whatever order the splits ran in (dev again after test, on a new machine), so the record
        # reads, and recomputes from its kept judgments, the same
        rows = sorted([r for r in before["rows"] if r.get("split") != split] + rows, key=lambda r: r["split"] != "dev")
        settings["judge_wall_s"] = {**before["settings"].get("judge_wall_s", {}), **settings["judge_wall_s"]}
    runs[settings["label"]] = {"settings": settings, "rows": rows}
    default = runs.get("default", runs[settings["label"]])
    entries, choice = recipes(runs), dev_choice(runs)
    payload = {
        "rows": default["rows"],
        "settings": default["settings"],
        "recipes": entries,
        "choice": choice,
        "bar": bar_checks(entries, choice),
        "runs": runs,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(payload, indent=2, ensure_ascii=False) + "\n")
    results.with_suffix(".md").write_text(markdown(runs))


# the agreement columns the tables show: the objective's four (AGREEMENT) and MPP F1 beside the two span F1s
SHOWN = ("overlap_f1", "token_f1", "mpp_f1", "count_pearson", "token_pearson")
MATCHING_LINE = (
    "Matching rules (micro over the scored outputs): "
    + "; ".join(MATCHING[variant] for variant in ("overlap", "token", "mpp"))
    + ". MPP is shown, not part of the objective or the bar (runs recorded before it have –)."
)


# the student's rows of a run, and the recipe name's suffix each gets in the recipes list
READINGS = (
    ("student", ""),
    ("student·expected", "+expected"),
    ("student·decided", "+decided"),
    ("student·consensus", "+consensus"),
)


def recipes(runs: dict[str, Any]) -> list[dict[str, Any]]:
    """One object per (recipe and decoding, split, domain) over the protocol runs: the agreement columns' mean,
    min and max over the recipe's training seeds, with the teacher and the number baseline on the same outputs."""
    out = []
    grouped: dict[str, list[dict[str, Any]]] = {}
    for run in runs.values():
        if run["settings"].get("protocol"):
            grouped.setdefault(run["settings"]["recipe"], []).append(run)
    for recipe, members in grouped.items():
        for judge, suffix in READINGS:
            keys = {(r["split"], r["domain"]) for run in members for r in run["rows"] if r["judge"] == judge}
            for split, domain in sorted(keys, key=lambda k: (k[0] != "dev", k[1] == "pooled", k[1])):

                def find(run: dict[str, Any], name: str, split: str = split, domain: str = domain) -> Any:
                    return next(
                        (r for r in run["rows"] if (r["judge"], r["split"], r["domain"]) == (name, split, domain)), None
                    )

                found = [(run, find(run, judge)) for run in members]
                found = [(run, row) for run, row in found if row is not None]
                seeds = [run["settings"]["train_seed"] for run, _ in found]
                entry = {"recipe": recipe + suffix, "split": split, "domain": domain, "seeds": seeds}
                entry["mean"], entry["min"], entry["max"] = ({}, {}, {})
                for column in (*SHOWN, "gamma"):
                    stats = seed_stats([row.get(column) for _, row in found])
                    for what in ("mean", "min", "max"):
                        entry[what][column] = stats[what]
                calibrated = [row["calibration"] for _, row in found if row.get("calibration")]
                if calibrated and len(calibrated) == len(found):
                    entry["calibration"] = {m: seed_stats([c[m]["ece"] for c in calibrated]) for m in MEASURES}
                    # how well the span confidence ranks (rows made before it was recorded have none)
                    entry["span_confidence_auc"] = seed_stats([c["span_confidence"].get("auc") for c in calibrated])
                entry["scored"] = sum(row["scored"] for _, row in found)
                entry["asked"] = sum(row["asked"] for _, row in found)
                entry["no_error_outputs"] = seed_stats([row.get("no_error_outputs") for _, row in found])["mean"]
                entry["human_no_error_outputs"] = found[0][1].get("human_no_error_outputs")
                for reference in ("teacher", "number_baseline"):
                    row = find(found[0][0], reference)
                    entry[reference] = {c: None if row is None else row.get(c) for c in (*SHOWN, "gamma")}
                base = find(found[0][0], "base")
                entry["base"] = None if base is None else {c: base.get(c) for c in ("scored", "asked", *AGREEMENT)}
                out.append(entry)
    return out


def protocol_tables(entries: list[dict[str, Any]]) -> list[str]:
    """The protocol's tables: per split, each recipe's mean [min, max] over its seeds, per domain and pooled."""
    if not entries:
        return []
    lines = [
        "",
        "## The protocol: dev split for choices, test split for finished recipes",
        "",
        "Each recipe is trained with several seeds; cells are the mean [lowest, highest] over the seeds, against the "
        "**human** spans. Choices (recipe, decoding) are made on the **dev** split; the **test** split is judged "
        "once per finished recipe and chooses nothing. **Bold**: the mean is at least half of the teacher's value on "
        "the same outputs; count r marked ≥ when it is at or above the number-marking baseline's. `+expected`: the "
        "same judgments read with the judge's probabilities (count = expected number of errors; spans kept when "
        "the judge writes them with probability ≥ 0.5). `+decided`: the same judgments under the decision thresholds "
        "fitted on the run's dev judgments (`spanjudge.eval.spans.decision_fit`: 'No Error' when P(no error) ≥ τ₀, "
        "a span kept at confidence ≥ τ; on dev, the fit's own outputs). `+consensus`: self-consistency, the spans "
        "that at least half of N sampled replies mark (`--samples N`, temperature 0.7), on the same outputs.",
        "",
        MATCHING_LINE,
    ]
    for split in ("dev", "test"):
        chosen = [e for e in entries if e["split"] == split]
        if not chosen:
            continue
        lines += [
            "",
            f"### {split} split",
            "",
            "| recipe | domain | seeds | parsed | says 'No Error' (humans) | overlap F1 | token F1 | MPP F1 | "
            "count Pearson | token Pearson | teacher (overlap / token F1 / count r / token r) | "
            "number baseline count r | γ (teacher) |",
            "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|",
        ]
        for e in chosen:
            cells = []
            for column in SHOWN:
                mean, low, high = e["mean"][column], e["min"][column], e["max"][column]
                if mean is None:
                    cells.append("–")
                    continue
                text = f"{mean:.3f} [{low:.2f}, {high:.2f}]"
                text = _bold_if_half(text, mean, e["teacher"], column)
                baseline = e["number_baseline"]["count_pearson"]
                if column == "count_pearson" and baseline is not None and mean >= baseline:
                    text += " ≥"
                cells.append(text)
            teacher = " / ".join(rounded(e["teacher"][c]) for c in AGREEMENT)
            no_error = "–" if e["no_error_outputs"] is None else f"{e['no_error_outputs']:.0f}"
            lines.append(
                f"| {e['recipe']} | {e['domain']} | {', '.join(map(str, e['seeds']))} | {e['scored']}/{e['asked']} | "
                f"{no_error} ({e['human_no_error_outputs']}) | {' | '.join(cells)} | {teacher} | "
                f"{rounded(e['number_baseline']['count_pearson'])} | {_gamma_cell(e)} |"
            )
    return lines


def _gamma_cell(entry: dict[str, Any]) -> str:
    """γ's mean [min, max] over the seeds and the teacher's, or – where the runs did not compute it (--gamma)."""
    mean, teacher = entry["mean"].get("gamma"), entry["teacher"].get("gamma")
    if mean is None:
        return "–"
    return f"{mean:.3f} [{entry['min']['gamma']:.2f}, {entry['max']['gamma']:.2f}] ({rounded(teacher)})"


def _cell(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return "–"
    text = f"{value:.3f}"
    if row.get(f"{key}_low") is not None:
        text += f" [{row[f'{key}_low']:.2f}, {row[f'{key}_high']:.2f}]"
    return text


# What a setting was in runs made before the benchmark recorded it (None: not recorded)
UNRECORDED = {
    "student_model": "smollm2",
    "extra_domains": [],
    "import_config": IMPORT_CONFIG_NAME,
    "decision_weight": 1.0,
    "example_weights": "none",
    "train_seed": 42,
    "student_engine": "default",
    "finetuning": "lora",
}


def _setting(settings: dict[str, Any], key: str) -> Any:
    value = settings.get(key)
    return UNRECORDED.get(key) if value is None else value


def _tuned(settings: dict[str, Any]) -> str:
    """What trained: 'LoRA r 16', or 'every weight' (full fine-tuning)."""
    full = _setting(settings, "finetuning") == "full"
    return "every weight (full fine-tuning)" if full else f"LoRA r {settings['rank']}"


RECIPE = (
    "student_model", "domains", "extra_domains", "import_config", "batch", "lr", "rank", "finetuning",
    "repeat_no_error", "example_weights", "decision_weight", "max_new_tokens", "constrained", "student_engine",
)  # fmt: skip


def _change(settings: dict[str, Any], default: dict[str, Any], keys: tuple[str, ...] = (*RECIPE, "train_seed")) -> str:
    """What a run changed against the `default` run, from its settings (`keys` and the step count)."""
    changed = [f"{k} {_setting(settings, k)}" for k in keys if _setting(settings, k) != _setting(default, k)]
    steps, default_steps = settings["train"].get("steps"), default["train"].get("steps")
    if steps != default_steps:
        changed.append(f"{steps} steps (default {default_steps})")
    return ", ".join(changed) or "—"


def _reference(runs: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The settings every run is compared with (the `default` run's) and that run's teacher row."""
    default = runs.get("default", next(iter(runs.values())))["settings"]
    teacher = next((r for r in runs.get("default", {}).get("rows", []) if r["judge"] == "teacher"), None)
    return default, teacher


def _bold_if_half(text: str, value: object, teacher: dict[str, Any] | None, key: str) -> str:
    """`text` in bold when `value` is at least half of the teacher's `key`."""
    half = None if teacher is None or teacher.get(key) is None else teacher[key] / 2
    return f"**{text}**" if value is not None and half is not None and value >= half else text


def experiments_table(runs: dict[str, Any]) -> list[str]:
    """One line per run and judge that learned (student rows), beside half of the teacher's value."""
    default, teacher = _reference(runs)
    lines = [
        "",
        "## Experiments",
        "",
        "Student rows of every run (details in each run's section below); **bold**: at least half of the "
        "teacher's value on the same held-out outputs.",
        "",
        "| run | changed | judge | parse rate | says 'No Error' | overlap F1 | token F1 | count Pearson | "
        "token Pearson | evals/s |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for label, run in runs.items():
        for row in run["rows"]:
            if not row["judge"].startswith("student"):
                continue
            cells = [_bold_if_half(_cell(row, key), row.get(key), teacher, key) for key in AGREEMENT]
            lines.append(
                f"| `{label}` | {_change(run['settings'], default)} | {row['judge']} | "
                f"{row['scored']}/{row['asked']} | {row.get('no_error_outputs', '–')} | {' | '.join(cells)} | "
                f"{row.get('evaluations_per_s', '–')} |"
            )
    if teacher is not None:
        halves = " | ".join("–" if teacher.get(k) is None else f"{teacher[k] / 2:.3f}" for k in AGREEMENT)
        human = default.get("human_no_error_outputs", "–")
        lines.append(f"| half of the teacher | | | | {human} (humans) | {halves} | |")
    return lines


def seeds_table(runs: dict[str, Any]) -> list[str]:
    """Recipes trained with more than one seed: the mean of each agreement column over the seeds, with its range.

    One seed is one draw: the same recipe with another training seed moved count r from 0.03 to 0.31 and the
    'No Error' replies from 0 to 50 of 80, so recipes are compared by their mean over seeds."""
    default, teacher = _reference(runs)
    recipes: dict[str, list[tuple[Any, dict[str, Any]]]] = {}
    for run in runs.values():
        student = next((r for r in run["rows"] if r["judge"] == "student"), None)
        if student is not None:
            recipe = _change(run["settings"], default, RECIPE)
            recipes.setdefault(recipe, []).append((_setting(run["settings"], "train_seed"), student))
    rows = []
    for recipe, draws in recipes.items():
        if len(draws) < 2:
            continue
        cells = []
        for key in ("no_error_outputs", *AGREEMENT):
            found = [row.get(key) for _, row in draws]
            values = [v for v in found if v is not None]
            if len(values) < len(found):
                cells.append("–")
                continue
            mean = sum(values) / len(values)
            if key == "no_error_outputs":
                cells.append(f"{mean:.0f} [{min(values)}, {max(values)}]")
            else:
                cells.append(_bold_if_half(f"{mean:.3f} [{min(values):.3f}, {max(values):.3f}]", mean, teacher, key))
        seeds = ", ".join(str(seed) for seed, _ in draws)
        rows.append(f"| {'default' if recipe == '—' else recipe} | {seeds} | {' | '.join(cells)} |")
    if not rows:
        return []
    return [
        "",
        "## Recipes over training seeds",
        "",
        "Mean over the seeds [lowest, highest]; **bold**: the mean is at least half of the teacher's value.",
        "",
        "| recipe | seeds | says 'No Error' | overlap F1 | token F1 | count Pearson | token Pearson |",
        "|---|---|---:|---:|---:|---:|---:|",
        *rows,
    ]


def _walls_and_note(s: dict[str, Any]) -> str:
    """The end of a run's description: each judge's wall time, then the run's note."""
    walls = ", ".join(f"{k} {v} s" for k, v in s.get("judge_wall_s", {}).items())
    return f"; wall {walls}." + (f" {s['note']}" if s.get("note") else "")


def protocol_run_section(label: str, s: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """One protocol run: what it trained on and how, and every judge's row per split and domain."""
    t = s["train"]
    source = {"gpt-4": "GPT-4", "config": f"{s.get('import_config')}'s teacher"}.get(
        s["train_source"], s["train_source"]
    )
    lines = [
        "",
        f"## Run `{label}` (recipe `{s['recipe']}`, training seed {s['train_seed']})",
        "",
        f"{s['machine']}. Train: {source} spans on {s['train_outputs']} outputs of {', '.join(s['domains'])} tables "
        f"{s['train_tables'][0]}–{s['train_tables'][1] - 1}; dev tables {s['dev_tables'][0]}–{s['dev_tables'][1] - 1}"
        f", test tables {s['test_tables'][0]}–{s['test_tables'][1] - 1} of {', '.join(s['eval_domains'])} (all 4 "
        f"systems). {t.get('steps')} steps × batch {s['batch']}, lr {s['lr']}, {_tuned(s)}, "
        f"{t.get('wall_s')} s wall, train loss {rounded(t.get('train_loss'))}, eval loss {rounded(t.get('eval_loss'))}."
        f" Student: {s['student']}; judging greedy, ≤ {s['max_new_tokens']} new tokens, {s['retries']} sampled retry, "
        "context 4096 tokens (inputs cut to fit, longest first)"
        + ("; the judge's probabilities read along each reply" if s.get("probabilities") else "")
        + _walls_and_note(s),
        *_decisions_line(s.get("decisions")),
        "",
        "| split | domain | judge | parsed | says 'No Error' (humans) | overlap F1 | token F1 | MPP F1 | "
        "count Pearson | token Pearson | γ | evals/s | inputs cut / skipped |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        cut = f"{row['inputs_cut']} / {row['skipped_too_long']}" if "inputs_cut" in row else "–"
        lines.append(
            f"| {row['split']} | {row['domain']} | {row['judge']} | {row['scored']}/{row['asked']} | "
            f"{row['no_error_outputs']} ({row['human_no_error_outputs']}) | "
            + " | ".join(_cell(row, key) for key in (*SHOWN, "gamma"))
            + f" | {row.get('evaluations_per_s', '–')} | {cut} |"
        )
    return lines


def _decisions_line(recorded: dict[str, Any] | None) -> list[str]:
    """What the run's decision thresholds are and what chose them (`student·decided` rows)."""
    if recorded is None:
        return []
    rule = DecisionRule.model_validate({k: v for k, v in recorded.items() if k != "stored_in"})
    fit = rule.fitted_on
    assert fit is not None and fit.value is not None and fit.written_value is not None
    return [
        "",
        f"Decisions (`student·decided`): {rule.describe()}; objective {fit.value:.3f} against {fit.written_value:.3f} "
        f"for the written replies ({fit.objective}). On dev these rows are the fit's own outputs; on test they are "
        "held out.",
    ]


def markdown(runs: dict[str, Any]) -> str:
    entries, choice = recipes(runs), dev_choice(runs)
    lines = [
        "# Distillation on a CPU: quintd-1, GPT-4 teacher → a small student (`bench/distill_quintd.py`)",
        "",
        "Held-out inputs, scored against the **human** spans. Intervals: 95 % bootstrap over inputs. "
        "Parse rate = scored / asked; the span and agreement columns are over the scored outputs "
        "(– where undefined: nothing scored, or constant counts).",
        *protocol_tables(entries),
        *calibration_tables(entries),
        *choice_lines(choice),
        *bar_lines(bar_checks(entries, choice), choice),
    ]
    legacy = {label: run for label, run in runs.items() if not run["settings"].get("protocol")}
    if legacy:
        lines += [
            "",
            "## Before the protocol (an experiment log: recipes chosen and reported on the same test tables 80–99)",
            *experiments_table(legacy),
            *seeds_table(legacy),
        ]
    for label, run in runs.items():
        s = run["settings"]
        t = s["train"]
        if s.get("protocol"):
            lines += protocol_run_section(label, s, run["rows"])
            continue
        rate = t.get("tokens_per_second")
        epochs = t.get("steps", 0) * s["batch"] / max(1, t.get("examples_per_epoch", s["train_outputs"]))
        lines += [
            "",
            f"## Run `{label}`",
            "",
            f"{s['machine']}. Train: GPT-4 spans on {s['train_outputs']} outputs of {', '.join(s['domains'])} tables "
            f"{s['train_tables'][0]}–{s['train_tables'][1] - 1}"
            + (
                f" (of which {s['extra_train']} from {', '.join(s['extra_domains'])} tables {s['extra_tables'][0]}–"
                f"{s['extra_tables'][1] - 1})"
                if s.get("extra_domains")
                else ""
            )
            + f"; rule {s.get('import_config', IMPORT_CONFIG_NAME)}; held out: tables "
            f"{s['test_tables'][0]}–{s['test_tables'][1] - 1} ({s['n_outputs']} outputs, all 4 systems, no input "
            "shared). Training: "
            f"{t.get('steps')} steps × batch {s['batch']} (~{epochs:.1f} epochs), lr {s['lr']}, {_tuned(s)}"
            + (f", 'No Error' records ×{s['repeat_no_error']}" if s.get("repeat_no_error", 1) > 1 else "")
            + (f", decision token ×{s['decision_weight']:g}" if s.get("decision_weight", 1.0) != 1.0 else "")
            + (", examples weighted by annotator agreement" if s.get("example_weights") == "agreement" else "")
            + f", training seed {_setting(s, 'train_seed')}"
            + f", "
            f"{t.get('wall_s')} s wall, {rate} tokens/s, train loss "
            f"{rounded(t.get('train_loss'))}, eval loss {rounded(t.get('eval_loss'))}. Student: {s['student']}; "
            f"judging greedy, ≤ {s['max_new_tokens']} new tokens, {s['retries']} sampled retry"
            + ("; replies held to the output contract's grammar" if s.get("constrained") else "")
            + _walls_and_note(s),
            "",
            "| judge | parse rate | overlap P / R / F1 | token P / R / F1 | MPP P / R / F1 | count Pearson | "
            "token Pearson | evals/s | retries |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
        for row in run["rows"]:
            lines.append(
                f"| {row['judge']} | {row['scored']}/{row['n_outputs']} | "
                f"{_cell(row, 'overlap_precision')} / {_cell(row, 'overlap_recall')} / {_cell(row, 'overlap_f1')} | "
                f"{_cell(row, 'token_precision')} / {_cell(row, 'token_recall')} / {_cell(row, 'token_f1')} | "
                f"{_cell(row, 'mpp_precision')} / {_cell(row, 'mpp_recall')} / {_cell(row, 'mpp_f1')} | "
                f"{_cell(row, 'count_pearson')} | {_cell(row, 'token_pearson')} | "
                f"{row.get('evaluations_per_s', '–')} | {row.get('retries', '–')} |"
            )
    return "\n".join(lines) + "\n"
