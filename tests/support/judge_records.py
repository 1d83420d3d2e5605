"""Judge training records in data_gen's format, built from real SFRES data at test time.

The texts and the scores are the dataset's own (human naturalness ratings 1-6, mapped to
0-100 in steps of 5); the fixture has no error spans, since SFRES carries none. Nothing
is copied into the repository: the records are written to a temporary folder.
"""

from __future__ import annotations

import json
from pathlib import Path

from spanjudge.core.catalog import load_catalog
from spanjudge.inference.contract import rating_to_score, round_to_multiple_of_five


def sfres_records(shared_data: Path, count: int, *, offset: int = 0) -> list[dict]:
    rows = json.loads((shared_data / "meta_eval/sfres_sfhot/openlgauge_sfres.json").read_text(encoding="utf-8"))
    task = load_catalog().task("sfres")
    records = []
    for row in rows[offset : offset + count]:
        score = round_to_multiple_of_five((row["score"]["naturalness"] - 1) / 5 * 100)
        records.append(
            {
                "id": f"sfres-{row['id']}-naturalness",
                "dataset": "sfres",
                "input_id": str(row["id"]),
                "system": "sfres-rnnlg",
                "inputs": row["inputs"],
                "outputs": row["outputs"],
                "aspect_name": "naturalness",
                "aspect_definition": task.aspect("naturalness").definition,
                "task_type": "data_to_text",
                "task_name": "data-to-text",
                "task_id": "sfres",
                "extra_task_info": task.description,
                "evaluation": {"errors": [], "score": score},
                "provenance": {"fixture": "SFRES human naturalness rating"},
            }
        )
    return records


def write_records(folder: Path, shared_data: Path, train: int = 16, validation: int = 4) -> Path:
    """folder/train.jsonl and folder/validation.jsonl (disjoint inputs), as `spanjudge annotate` writes them."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (
        ("train", sfres_records(shared_data, train)),
        ("validation", sfres_records(shared_data, validation, offset=train)),
    ):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder


def summeval_records(shared_data: Path, count: int, aspect: str = "relevance") -> list[dict]:
    """Longer examples (CNN/DM articles, ~1k tokens): SummEval summaries with the experts' mean
    rating (1-5) as the score, one record per summary."""
    task = load_catalog().task("summeval")
    records = []
    with (shared_data / "meta_eval/summeval/summeval.jsonl").open(encoding="utf-8") as handle:
        for number, line in enumerate(handle):
            if number >= count:
                break
            row = json.loads(line)
            records.append(
                {
                    "id": f"summeval-{number}-{aspect}",
                    "dataset": "summeval",
                    "input_id": row["doc_id"],
                    "system": row["system_id"],
                    "inputs": {"Article": row["source"]},
                    "outputs": {"Summary": row["system_output"]},
                    "aspect_name": aspect,
                    "aspect_definition": task.aspect(aspect).definition,
                    "task_type": task.category,
                    "task_name": task.title,
                    "task_id": "summeval",
                    "extra_task_info": task.description,
                    "evaluation": {
                        "errors": [],
                        "score": round_to_multiple_of_five(rating_to_score(row["scores"][aspect])),
                    },
                    "provenance": {"fixture": f"SummEval expert mean {aspect} rating"},
                }
            )
    return records


def qags_xsum_records(shared_data: Path, count: int, *, offset: int = 0, max_words: int = 250) -> list[dict]:
    """QAGS-XSum summaries with their human judgments as the target: three crowd workers
    said for each summary sentence whether the article supports it. A sentence most workers
    rejected becomes an error span quoting it (severity 3 for 2 of 3 votes, 5 for 3 of 3);
    the score is the share of 'yes' votes. Articles over `max_words` words are left out to
    keep CPU training short."""
    task = load_catalog().task("qags_xsum")
    records: list[dict] = []
    with (shared_data / "meta_eval/qags/mturk_xsum.jsonl").open(encoding="utf-8") as handle:
        rows = [json.loads(line) for line in handle]
    short = [(number, row) for number, row in enumerate(rows) if len(row["article"].split()) <= max_words]
    for number, row in short[offset : offset + count]:
        errors, yes, votes = [], 0, 0
        for sentence in row["summary_sentences"]:
            answers = [r["response"] for r in sentence["responses"]]
            rejected = answers.count("no")
            yes, votes = yes + answers.count("yes"), votes + len(answers)
            if rejected * 2 > len(answers):
                errors.append(
                    {
                        "location": sentence["sentence"],
                        "explanation": f"{rejected} of {len(answers)} annotators found it unsupported by the article.",
                        "severity": 2 * rejected - 1,
                    }
                )
        records.append(
            {
                "id": f"qags_xsum-{number}",
                "dataset": "qags_xsum",
                "input_id": str(number),
                "system": "bart",
                "inputs": {"Article": row["article"]},
                "outputs": {"Summary": " ".join(s["sentence"] for s in row["summary_sentences"])},
                "aspect_name": "factual consistency",
                "aspect_definition": task.aspect("factual consistency").definition,
                "task_type": task.category,
                "task_name": task.title,
                "task_id": "qags_xsum",
                "extra_task_info": task.description,
                "evaluation": {"errors": errors, "score": round_to_multiple_of_five(100 * yes / votes)},
                "provenance": {"fixture": "QAGS-XSum crowd votes per summary sentence"},
            }
        )
    return records


def write_qags_records(folder: Path, shared_data: Path, train: int = 16, validation: int = 4) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, rows in (
        ("train", qags_xsum_records(shared_data, train)),
        ("validation", qags_xsum_records(shared_data, validation, offset=train)),
    ):
        (folder / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return folder
