"""Does a student know which of its spans are right? A linear probe on its own hidden states (issue #67, "a
confidence that ranks"). Dev judgments only; the test split is never read.

The students' span confidence ranks their spans no better against their own teacher (GPT-4) than against the
humans (AUC 0.46-0.61 on dev), while the teacher's agreement ranks them at 0.70-0.79 against the humans
(`bench/span_confidence_bounds.py`). So the confidence the reply spells out does not hold what the student
knows, if it knows anything. This reads what its states hold: each kept dev reply of a protocol run is read
again by its own student (teacher-forced, the prompt built as the protocol's judge builds it), and each written
span gets the hidden states of every layer at two places, the mean over its location's tokens and the last
token of its error block (after its explanation and severity). A logistic regression on one layer's states,
fitted on one fold of the dev tables (even or odd) and read on the other, gives each span a probe confidence;
its AUC against "overlaps a human span" is read over both folds' held-out predictions. Two labels are fitted:
the humans' spans (a calibration fitted on dev, as issue #67 allows) and the teacher's (no human label used at
all). The cells read as the answer were set before any state was read: the block's last token at layer 9 of
Gemma 3 270M's 18 (the middle, where probes of a model's own correctness usually read best), fitted to either
label; the other layers and places are a map, read after, and no choice. Each reply's first location token's
log-probability is read again and compared with the kept reading's: the same student, prompt and reply, or the
run stops.

    .venv/bin/python bench/span_confidence_probe.py extract --label gemma3-mixed-cut-t50-drafted-512tok-stop-s1 \\
        --run runs/bench/distill_quintd/gemma3-mixed-cut-t50-drafted-s1    # states → runs/bench/span_probe/
    .venv/bin/python bench/span_confidence_probe.py report   # → bench/results/span_confidence_probe.{json,md}
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import minimize

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402
from span_confidence_bounds import overlaps  # noqa: E402

from spanjudge.core.digests import file_sha256  # noqa: E402
from spanjudge.eval.distill.dev_folds import dev_split  # noqa: E402
from spanjudge.eval.distill.judgments import STUDENT_READ, archived  # noqa: E402
from spanjudge.eval.distill.phases import student_weights  # noqa: E402
from spanjudge.eval.spans.judging import QUINTD_ASPECT, QUINTD_TASK  # noqa: E402
from spanjudge.eval.spans.recalibration import auc  # noqa: E402
from spanjudge.inference.backends.base import ChatRequest  # noqa: E402
from spanjudge.inference.backends.transformers_reader import prefill_chunks  # noqa: E402
from spanjudge.inference.chat import encode_text, shared_length  # noqa: E402
from spanjudge.inference.contract import parse_judge  # noqa: E402
from spanjudge.inference.contract.anchor import anchor_evaluation  # noqa: E402
from spanjudge.inference.contract.parse import ParseFailure  # noqa: E402
from spanjudge.inference.contract.render import SEVERITY_FIELD, render_judge  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402
from spanjudge.inference.probabilities import _location_spans  # noqa: E402

RESULTS = BENCH / "results"
KEPT = RESULTS / "distill_judgments"
STATES = BENCH.parent / "runs" / "bench" / "span_probe"
OUT = RESULTS / "span_confidence_probe"
PLACES = ("location", "block_end")
ANSWER = ("block_end", 9)  # the place and layer set before any state was read (the module docstring)
# the probe's ridges on standardized states (about 150 spans a fold against 640 dimensions), one chosen per fold
RIDGES = (1.0, 10.0, 100.0, 1000.0, 10000.0)
LABELS = ("human", "teacher")
TOLERANCE = 2e-3  # a location token's log-probability read again against the kept reading's


def judging(run: dict[str, Any]) -> dict[str, Any]:
    """The protocol's judging settings of a run (its prompt's context budget depends on the reply budget)."""
    settings = run["settings"]
    return {
        "max_new_tokens": settings.get("max_new_tokens", 320),
        "retries": settings.get("retries", 1),
        "max_context": 4096,
    }


def block_places(tokenizer: Any, text: str, evaluation: Any, reply: list[int]) -> list[tuple[list[int], int]]:
    """For each error block of a reply rendered by `render_judge`: its location's reply token positions, and the
    position of the block's last token (the end of its severity line)."""
    places = []
    for start, stop in _location_spans(text, evaluation):
        first = shared_length(encode_text(tokenizer, text[:start]), reply)
        last = shared_length(encode_text(tokenizer, text[:stop]), reply)
        severity = text.find(SEVERITY_FIELD, stop)
        end = text.find("\n", severity) if severity >= 0 else -1
        end = len(text) if end < 0 else end
        places.append(
            (list(range(first, max(first + 1, last))), shared_length(encode_text(tokenizer, text[:end]), reply) - 1)
        )
    return places


