"""Teacher annotations from files (`spanjudge import`): quintd-1 spans and OpeNLGauge's release."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.quintd_files import DATA, GOOD, RULE, quintd_config, write_annotator, write_quintd

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.data_gen.teacher import (
    ImportConfig,
    ScoreRule,
    import_annotations,
    load_import_config,
)
from spanjudge.inference.contract import parse_judge, render_judge
from spanjudge.inference.openlgauge import iter_openlgauge, openlgauge_evaluation

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))


def test_quintd_import_keeps_offsets_and_applies_the_declared_rule(tmp_path: Path) -> None:
    root = write_quintd(tmp_path / "data", GOOD)
    summary = import_annotations(quintd_config(root), tmp_path, tmp_path / "out", load_catalog())
    assert (summary.records, summary.spans) == (2, 2)
    records = [json.loads(line) for name in ("train", "validation") for line in (tmp_path / "out" / f"{name}.jsonl")
               .read_text().splitlines()]  # fmt: skip
    by_index = {r["input_id"]: r for r in records}
    first = by_index["wikidata/0"]
    errors = first["evaluation"]["errors"]
    assert [(e["start"], e["end"], e["severity"]) for e in errors] == [(0, 25, 4), (31, 35, 2)]  # sorted by offset
    assert all(first["outputs"]["Text"][e["start"] : e["end"]] == e["location"] for e in errors)
    assert errors[1]["explanation"] == "The year is not in the data."
    assert first["evaluation"]["score"] == 40  # 100 - 10 * (4 + 2)
    assert by_index["wikidata/1"]["evaluation"] == {"errors": [], "score": 100.0}
    assert first["inputs"] == {"Data": DATA} and first["task_id"] == "quintd1" and first["aspect_name"] == "accuracy"
    assert "10 × Σ severity" in first["provenance"]["rule"] and first["provenance"]["teacher"] == "gpt-4-1106-preview"
    assert first["provenance"]["source"].endswith("gpt-4-wikidata-test-llama2.jsonl:1")
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["import"]["spans_per_type"] == {"Incorrect": 1, "Not checkable": 1}
    assert "Rule: severity by span type" in (tmp_path / "out" / "stats.md").read_text()
    assert (tmp_path / "out" / "hf_dataset").is_dir() and summary.train == 1 and summary.validation == 1


@pytest.mark.parametrize(
    ("spans", "message"),
    [
        ([{"type": 7, "text": "1966", "start": 31}], "unknown span type 7"),
        ([{"type": 0, "text": "1966", "start": 900}], "offset 900 is outside the output"),
        ([{"type": 0, "text": "1967", "start": 31}], "offset 31 reads ' by ', not the span's text '1967'"),
        ([{"type": 0, "text": "", "start": 31}], "empty span at offset 31"),
        ([{"type": 0, "text": "1966", "start": "31"}], "must be an integer character offset"),
    ],
)
def test_quintd_bad_spans_name_file_and_line_and_write_nothing(tmp_path: Path, spans: list, message: str) -> None:
    root = write_quintd(tmp_path / "data", [[], spans])
    with pytest.raises(InputError, match=message) as caught:
        import_annotations(quintd_config(root), tmp_path, tmp_path / "out", load_catalog())
    assert "gpt-4-wikidata-test-llama2.jsonl:2:" in str(caught.value)
    assert not (tmp_path / "out").exists()


def test_quintd_missing_output_is_named(tmp_path: Path) -> None:
    root = write_quintd(tmp_path / "data", [[], [], []])  # a record for table 2; only 2 outputs exist
    with pytest.raises(InputError, match=r"jsonl:3: missing output: .*llama2.json has no output 2"):
        import_annotations(quintd_config(root), tmp_path, tmp_path / "out", load_catalog())
    assert not (tmp_path / "out").exists()


def test_quintd_mismatch_policies(tmp_path: Path) -> None:
    moved = [{"type": 0, "text": "Peter Schamoni", "start": 3}, {"type": 2, "text": "nowhere", "start": 0}]
    root = write_quintd(tmp_path / "data", [moved, []])
    with pytest.raises(InputError, match="occurs nowhere in the output"):
        import_annotations(quintd_config(root, on_mismatch="relocate"), tmp_path, tmp_path / "a", load_catalog())
    policy = quintd_config(root, on_mismatch="relocate_or_drop")
    summary = import_annotations(policy, tmp_path, tmp_path / "b", load_catalog())
    assert len(summary.relocated) == 1 and "moved from 3 to 65" in summary.relocated[0]
    assert len(summary.dropped) == 1 and "nowhere@0" in summary.dropped[0]
    summary = import_annotations(quintd_config(root, on_mismatch="drop"), tmp_path, tmp_path / "c", load_catalog())
    assert not summary.relocated and [d.split(": ")[-1] for d in summary.dropped] == ["Peter Schamoni@3", "nowhere@0"]


def test_quintd_table_range_selects_inputs(tmp_path: Path) -> None:
    root = write_quintd(tmp_path / "data", GOOD)
    summary = import_annotations(quintd_config(root, table_range=[1, 2]), tmp_path, tmp_path / "out", load_catalog())
    assert summary.records == 1


def test_score_rule() -> None:
    rule = ScoreRule.model_validate(RULE)
    assert rule.score([]) == 100
    assert rule.score([4, 2]) == 40
    assert rule.score([4, 4, 4]) == 0  # floored at 0
    assert ScoreRule.model_validate({**RULE, "penalty": 7}).score([2, 1]) == 80  # 79 rounds half up to 80
    assert ScoreRule.model_validate({**RULE, "penalty": 7, "round_to": 1}).score([2, 1]) == 79
    with pytest.raises(ValueError, match="severities must be 1-5"):
        ScoreRule.model_validate({"severity": {"Incorrect": 9}})
    with pytest.raises(InputError, match="span type 'Odd' has no severity"):
        rule.severity_of("Odd", "f:1")


def test_real_quintd_wikidata_import(tmp_path: Path, shared_data: Path) -> None:
    """The shipped config on the real GPT-4 spans: 80 tables x 4 systems, one span relocated."""
    config = load_import_config(REPO / "configs/import/quintd1_gpt4_wikidata.yaml")
    summary = import_annotations(config, REPO / "configs/import", tmp_path, load_catalog())
    assert summary.records == 320 and summary.train + summary.validation == 320
    assert len(summary.relocated) == 1
    assert [d.split(": ")[-1] for d in summary.dropped] == ["(empty)@0"] * len(summary.dropped)
    rows = [json.loads(line) for line in (tmp_path / "train.jsonl").read_text().splitlines()]
    for row in rows:
        output = row["outputs"]["Text"]
        assert all(output[e["start"] : e["end"]] == e["location"] for e in row["evaluation"]["errors"])
    assert max(int(r["input_id"].split("/")[1]) for r in rows) < 80  # held-out tables 80-99 never imported


def _records(out: Path) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for name in ("train", "validation")
        for line in (out / f"{name}.jsonl").read_text().splitlines()
    ]


def test_quintd_annotators_merged_by_vote(tmp_path: Path) -> None:
    """GPT-4 and Llama 3 on the same two outputs: the span both mark (overlapping) is kept with the union of their
    extents, the higher severity, two votes and both members; the span only GPT-4 marks is not."""
    root = write_quintd(tmp_path / "data", GOOD)  # gpt-4: "Hundertwasser's Rainy Day" [0, 25) Incorrect, "1966"
    write_annotator(root, "llama3", [[{"type": 2, "text": "Rainy Day is a", "start": 16, "reason": "Misleading."}], []])
    merge = {"method": "vote", "min_votes": 2, "extent": "union"}
    config = quintd_config(root, annotators=["gpt-4", "llama3"], merge=merge)
    summary = import_annotations(config, tmp_path, tmp_path / "out", load_catalog())
    assert (summary.records, summary.spans) == (2, 3)  # the annotators' spans, before the vote
    by_index = {r["input_id"]: r for r in _records(tmp_path / "out")}
    first = by_index["wikidata/0"]
    (error,) = first["evaluation"]["errors"]
    assert (error["start"], error["end"], error["severity"]) == (0, 30, 4)  # [0, 25) + [16, 30); Incorrect > Misleading
    assert error["location"] == first["outputs"]["Text"][0:30] and error["explanation"] == "Wrong title. | Misleading."
    merged = first["provenance"]["merge"]
    assert merged["errors"] == [{"votes": 2, "members": ["gpt-4", "llama3"]}] and merged["absent"] == []
    assert first["provenance"]["teacher"] == "vote2-union(gpt-4+llama3)" and first["evaluation"]["score"] == 60
    assert by_index["wikidata/1"]["evaluation"]["errors"] == []
    # how far the annotators agree on each output (data.example_weights): both mark one of the first's two
    # clusters ("1966" only GPT-4); neither marks anything in the second
    assert merged["agreement"] == 0.5 and by_index["wikidata/1"]["provenance"]["merge"]["agreement"] == 1.0


def test_quintd_vote_settings_are_checked(tmp_path: Path) -> None:
    root = write_quintd(tmp_path / "data", GOOD)
    vote = {"method": "vote", "min_votes": 2}
    for source, message in [
        ({"annotator": "gpt-4", "annotators": ["gpt-4", "llama3"], "merge": vote}, "not both"),
        ({"annotators": ["gpt-4", "llama3"]}, "merged by `merge: {method: vote"),
        ({"annotators": ["gpt-4", "llama3"], "merge": {"method": "supervisor"}}, "import calls no model"),
        ({"annotators": ["gpt-4"], "merge": vote}, "two or more different annotators"),
        ({"annotators": ["gpt-4", "llama3"], "merge": {"method": "vote", "min_votes": 3}}, "exceeds the 2 annotators"),
    ]:
        with pytest.raises(ValueError, match=message):
            quintd_config(root, **source)


def test_real_quintd_vote_of_gpt4s_two_samples(tmp_path: Path, shared_data: Path) -> None:
    """The shipped vote teacher on the real spans: every kept error is marked by both GPT-4 samples and quotes the
    output where it sits; no output lacks a sample."""
    config = load_import_config(REPO / "configs/import/quintd1_vote_gpt4_twice.yaml")
    summary = import_annotations(config, REPO / "configs/import", tmp_path, load_catalog())
    assert summary.records == 100  # wikidata tables 0-24, four systems
    rows = _records(tmp_path)
    kept = 0
    for row in rows:
        output, merge = row["outputs"]["Text"], row["provenance"]["merge"]
        assert merge["absent"] == [] and len(merge["errors"]) == len(row["evaluation"]["errors"])
        assert all(e == {"votes": 2, "members": ["gpt-4", "gpt-4-temperature-1"]} for e in merge["errors"])
        assert all(output[e["start"] : e["end"]] == e["location"] for e in row["evaluation"]["errors"])
        kept += len(merge["errors"])
    assert 0 < kept < summary.spans / 2  # a vote of two keeps fewer errors than either sample marks


# --- OpeNLGauge ------------------------------------------------------------------------------------------------------


def openlgauge_rows() -> list[dict[str, Any]]:
    base = {
        "dataset": "SummEval",
        "input_id": "a1",
        "inputs": {"Article": "The cat sat on the mat all day long."},
        "aspect_name": "fluency",
        "aspect_definition": "How well the summary reads.",
        "task_type": "summarization",
        "task_name": "news_summarization",
        "extra_task_info": "",
    }
    text = "Error 1:\nLocation: sat sat\nExplanation: Repeated word.\nSeverity: 2\n\nOverall score: 70"
    return [
        {**base, "system": "s1", "outputs": {"Summary": "The cat sat sat on the mat."}, "evaluation": text},
        {**base, "system": "s2", "outputs": {"Summary": "A cat sat."},
         "evaluation": {"errors": [{"location": "A cat", "explanation": "Vague.", "severity": 1}], "score": 90}},
        {**base, "system": "s3", "outputs": {"Summary": "The cat sat on the mat."},
         "evaluation": "No Error\n\nOverall score: 100"},
    ]  # fmt: skip


def test_openlgauge_array_imports_both_evaluation_shapes(tmp_path: Path) -> None:
    path = tmp_path / "train.json"
    path.write_text(json.dumps(openlgauge_rows()))
    config = ImportConfig.model_validate({"name": "o", "source": {"format": "openlgauge", "path": "train.json"}})
    summary = import_annotations(config, tmp_path, tmp_path / "out", load_catalog())
    assert summary.records == 3
    records = {r["system"]: r for r in iter_openlgauge(path, load_catalog())}
    first = records["s1"]["evaluation"]
    assert first["score"] == 70 and (first["errors"][0]["start"], first["errors"][0]["end"]) == (8, 15)
    assert records["s2"]["evaluation"]["errors"][0]["severity"] == 1 and records["s2"]["evaluation"]["score"] == 90
    assert records["s3"]["evaluation"] == {"errors": [], "score": 100.0}
    assert records["s1"]["task_id"] == "news_summarization" and records["s1"]["provenance"]["source"] == f"{path}[0]"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"evaluation": "Location: x"}, r"\[1\]: evaluation text does not parse"),
        ({"evaluation": {"errors": [], "score": 140}}, r"\[1\]: evaluation.score"),
        ({"evaluation": {"errors": [{"location": "x", "explanation": "y", "severity": 9}], "score": 1}},
         r"\[1\]: evaluation.errors\[0\]"),
        ({"task_name": "poetry"}, r"\[1\]: task_name 'poetry' matches no catalog task; map it with task_map"),
        ({"outputs": {"Summary": "  "}}, r"\[1\]: missing output"),
        ({"outputs": None}, r"\[1\]: 'outputs' must map headers to texts"),
    ],
)  # fmt: skip
def test_openlgauge_bad_records_are_named(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    rows = openlgauge_rows()
    rows[1] = {**rows[1], **change}
    path = tmp_path / "train.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(InputError, match=message):
        list(iter_openlgauge(path, load_catalog()))


def test_openlgauge_text_and_structured_evaluations_agree() -> None:
    structured = {"errors": [{"location": "A cat", "explanation": "Vague.", "severity": 1}], "score": 90}
    text = render_judge(openlgauge_evaluation(structured, "x"))
    assert openlgauge_evaluation(text, "x") == parse_judge(text)


def test_train_reads_an_openlgauge_array(tmp_path: Path) -> None:
    """`train` takes the released JSON array directly (it refused it before: 'expected a JSON object')."""
    from transformers import AutoTokenizer

    from spanjudge.inference.hf_models import convert_gguf
    from spanjudge.inference.shipped_models import smollm2_gguf
    from spanjudge.training.data import tokenize_split

    path = tmp_path / "train.json"
    path.write_text(json.dumps(openlgauge_rows()))
    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf(), progress=lambda _: None))
    split = tokenize_split(path, tokenizer, load_catalog(), max_length=1024)
    assert len(split.input_ids) == 3 and split.completion_tokens > 0


# --- the command -----------------------------------------------------------------------------------------------------


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}
    return subprocess.run([SPANJUDGE, *args], capture_output=True, text=True, timeout=120, env=env)


def test_import_command(tmp_path: Path) -> None:
    root = write_quintd(tmp_path / "data", GOOD)
    config = {"name": "t", "source": {"format": "quintd1", "data_root": str(root), "rule": RULE}}
    (tmp_path / "import.yaml").write_text(yaml.safe_dump(config))
    result = _cli("import", "--config", str(tmp_path / "import.yaml"), "--out", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert "2 records" in result.stderr and "rule: severity by span type" in result.stderr
    config["source"]["rule"] = {"severity": {"Incorrect": 4}}
    (tmp_path / "bad.yaml").write_text(yaml.safe_dump(config))
    result = _cli("import", "--config", str(tmp_path / "bad.yaml"), "--out", str(tmp_path / "out2"))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "rule.severity needs every quintd-1 span type" in result.stderr


def test_import_ids_takes_only_the_records_named(tmp_path: Path) -> None:
    """--ids: the list `spanjudge select` prints (id, tab, uncertainty) picks the records; an id that names
    none is one line naming the file, what it lacks and what the ids look like."""
    root = write_quintd(tmp_path / "data", GOOD)
    config = {"name": "t", "source": {"format": "quintd1", "data_root": str(root), "rule": RULE},
              "validation_fraction": 0}  # fmt: skip
    (tmp_path / "import.yaml").write_text(yaml.safe_dump(config))
    every = _cli("import", "--config", str(tmp_path / "import.yaml"), "--out", str(tmp_path / "all"))
    assert every.returncode == 0, every.stderr
    ids = [json.loads(line)["id"] for line in (tmp_path / "all" / "train.jsonl").read_text().splitlines()]
    assert len(ids) == 2
    (tmp_path / "ids.txt").write_text(f"# chosen by confidence\n{ids[1]}\t0.8125\n\n")
    result = _cli("import", "--config", str(tmp_path / "import.yaml"), "--out", str(tmp_path / "one"),
                  "--ids", str(tmp_path / "ids.txt"))  # fmt: skip
    assert result.returncode == 0, result.stderr
    kept = [json.loads(line) for line in (tmp_path / "one" / "train.jsonl").read_text().splitlines()]
    assert [r["id"] for r in kept] == [ids[1]] and "1 records" in result.stderr
    run = json.loads((tmp_path / "one" / "run.json").read_text())
    assert run["ids"] == {"file": str(tmp_path / "ids.txt"), "count": 1} and run["spans"] == 0  # table 1 has none

    (tmp_path / "bad.txt").write_text(f"{ids[0]}\nquintd1/wikidata/nobody/7/accuracy\n")
    result = _cli("import", "--config", str(tmp_path / "import.yaml"), "--out", str(tmp_path / "bad"),
                  "--ids", str(tmp_path / "bad.txt"))  # fmt: skip
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"--ids {tmp_path / 'bad.txt'}: 1 of 2 ids name no record of import 't'" in result.stderr
    assert "quintd1/wikidata/nobody/7/accuracy" in result.stderr and ids[0] in result.stderr  # its example
    assert not (tmp_path / "bad").exists()
