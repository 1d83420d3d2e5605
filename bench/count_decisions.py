"""Where do the distilled students' error counts collapse? Their decisions, read from the model.

    .venv/bin/python bench/count_decisions.py LABEL [LABEL ...]

For each run LABEL of bench/distill_quintd.py (its folder runs/bench/distill_quintd/LABEL, with the
student's adapter and its held-out judgments), the student reads its own greedy reply again
(teacher forcing, transformers, one forward per output) and gives, at every point where the reply
decides how many errors to write (its first token: `No Error` or `Error 1:`; after each block:
another `Error k:` or `Overall score:`), the probability of going on, c_k = P(Error) / (P(Error) +
P(stop)). The expected count along the greedy path is Σ_k Π_{j≤k} c_j (the decisions after the
greedy path's last one are not read). Compared with the human counts on the same 80 held-out
outputs: Pearson r of the greedy count (the reply's errors) and of the expected count, and their
means (humans: 1.23). A diagnostic of the decoding, not a scoring option: the judge's replies are
used as written everywhere else. A SmolLM2 student's replies came from llama.cpp (Q4_1 base + GGUF
LoRA); its probabilities here come from the unquantized base + adapter on transformers.

Results: bench/results/count_decisions.{json,md}, one row per label. Each label's row is written as
soon as it is measured, so a killed run keeps what it finished; a re-run measures again only the
labels whose judgments changed (their sha256 is recorded).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
from pathlib import Path
from typing import Any

from spanjudge.inference.probabilities import expected_count  # Σ_k Π_{j≤k} c_j, as `score --probabilities` reads it

REPO = Path(__file__).resolve().parents[1]
RUNS = REPO / "runs" / "bench" / "distill_quintd"
RESULTS = REPO / "bench" / "results" / "count_decisions"


def run_settings(label: str) -> dict[str, Any]:
    """The settings bench/distill_quintd.py recorded for run `label`."""
    from distill_quintd import RESULTS as DISTILL  # the sibling benchmark (bench/ is the script's path)

    path = DISTILL.with_suffix(".json")
    runs = json.loads(path.read_text())["runs"] if path.is_file() else {}
    if label not in runs:
        raise SystemExit(f"no run {label!r} in {path.relative_to(REPO)}; runs: {', '.join(runs) or 'none'}")
    return runs[label]["settings"]


def student_judgments(folder: Path, settings: dict[str, Any]) -> Path:
    """The student's held-out judgments of a run, for the judging setting the run recorded."""
    from distill_quintd import judging_key

    name = "student+grammar" if settings.get("constrained") else "student"
    key = judging_key(settings["domains"], settings["test_tables"], settings["max_new_tokens"], settings["retries"])
    path = folder / "judgments" / f"{name}_{key}.json"
    if not path.is_file():  # runs made before judgments were named by their setting
        path = folder / "judgments" / f"{name}.json"
    if not path.is_file():
        raise SystemExit(f"{folder} has no {name} judgments; run bench/distill_quintd.py --label {folder.name}")
    return path


def decisions(model: Any, tokenizer: Any, prompt_ids: list[int], reply: str, first: dict[str, int]) -> list[float]:
    """P(go on) at each count decision of `reply`, up to and including the one where it stopped."""
    import torch

    encoded = tokenizer(reply, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + ids])).logits[0]
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    starts = [i for i, (a, _) in enumerate(offsets) if a == 0 or reply[a - 1] == "\n"]  # tokens that open a line
    points = [i for i in starts if ids[i] in (first["Error"], first["Overall"], first["No"])]
    going_on = []
    for n, i in enumerate(points):
        row = log_probs[len(prompt_ids) + i - 1]  # the distribution this token was drawn from
        stop = first["No"] if n == 0 else first["Overall"]
        error, halt = row[first["Error"]].exp().item(), row[stop].exp().item()
        going_on.append(error / (error + halt))
        if ids[i] != first["Error"]:
            break
    return going_on