def extract(label: str, run_dir: Path) -> None:
    """The states of every written span of `label`'s kept dev replies, read by the student in `run_dir`."""
    import torch

    runs = json.loads((RESULTS / "distill_quintd.json").read_text())["runs"]
    if label not in runs:
        sys.exit(f"span_confidence_probe: no protocol run {label!r} in bench/results/distill_quintd.json")
    payload = archived(KEPT, label, "dev").get(STUDENT_READ)
    if payload is None:
        sys.exit(f"span_confidence_probe: {label} keeps no dev judgments with probabilities")
    adapter = run_dir / "student" / "adapter"
    if not adapter.is_dir():
        sys.exit(f"span_confidence_probe: --run {run_dir}: no trained student there (student/adapter)")
    sha = file_sha256(student_weights(adapter))
    if payload["identity"].get("adapter_sha256") != sha:
        sys.exit(f"span_confidence_probe: {adapter} is not the student that judged {label}'s dev outputs")
    docs, teacher = dev_split(label, runs[label]["settings"])
    judge = Judge.from_pretrained(adapter, engine="transformers", probabilities=True, **judging(runs[label]))
    backend = judge.backend
    model, tokenizer = backend.model, backend.tokenizer
    header = judge.catalog.task(QUINTD_TASK).inputs[0].header
    spans: list[dict[str, Any]] = []
    states: list[Any] = []
    worst = 0.0
    started = time.perf_counter()
    groups: dict[str, list[Any]] = {}
    for doc in docs:
        groups.setdefault(doc.input_id, []).append(doc)
    with torch.inference_mode():
        for group in groups.values():
            todo = []
            for doc in group:
                row = payload["rows"].get(doc.id)
                if row is None or row["spans"] is None:
                    continue
                parsed = parse_judge(row["reply"])
                if isinstance(parsed, ParseFailure):
                    sys.exit(f"span_confidence_probe: {label} {doc.id}: the kept reply does not parse again")
                anchored = anchor_evaluation(parsed, doc.output).errors
                if [[e.start, e.end] for e in anchored if e.start is not None] != row["spans"]:
                    sys.exit(f"span_confidence_probe: {label} {doc.id}: the kept reply anchors other spans")
                request = judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(doc.inputs.values()))},
                                        doc.output, id=doc.id)  # fmt: skip
                prompt = backend._prompt_ids(ChatRequest.user(judge._prepare(request).prompt))
                text = render_judge(parsed)
                reply = encode_text(tokenizer, text)
                todo.append((doc, row, parsed, anchored, prompt, text, reply))
            if not todo:
                continue
            shared = min(min(len(t[4]) for t in todo) - 1, *(shared_length(todo[0][4], t[4]) for t in todo))
            base = None
            if shared > 0:
                base = _cache(model)
                for begin, end in prefill_chunks(0, shared, model.device):
                    model(input_ids=torch.tensor([todo[0][4][begin:end]]), past_key_values=base, use_cache=True,
                          logits_to_keep=1)  # fmt: skip
            for doc, row, parsed, anchored, prompt, text, reply in todo:
                cache = _cache(model) if base is None else copy.deepcopy(base)
                written = [*prompt, *reply]
                layers: list[Any] = []  # per reply position, the states of every layer
                places = block_places(tokenizer, text, parsed, reply)
                wanted = [len(prompt) + p[0][0] - 1 for p in places]  # the rows that predict each first location token
                rows: dict[int, Any] = {}
                for begin, end in prefill_chunks(max(shared, 0), len(written), model.device):
                    keep = [k for k in wanted if begin <= k < end]
                    output = model(input_ids=torch.tensor([written[begin:end]]), past_key_values=cache, use_cache=True,
                                   output_hidden_states=True,
                                   logits_to_keep=torch.tensor([k - begin for k in keep or [end - 1]]))  # fmt: skip
                    cache = output.past_key_values
                    stacked = torch.stack(output.hidden_states)[:, 0]  # layers x tokens x width
                    for position in range(max(begin, len(prompt)), end):
                        layers.append(stacked[:, position - begin].clone())
                    if keep:
                        rows.update(zip(keep, output.logits[0].float().log_softmax(-1), strict=True))
                located = iter(row["probabilities"]["span_location"])
                kept_places = [p for p, e in zip(places, anchored, strict=True) if e.start is not None]
                kept_wanted = [w for w, e in zip(wanted, anchored, strict=True) if e.start is not None]
                for index, ((location, end_at), at) in enumerate(zip(kept_places, kept_wanted, strict=True)):
                    kept = next(located)
                    again = float(rows[at][reply[location[0]]])
                    worst = max(worst, abs(again - kept[0]))
                    span = row["spans"][index]
                    states.append(
                        torch.stack([torch.stack([layers[p] for p in location]).mean(0), layers[end_at]])
                    )  # places x layers x width
                    spans.append({
                        "doc": doc.id, "domain": doc.input_id.split("/")[0],
                        "table": int(doc.input_id.rsplit("/", 1)[1]),
                        "human": float(overlaps(span, [(g.start, g.end) for g in doc.gold])),
                        "teacher": float(overlaps(span, teacher[doc.id])),
                        "confidence": row["probabilities"]["span_written"][index],
                        "location_first": kept[0], "location_first_again": again,
                    })  # fmt: skip
            print(f"[probe {time.perf_counter() - started:.0f}s] {len(spans)} spans; worst location gap {worst:.2e}",
                  file=sys.stderr)  # fmt: skip
    if worst > TOLERANCE:
        sys.exit(f"span_confidence_probe: a location token read again differs by {worst:.2e} from the kept reading")
    STATES.mkdir(parents=True, exist_ok=True)
    saved = {"label": label, "spans": spans, "states": torch.stack(states), "places": PLACES,
             "worst_location_gap": worst, "wall_s": time.perf_counter() - started}  # fmt: skip
    partial = STATES / f"{label}.pt.partial"  # a killed run leaves no file the report would read
    torch.save(saved, partial)
    partial.replace(STATES / f"{label}.pt")


