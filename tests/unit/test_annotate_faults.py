"""The annotation pipeline when models misbehave: unparseable, empty and truncated
replies, a server answering 500, a server that hangs, a malformed source line, an
oversized supervisor answer. Real SummEval data and the real pipeline, but the models are
scripted stand-ins (tests/support/standin.py): a real model cannot be made to fail on demand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.annotate_runs import good_annotator, output_word, read_lines, run_annotation, write_configs
from support.standin import Reply

pytestmark = pytest.mark.timeout(300)


def test_unparseable_reply_is_retried_with_light_sampling(serve, tmp_path: Path, shared_data: Path) -> None:
    def first_rambles(body: dict[str, Any]) -> Reply:
        if body["temperature"] == 0:
            return Reply(text="This summary is mostly fine, I would say.")
        return good_annotator("Fair")(body)

    a, url_a = serve(first_rambles)
    _, url_b = serve(good_annotator("Good"))
    _, url_sup = serve(good_annotator())
    summary = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert summary.records == 3 and summary.unscored == 0
    retries = [body for body in a.bodies if body["temperature"] != 0]
    assert len(retries) == 3 and all(b["top_p"] == 0.95 and b["seed"] == 1 for b in retries)
    record = (read_lines(tmp_path / "out" / "train.jsonl") + read_lines(tmp_path / "out" / "validation.jsonl"))[0]
    first = record["provenance"]["annotators"][0]
    assert first["label"] == "Fair" and len(first["raw_replies"]) == 2
    assert record["evaluation"]["score"] == 65  # mean of Fair (3) and Good (4) -> 62.5 -> 65


@pytest.mark.parametrize(
    "bad",
    [
        Reply(text="Error 1:\nLocation: the\nExplanation: The sentence is cut"),  # truncated mid-block
        Reply(text="Overall score: Good to Excellent"),
    ],
    ids=["truncated", "ambiguous"],  # an empty reply is a failed call: test_failed_calls.py
)
def test_replies_that_never_parse_are_unscored_with_their_reasons(
    serve, tmp_path: Path, shared_data: Path, bad: Reply
) -> None:
    _, url_a = serve([bad])
    _, url_b = serve([bad])
    sup, url_sup = serve(good_annotator())
    summary = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (summary.records, summary.unscored, summary.incomplete) == (0, 3, 0)
    assert sup.hits == 0  # nothing to merge without a parsed annotation
    for record in read_lines(tmp_path / "out" / "unscored.jsonl"):
        assert record["unscored_reason"] == "no annotator reply could be parsed"
        for annotator in record["provenance"]["annotators"]:
            assert annotator["parse_failure"] and len(annotator["raw_replies"]) == 3  # first try + 2 retries
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["parse_failure_rate"] == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize(
    ("broken", "cause"), [(Reply(status=500), "server error"), (Reply(delay=5), "timed out")], ids=["http-500", "hang"]
)
def test_a_failing_member_leaves_records_from_the_others_that_a_rerun_completes(
    serve, tmp_path: Path, shared_data: Path, broken: Reply, cause: str
) -> None:
    a, url_a = serve(good_annotator("Good"))
    b_broken, url_broken = serve([broken])
    _, url_sup = serve(good_annotator())
    first = run_annotation(tmp_path, {"a": url_a, "b": url_broken, "sup": url_sup}, shared_data)
    # one member never stops the ensemble: every item is merged from the annotator that answered
    assert (first.records, first.incomplete, first.partial) == (3, 0, 3)
    assert first.failed_calls == {"b": {cause: 3}}
    assert b_broken.hits == 3 * 2  # every request tried, and retried once
    records = read_lines(tmp_path / "out" / "train.jsonl") + read_lines(tmp_path / "out" / "validation.jsonl")
    for record in records:
        assert record["provenance"]["answered"] == ["a"]
        b = record["provenance"]["annotators"][1]
        assert b["status"] == cause and b["call_failure"].startswith(f"{cause}: ")
    failed = read_lines(tmp_path / "out" / "failed_calls.jsonl")
    assert sorted(r["id"] for r in failed) == sorted(r["id"] for r in records)
    assert {(r["role"], r["cause"]) for r in failed} == {("b", cause)}

    _, url_b = serve(good_annotator("Excellent"))
    again = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (again.records, again.incomplete, again.partial, again.failed_calls) == (3, 0, 0, {})
    assert again.model_calls["a"] == 0 and a.hits == 3  # a's answers came from the cache


def test_min_annotators_makes_an_item_without_enough_answers_incomplete(
    serve, tmp_path: Path, shared_data: Path
) -> None:
    _, url_a = serve(good_annotator("Good"))
    _, url_sup = serve(good_annotator())
    dead = "http://127.0.0.1:9/v1"
    urls = {"a": url_a, "b": dead, "sup": url_sup}
    summary = run_annotation(tmp_path, urls, shared_data, min_annotators=2)
    assert (summary.records, summary.incomplete) == (0, 3)
    [row, *_] = read_lines(tmp_path / "out" / "incomplete.jsonl")
    assert "1 annotators answered, not 2 (min_annotators)" in row["reason"] and "b: did not answer" in row["reason"]
    assert row["failed_calls"][0]["cause"] == "did not answer"  # only a server that cannot be reached

    summary = run_annotation(tmp_path, urls, shared_data, out="default")  # min_annotators 1, the default
    assert (summary.records, summary.incomplete) == (3, 0)
    record = read_lines(tmp_path / "default" / "train.jsonl")[0]
    assert record["evaluation"]["score"] == 75
    assert record["provenance"]["annotators"][1]["call_failure"].startswith("did not answer")


def test_supervisor_result_is_capped_at_eight_most_severe_errors(serve, tmp_path: Path, shared_data: Path) -> None:
    def ten_errors(body: dict[str, Any]) -> Reply:
        word = output_word(body)
        blocks = [f"Error {i}:\nLocation: {word}\nExplanation: issue {i}\nSeverity: {1 + i % 5}" for i in range(10)]
        return Reply(text="\n\n".join(blocks))

    _, url_a = serve(good_annotator("Poor", 4))
    _, url_b = serve(good_annotator("Poor", 3))
    _, url_sup = serve(ten_errors)
    run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    records = read_lines(tmp_path / "out" / "train.jsonl") + read_lines(tmp_path / "out" / "validation.jsonl")
    for record in records:
        errors = record["evaluation"]["errors"]
        assert len(errors) == 8
        assert sorted(e["severity"] for e in errors) == [2, 2, 3, 3, 4, 4, 5, 5]  # the two 1s are gone
        assert [e["explanation"] for e in errors] == sorted(
            (e["explanation"] for e in errors), key=lambda x: int(x[6:])
        )
        assert all(e["anchor"] is not None and e["aspect"] == record["aspect_name"] for e in errors)


def test_malformed_source_line_stops_with_one_message(serve, tmp_path: Path) -> None:
    stand_in, url = serve(good_annotator())
    ensemble, sources = write_configs(tmp_path, {"a": url, "b": url, "sup": url})
    data = tmp_path / "data.jsonl"
    good = {"doc_id": "d1", "system_id": "M1", "source": "The match ended 2-2.", "system_output": "A draw."}
    data.write_text(json.dumps(good) + "\n" + '{"doc_id": "d2", "system_id": \n')
    config = yaml.safe_load(sources.read_text())
    config["sources"][0]["path"] = str(data)
    sources.write_text(yaml.safe_dump(config))
    spanjudge = str(Path(sys.executable).with_name("spanjudge"))
    out = tmp_path / "out"
    result = subprocess.run(
        [spanjudge, "annotate", "--ensemble", str(ensemble), "--sources", str(sources), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "data.jsonl:2: not valid JSON" in lines[0]
    assert stand_in.hits == 0 and not (out / "train.jsonl").exists()


@pytest.mark.parametrize(
    ("supervisor", "status"),
    [(Reply(status=500), "server error"), (Reply(text="I would merge them, but I will not."), "unparsable")],
    ids=["its-call-fails", "its-reply-does-not-parse"],
)
def test_a_failing_supervisor_keeps_the_annotators_errors_merged_by_a_fixed_rule(
    serve, tmp_path: Path, shared_data: Path, supervisor: Reply, status: str
) -> None:
    from spanjudge.data_gen.aggregate import UNION_RULE

    _, url_a = serve(good_annotator("Good", severity=2))
    _, url_b = serve(good_annotator("Fair", severity=4))
    _, url_sup = serve([supervisor])
    summary = run_annotation(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (summary.records, summary.unscored, summary.incomplete) == (3, 0, 0)
    assert summary.failed_calls == ({"sup": {"server error": 3}} if status == "server error" else {})
    for record in read_lines(tmp_path / "out" / "train.jsonl") + read_lines(tmp_path / "out" / "validation.jsonl"):
        merged = record["provenance"]["supervisor"]
        assert merged["status"] == status and merged["merged_without_it"] == UNION_RULE
        # both annotators marked the same word: one error, the more severe one's
        [error] = record["evaluation"]["errors"]
        assert error["severity"] == 4 and error["location"] == record["outputs"]["Summary"].split()[0]
