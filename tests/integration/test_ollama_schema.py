"""Constrained judging on Ollama: the contract's JSON form as the request's JSON schema (Ollama's
`format`), each reply rendered back to the text evaluation. Checked against a scripted stand-in of
Ollama's native API (no Ollama server can be installed here); the schema is checked with the
`jsonschema` validator, and a real server holding a model to it is measured in
bench/constrained_forms.py (llama.cpp's server standing in for Ollama)."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given
from hypothesis import strategies as st
from support.standin import Reply

from spanjudge.inference.backends import BackendSpec
from spanjudge.inference.contract import ErrorAnnotation, Evaluation, parse_judge, render_judge
from spanjudge.inference.contract.grammar import LINE_MAX_CHARS, errors_within
from spanjudge.inference.contract.json_form import json_reply_to_text, judge_json_schema
from spanjudge.inference.judge import Judge

SCHEMA = judge_json_schema()
OUTPUT = "The Bruins won 3-1 at home."
_LINE = st.text(st.characters(exclude_categories=("Cs", "Cc", "Zl", "Zp")), min_size=1, max_size=LINE_MAX_CHARS)
# by design of the parser (as tests/unit/test_contract.py's round trip states it): a value wrapped in markdown bold
# loses the bold, at either end, and `<...>` is read as an echoed template placeholder
_LINE = _LINE.map(str.strip).filter(lambda t: bool(t) and t[0] not in "<*_" and not t.endswith(("**", "__")))
# A location the contract reads as "no location" ("none", ".", "n/a") becomes None, which JSON cannot carry as a line;
# one quoted as a whole ('0', "x" -- a comment) is read as a model quoting its span, and loses its quotes: neither
# is a text the contract writes back as it came, so neither can round-trip.


def _round_trips(location: str) -> bool:
    error = ErrorAnnotation(location=location, explanation="e", severity=1)
    if error.location is None:
        return False
    [read] = parse_judge(render_judge(Evaluation(errors=[error], score=0))).errors
    return read.location == location


_LOCATION = _LINE.filter(_round_trips)


def as_json(evaluation: Evaluation) -> str:
    errors = [{"location": e.location, "explanation": e.explanation, "severity": e.severity} for e in evaluation.errors]
    return json.dumps({"errors": errors, "score": int(evaluation.score or 0)})


@given(
    errors=st.lists(st.builds(ErrorAnnotation, location=_LOCATION, explanation=_LINE, severity=st.integers(1, 5)),
                    max_size=8),
    score=st.integers(0, 100),
)  # fmt: skip
def test_a_json_reply_the_schema_accepts_renders_to_the_same_text_evaluation(
    errors: list[ErrorAnnotation], score: int
) -> None:
    evaluation = Evaluation(errors=errors, score=score)
    reply = as_json(evaluation)
    jsonschema.validate(json.loads(reply), SCHEMA)
    text = json_reply_to_text(reply)
    assert text == render_judge(evaluation)
    assert parse_judge(text) == evaluation


REFUSED = [
    {"errors": [], "score": 101},  # out of the contract's bounds
    {"errors": [{"location": "x", "explanation": "y", "severity": 9}], "score": 50},
    {"errors": [], "score": 50.5},  # the contract's written score is an integer
    {"errors": [{"location": "x", "severity": 2}], "score": 50},  # no explanation
]


@pytest.mark.parametrize("reply", [*(json.dumps(r) for r in REFUSED), '{"errors": [], "score": 5', "No Error"])
def test_a_reply_outside_the_schema_is_never_mended(reply: str) -> None:
    assert json_reply_to_text(reply) == reply  # parsed as it stands: a parse failure, or the text form
    if reply.endswith("}"):
        with pytest.raises(jsonschema.ValidationError):  # and the schema refuses it too
            jsonschema.validate(json.loads(reply), SCHEMA)


def test_the_schema_caps_the_errors_like_the_grammar() -> None:
    assert SCHEMA["properties"]["errors"]["maxItems"] == 8
    assert judge_json_schema(max_errors=2)["properties"]["errors"]["maxItems"] == 2
    line = SCHEMA["properties"]["errors"]["items"]["properties"]["location"]
    assert line == {"type": "string", "minLength": 1} and SCHEMA["properties"]["score"]["enum"] == list(range(101))
    bounded = judge_json_schema(line_max_chars=LINE_MAX_CHARS)["properties"]["errors"]["items"]["properties"]
    assert bounded["explanation"]["maxLength"] == LINE_MAX_CHARS
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"errors": [{"location": "a", "explanation": "b", "severity": 1}] * 9, "score": 1}, SCHEMA)


def _judge(url: str, **options: Any) -> Judge:
    return Judge.from_pretrained("judge", engine="ollama", base_url=url, served_model="judge", **options)


def _one(judge: Judge) -> Any:
    try:
        [result] = judge.score([judge.request("qags_xsum", "factual consistency", {"Article": "They lost."}, OUTPUT)])
    finally:
        judge.close()
    return result


def test_the_ollama_engine_sends_the_schema_and_reads_the_json_reply(serve) -> None:
    reply = json.dumps({"errors": [{"location": "won 3-1", "explanation": "They lost.", "severity": 4}], "score": 20})
    stand_in, url = serve([Reply(text=reply)], ollama=True)
    result = _one(_judge(url, constrained=True, max_new_tokens=320, retries=0))
    body = stand_in.bodies[-1]
    assert stand_in.paths[-1] == "/api/chat" and body["model"] == "judge"
    assert body["format"] == judge_json_schema(max_errors=errors_within(320))  # the token budget caps the errors
    assert body["options"]["temperature"] == 0 and body["options"]["num_predict"] == 320
    assert result.score == 20 and result.raw_replies == [reply]  # the server's reply is kept as sent
    [error] = result.errors
    assert OUTPUT[error.start : error.end] == "won 3-1" and error.severity == 4


def test_unconstrained_ollama_judging_sends_no_schema_and_reads_text(serve) -> None:
    stand_in, url = serve([Reply(text="No Error\n\nOverall score: 90")], ollama=True)
    result = _one(_judge(url, retries=0))
    assert "format" not in stand_in.bodies[-1] or stand_in.bodies[-1]["format"] is None
    assert result.score == 90 and result.errors == []


def test_a_json_reply_the_contract_refuses_is_retried_then_unscored(serve) -> None:
    bad = json.dumps({"errors": [], "score": 250})  # a server that ignored the schema's bounds
    stand_in, url = serve([Reply(text=bad)], ollama=True)
    result = _one(_judge(url, constrained=True, retries=1))
    assert stand_in.hits == 2 and result.score is None and "no parseable reply in 2 tries" in result.unscored_reason


def test_the_schema_is_part_of_the_model_identity() -> None:
    plain = BackendSpec(kind="ollama", model="judge")
    constrained = BackendSpec(kind="ollama", model="judge", options={"format": SCHEMA})
    assert plain.model_id == "ollama:judge" and constrained.model_id.startswith("ollama:judge#")


def test_score_cli_on_ollama_with_constrained(serve, tmp_path) -> None:
    from spanjudge.app.cli import main as cli_main

    reply = json.dumps({"errors": [], "score": 85})
    stand_in, url = serve([Reply(text=reply)], ollama=True)
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "They lost.", "summary": OUTPUT}) + "\n")
    out = tmp_path / "scores.jsonl"
    args = ["score", "--model", "judge", "--data", str(data), "--task", "qags_xsum", "--aspect", "factual consistency",
            "--input", "Article=article", "--output-field", "summary", "--engine", "ollama", "--base-url", url,
            "--max-new-tokens", "320", "--constrained", "--out", str(out)]  # fmt: skip
    assert cli_main(args) == 0
    assert stand_in.bodies[-1]["format"] == judge_json_schema(max_errors=errors_within(320))
    row = json.loads(out.read_text())
    assert row["evaluation"] == {"errors": [], "score": 85} and row["raw_replies"] == [reply]