def _cache(model: Any) -> Any:
    from transformers import DynamicCache

    return DynamicCache(config=model.config)


def probe(x: np.ndarray, y: np.ndarray, ridge: float) -> tuple[np.ndarray, float]:
    """A ridge-penalised logistic regression (weights, bias) of `y` on `x` (standardized): the mean log loss plus
    ridge / 2 · |w|² / n (scikit-learn's C = 1 / ridge)."""

    def loss(w: np.ndarray) -> tuple[float, np.ndarray]:
        z = x @ w[:-1] + w[-1]
        p = 1.0 / (1.0 + np.exp(-z))
        grad = np.concatenate([x.T @ (p - y) / len(y) + ridge * w[:-1] / len(y), [np.mean(p - y)]])
        return float(np.mean(np.logaddexp(0.0, z) - y * z) + 0.5 * ridge * w[:-1] @ w[:-1] / len(y)), grad

    found = minimize(loss, np.zeros(x.shape[1] + 1), jac=True, method="L-BFGS-B")
    return found.x[:-1], float(found.x[-1])


def fitted_scores(x: np.ndarray, y: np.ndarray, fit: np.ndarray, read: np.ndarray, ridge: float) -> np.ndarray:
    """The scores of the `read` rows from a probe fitted on the `fit` rows (standardized by them)."""
    mean, scale = x[fit].mean(0), x[fit].std(0) + 1e-6
    w, b = probe((x[fit] - mean) / scale, y[fit], ridge)
    return np.asarray((x[read] - mean) / scale @ w + b)


def _ranked(scores: np.ndarray, y: np.ndarray) -> float:
    """AUC of `scores` against `y` (0.5 where one class is missing)."""
    found = auc(list(zip(scores.tolist(), y.tolist(), strict=True)))
    return 0.5 if found is None else found


