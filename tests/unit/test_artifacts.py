"""The typed files that cross stages (core/artifacts.py): spanjudge.json read through one
validating reader by every stage, and the meta-evaluation rows a model card shows."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from spanjudge.core.artifacts import AdapterMetadata, MetaEvalCell, ResultRow, read_adapter_metadata
from spanjudge.core.errors import InputError
from spanjudge.eval.correlation.runner import training_inputs
from spanjudge.inference.judge_conversation import stored_template
from spanjudge.inference.judge_location import recorded_base
from spanjudge.publish.results import read_eval_results

TRAINED = {  # as training/run.py writes it (values shortened)
    "format": "spanjudge-judge/1",
    "base_model": "@smollm2",
    "base_kind": "gguf",
    "max_length": 1536,
    "quantization": "none",
    "dtype": "float32",
    "chat_template_sha256": "ab",
    "judge_prompt_sha256": "cd",
    "prompt_template": None,
    "train_file": "/data/train.jsonl",
    "train_examples": 36,
    "train_inputs": {"rule": "nfkc-casefold-ws", "sha1": ["1f", "2e"]},
    "created": "2026-01-01T00:00:00+00:00",
    "versions": {"spanjudge": "0.1.0", "peft": "0.17"},
}


def _adapter(tmp_path: Path, metadata: object) -> Path:
    adapter = tmp_path / "adapter"
    adapter.mkdir(parents=True, exist_ok=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "org/peft-base"}))
    text = metadata if isinstance(metadata, str) else json.dumps(metadata)
    (adapter / "spanjudge.json").write_text(text)
    return adapter


def test_a_trained_adapters_metadata_reads_typed_and_copies_unchanged(tmp_path: Path) -> None:
    adapter = _adapter(tmp_path, {**TRAINED, "from_a_newer_version": [1, 2]})
    metadata = read_adapter_metadata(adapter)
    assert isinstance(metadata, AdapterMetadata)
    assert metadata.base_model == "@smollm2" and metadata.max_length == 1536
    assert metadata.train_inputs is not None and metadata.train_inputs.sha1 == ["1f", "2e"]
    # a copy (export's merge, publish) holds exactly the keys the file held, unknown ones too
    assert metadata.record() == {**TRAINED, "from_a_newer_version": [1, 2]}
    assert read_adapter_metadata(tmp_path) is None  # no spanjudge.json: not a spanjudge folder
    # every stage reads it through the same reader
    assert recorded_base(adapter) == "@smollm2"
    assert training_inputs(str(adapter)) == frozenset({"1f", "2e"})
    assert training_inputs(str(tmp_path)) == frozenset({"1f", "2e"})  # a run folder: its adapter/'s


def test_an_older_metadata_file_without_a_base_falls_back_to_peft(tmp_path: Path) -> None:
    """Every key is optional: a file without base_model is read, and the base is PEFT's record
    (the raw dict read raised KeyError here)."""
    adapter = _adapter(tmp_path, {"format": "spanjudge-judge/1"})
    assert recorded_base(adapter) == "org/peft-base"
    assert stored_template(adapter) is None


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ('{"max_length": "long"}', "max_length"),
        ('{"train_inputs": {"sha1": "1f"}}', "train_inputs.sha1"),
        ('["not", "an", "object"]', "not a JSON object; is this a spanjudge adapter folder?"),
        ('{"base_model": ', "cannot read JSON"),
    ],
)
def test_a_bad_metadata_file_is_one_message_naming_the_file(tmp_path: Path, content: str, expected: str) -> None:
    adapter = _adapter(tmp_path, content)
    for read in (read_adapter_metadata, recorded_base, stored_template):
        with pytest.raises(InputError) as caught:
            read(adapter)
        message = str(caught.value)
        assert "spanjudge.json" in message and expected in message, message
        assert len(message.splitlines()) == 1
    assert training_inputs(str(adapter)) is None  # meta-eval leaves the report to the judge's loading


def test_result_rows_accept_the_hand_written_spellings() -> None:
    row = ResultRow.parse({"dataset": " SummEval ", "metric": "spearman", "value": "0.3", "low": "0.1", "high": 0.5})
    assert row == ResultRow(dataset="SummEval", metric="spearman", value=0.3, ci_low=0.1, ci_high=0.5)
    row = ResultRow.parse({"dataset": "D", "coefficient": "kendall", "metric": "x", "value": 1, "n": "12.0"})
    assert row is not None and (row.metric, row.n) == ("kendall", 12)
    junk = ResultRow.parse({"dataset": "D", "value": 0.2, "ci_low": "n/a", "n": True})
    assert junk is not None and (junk.metric, junk.ci_low, junk.n) == ("value", None, None)
    for bad in ({"dataset": "D"}, {"value": 0.1}, {"dataset": "D", "value": math.inf}, {"dataset": ["D"], "value": 1}):
        assert ResultRow.parse(bad) is None, bad
    cell = MetaEvalCell(judge="j", dataset="d", aspect="a", coefficient="kendall", value=0.2, high=math.nan)
    assert cell.row() == ResultRow(dataset="d", metric="kendall", value=0.2, aspect="a", judge="j")
    assert MetaEvalCell(judge="j", dataset="d", aspect="a", coefficient="k", value=None).row() is None


def test_results_files_are_read_through_one_reader(tmp_path: Path) -> None:
    path = tmp_path / "rows.json"
    path.write_text(json.dumps({"correlations": [{"dataset": "D", "value": 0.4}, {"dataset": "E"}]}))
    results = read_eval_results(path)
    assert [(r.dataset, r.value) for r in results.rows] == [("D", 0.4)] and results.skipped == 1
    path.write_text(json.dumps({"judges": ["distilled:x"], "cells": [{"judge": "distilled:x", "dataset": "d"}]}))
    with pytest.raises(InputError) as caught:
        read_eval_results(path)
    assert "rows.json" in str(caught.value) and "cells[0].aspect" in str(caught.value)
