"""`--judge teacher:NAME` (`eval.spans.teacher_judge`): a quintd-1 annotator's spans, or an import config's
merged teacher, judged against the human spans by `meta-eval --spans`, exactly as the import and the ensemble
study (`eval.spans.teachers`) read them. Real quintd-1 data; no model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from spanjudge.core.errors import InputError
from spanjudge.data_gen.teacher import load_import_config
from spanjudge.eval.judging.judges import make_judge
from spanjudge.eval.spans.evaluate import load_span_set
from spanjudge.eval.spans.metrics import evaluate_spans
from spanjudge.eval.spans.teachers import Teacher, teacher_predictions

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
VOTE = REPO / "configs/import/quintd1_vote_gpt4_twice.yaml"


def test_meta_eval_reads_a_member_and_a_vote_as_the_study_does(tmp_path: Path, shared_data: Path) -> None:
    out = tmp_path / "members"
    command = [SPANJUDGE, "meta-eval", "--spans", "quintd1:dev", "--judge", "teacher:llama3", "--judge",
               f"teacher:{VOTE}", "--out", str(out), "--data-dir", str(shared_data)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    results = json.loads((out / "spans.json").read_text())
    docs = load_span_set("quintd1:dev", [], shared_data, None, False).docs
    rule = load_import_config(VOTE).source.rule
    vote = load_import_config(VOTE).source
    for name, teacher in [
        ("teacher:llama3", Teacher("llama3", ("llama3",))),
        (f"teacher:{VOTE}", Teacher("vote", vote.annotators, vote.merge)),
    ]:
        expected = evaluate_spans(docs, teacher_predictions(teacher, rule, docs, shared_data))
        assert results[name]["overlap"] == expected["overlap"] and results[name]["token"] == expected["token"]
    assert results["teacher:llama3"]["unscored"] == 2  # two dev outputs Llama 3 left without a record


def test_an_unknown_teacher_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="neither a quintd-1 annotator"):
        make_judge("teacher:claude", out=tmp_path)


def test_agreement_levels_are_the_votes_of_the_stricter_merges(shared_data: Path) -> None:
    """Keeping every cluster of GPT-4's two samples, the spans with two votes are exactly the vote-of-two teacher's,
    and the AUC reads votes against "overlaps a human span"."""
    from spanjudge.data_gen.vote import MergeRule
    from spanjudge.eval.spans.teachers import agreement_signal

    docs = load_span_set("quintd1:dev", [], shared_data, None, False).docs
    rule = load_import_config(VOTE).source.rule
    members = ("gpt-4", "gpt-4-temperature-1")
    signal = agreement_signal(Teacher("k1", members, MergeRule(method="vote", min_votes=1)), rule, docs, shared_data)
    both = teacher_predictions(Teacher("k2", members, MergeRule(method="vote", min_votes=2)), rule, docs, shared_data)
    assert signal["by_votes"]["2"]["spans"] == sum(len(spans) for spans in both.values())
    assert signal["spans"] == signal["by_votes"]["1"]["spans"] + signal["by_votes"]["2"]["spans"]
    assert 0.5 < signal["auc"] < 1  # agreed spans overlap the humans' more often (0.60 on dev)
    # written most votes first, a span's place ranks it less well than its votes do (0.565 against 0.602 on dev)
    assert 0.5 < signal["auc_place_votes_first"] < signal["auc"]