def held_out(x: np.ndarray, y: np.ndarray, fold: np.ndarray, inner: np.ndarray | None = None) -> np.ndarray:
    """Each span's probe score, from a probe fitted on the other fold's spans; its ridge chosen from RIDGES by
    fitting on one half of that fold (`inner`: 0 or 1 a span) and ranking `y` on the other, both ways (the folds'
    labels only: the fold read is never seen). Without `inner`, the middle ridge."""
    scores = np.zeros(len(y))
    for side in (0, 1):
        fit, read = fold != side, fold == side
        ridge = RIDGES[len(RIDGES) // 2]
        if inner is not None:
            ridge = max(RIDGES, key=lambda r: sum(
                _ranked(fitted_scores(x, y, fit & (inner != half), fit & (inner == half), r), y[fit & (inner == half)])
                for half in (0, 1)))  # fmt: skip
        scores[read] = fitted_scores(x, y, fit, read, ridge)
    return scores


def report() -> None:
    import torch

    rows = []
    found = sorted(STATES.glob("*.pt"))
    if not found:
        sys.exit(f"span_confidence_probe: no states in {STATES} yet; run `extract` for a protocol run first")
    for path in found:
        saved = torch.load(path)
        spans, states = saved["spans"], saved["states"].numpy()
        human = np.array([s["human"] for s in spans])
        fold = np.array([s["table"] % 2 for s in spans])
        inner = np.array([s["table"] // 2 % 2 for s in spans])  # a fold's halves: 70, 74, 78 and 72, 76
        row: dict[str, Any] = {"label": saved["label"], "spans": len(spans), "overlap": float(human.mean()),
                               "worst_location_gap": saved["worst_location_gap"], "wall_s": round(saved["wall_s"], 1),
                               "confidence": auc(list(zip([s["confidence"] for s in spans], human, strict=True))),
                               "probes": {}}  # fmt: skip
        for label in LABELS:
            y = np.array([s[label] for s in spans])
            for place_index, place in enumerate(PLACES):
                for layer in range(states.shape[2]):
                    scores = held_out(states[:, place_index, layer], y, fold, inner)
                    key = f"{label} {place} {layer}"
                    row["probes"][key] = auc(list(zip(scores.tolist(), human.tolist(), strict=True)))
        row["answer"] = {label: row["probes"][f"{label} {ANSWER[0]} {ANSWER[1]}"] for label in LABELS}
        rows.append(row)
    write_report(OUT, {"machine": machine(), "ridges": RIDGES, "rows": rows}, markdown(rows))


def markdown(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        "# Does a student know which of its spans are right? (`bench/span_confidence_probe.py`)",
        "",
        f'Machine: {machine()}. Dev split only (tables 70–79). AUC against "overlaps a human span" of a logistic '
        "probe on one layer's hidden states of the student reading its own kept reply, fitted on one fold of the "
        "dev tables (even or odd) and read on the other (its ridge chosen from "
        f"{', '.join(map(str, RIDGES))} on the fitting fold's halves, by the fitted label); fitted to the humans' "
        "spans or to the teacher's (GPT-4's: no human label used). Places: the mean over a span's location tokens, "
        "and its error block's last token. Layer 0: the embeddings.",
        "",
    ]
    for row in rows:
        layers = sorted({int(k.rsplit(" ", 1)[1]) for k in row["probes"]})
        lines += [
            f"## {row['label']}: {row['spans']} spans, {row['overlap']:.3f} overlap a human span; "
            f"its span confidence's AUC {row['confidence']:.3f}; location tokens read again within "
            f"{row['worst_location_gap']:.1e}; read in {row['wall_s']} s",
            "",
            f"The answer ({ANSWER[0]}, layer {ANSWER[1]}, set before the states were read): fitted to the humans "
            f"{row['answer']['human']:.3f}, to the teacher {row['answer']['teacher']:.3f}.",
            "",
            "| fitted to | place | " + " | ".join(f"layer {n}" for n in layers) + " |",
            "|---|---|" + "---:|" * len(layers),
        ]
        for label in LABELS:
            for place in PLACES:
                values = [row["probes"][f"{label} {place} {n}"] for n in layers]
                lines.append(f"| {label} | {place} | " + " | ".join(f"{v:.3f}" for v in values) + " |")
        lines.append("")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    read = commands.add_parser("extract", help="read a run's kept dev replies again with its student")
    read.add_argument("--label", required=True, help="the protocol run whose kept dev judgments are read")
    read.add_argument("--run", type=Path, required=True, help="the work folder of the student that judged them")
    commands.add_parser("report", help="fit and read the probes on every run extracted")
    args = parser.parse_args()
    if args.command == "extract":
        extract(args.label, args.run)
    else:
        report()


if __name__ == "__main__":
    main()