def measure(label: str, settings: dict[str, Any], judgments: Path) -> dict[str, Any]:
    from scipy.stats import pearsonr

    from spanjudge.eval.spans.judging import QUINTD_ASPECT, QUINTD_TASK
    from spanjudge.eval.spans.quintd import quintd_tables
    from spanjudge.inference.judge import Judge
    from spanjudge.inference.judge_conversation import judge_prompt_ids

    folder = RUNS / label
    rows = json.loads(judgments.read_text())["rows"]
    judge = Judge.from_pretrained(folder / "student" / "adapter", engine="transformers", max_context=4096)
    tokenizer, model = judge.tokenizer, judge.backend.model
    first = {word: tokenizer(word, add_special_tokens=False)["input_ids"][0] for word in ("No", "Error", "Overall")}
    header = judge.catalog.task(QUINTD_TASK).inputs[0].header
    human, greedy, expected = [], [], []
    try:
        for doc in quintd_tables("human", tuple(settings["test_tables"]), settings["domains"]):
            row = rows[doc.id]
            if row["spans"] is None:  # unscored: no count to compare
                continue
            request = judge.request(QUINTD_TASK, QUINTD_ASPECT, {header: next(iter(doc.inputs.values()))}, doc.output)
            prompt_ids = judge_prompt_ids(tokenizer, request)
            human.append(len(doc.gold_spans))
            greedy.append(row["errors"])
            expected.append(expected_count(decisions(model, tokenizer, prompt_ids, row["reply"], first)))
    finally:
        judge.close()
    return {
        "label": label,
        "judgments": str(judgments.relative_to(REPO)),
        "judgments_sha256": _sha256(judgments),
        "outputs": len(human),
        "greedy_pearson": round(float(pearsonr(greedy, human)[0]), 3),
        "expected_pearson": round(float(pearsonr(expected, human)[0]), 3),
        "greedy_mean": round(sum(greedy) / len(greedy), 2),
        "expected_mean": round(sum(expected) / len(expected), 2),
        "human_mean": round(sum(human) / len(human), 2),
    }


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def markdown(results: list[dict[str, Any]]) -> str:
    lines = [
        "# The students' count decisions (`bench/count_decisions.py`)",
        "",
        f"{platform.machine()}, {os.cpu_count()} cores. The 80 held-out quintd-1 wikidata outputs (tables 80–99); "
        "count = errors per output; humans: the human spans. Greedy: the reply's own count (every error it "
        "wrote, anchored or not, so r differs from distill_quintd's count Pearson, which counts "
        "anchored spans). Expected: Σ_k Π_{j≤k} P(go on at decision j), read from the student along its "
        "greedy reply (SmolLM2 students: replies from llama.cpp's Q4_1 + GGUF LoRA, probabilities from the "
        "unquantized model on transformers).",
        "",
        "| run | outputs | count r, greedy | count r, expected | mean, greedy | mean, expected | mean, humans |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| `{r['label']}` | {r['outputs']} | {r['greedy_pearson']} | {r['expected_pearson']} | "
            f"{r['greedy_mean']} | {r['expected_mean']} | {r['human_mean']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("labels", nargs="+", help="run labels of bench/distill_quintd.py with their folders")
    args = parser.parse_args()
    path = RESULTS.with_suffix(".json")
    results = {r["label"]: r for r in json.loads(path.read_text())} if path.is_file() else {}
    for label in args.labels:
        settings = run_settings(label)
        judgments = student_judgments(RUNS / label, settings)
        if results.get(label, {}).get("judgments_sha256") == _sha256(judgments):
            print(f"{label}: measured before on the same judgments", flush=True)
            continue
        results[label] = measure(label, settings, judgments)
        print(json.dumps(results[label]), flush=True)
        path.write_text(json.dumps(list(results.values()), indent=2) + "\n")  # kept at once: a kill loses no label
        RESULTS.with_suffix(".md").write_text(markdown(list(results.values())))
    print(markdown(list(results.values())))


if __name__ == "__main__":
    main()
