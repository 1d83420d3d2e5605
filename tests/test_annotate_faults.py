"""The annotation pipeline when models misbehave: unparseable, empty and truncated
replies, a server answering 500, a server that hangs, a malformed source line, an
oversized supervisor answer. Real SummEval data and the real pipeline, but the models are
scripted stand-ins (tests/standin.py): a real model cannot be made to fail on demand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from standin import Reply

from spanjudge.data_gen.config import load_ensemble, load_sources
from spanjudge.data_gen.pipeline import run_pipeline
from spanjudge.inference.catalog import load_catalog

pytestmark = pytest.mark.timeout(300)

GOOD = (
    "Error 1:\nLocation: {loc}\nExplanation: Not supported by the article.\nSeverity: {sev}\n\nOverall score: {label}"
)


def _prompt(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"] if "messages" in body else body["prompt"]


def _output_word(body: dict[str, Any]) -> str:
    """A word of the evaluated summary, taken from the fenced output in the prompt."""
    prompt = _prompt(body)
    marker = "### Summary\n```\n" if "### Summary" in prompt else "### Model output\n```\n"
    return prompt.split(marker, 1)[1].split()[0]


def good_annotator(label: str = "Good", severity: int = 2):
    def reply(body: dict[str, Any]) -> Reply:
        return Reply(text=GOOD.format(loc=_output_word(body), sev=severity, label=label))

    return reply


def _write_configs(tmp_path: Path, urls: dict[str, str], inputs: int = 3, **ensemble_extra: Any) -> tuple[Path, Path]:
    def role(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "backend": {"kind": "openai", "model": name, "endpoints": [urls[name]], "retries": 1, "backoff_s": 0.01,
                        "timeout_s": 2, "max_consecutive_failures": 50},
        }  # fmt: skip

    ensemble = {
        "name": "stand-ins",
        "annotators": [role("a"), role("b")],
        "supervisor": role("sup"),
        "sampling": {"max_tokens": 64},
        "supervisor_sampling": {"max_tokens": 64},
        **ensemble_extra,
    }
    sources = {
        "seed": 0,
        "n_systems": 1,
        "n_aspects": 1,
        "sources": [
            {"name": "summeval", "format": "summeval", "path": "$DATA/meta_eval/summeval/summeval.jsonl",
             "task": "summeval", "limit_inputs": inputs}
        ],
    }  # fmt: skip
    ensemble_path, sources_path = tmp_path / "ensemble.yaml", tmp_path / "sources.yaml"
    ensemble_path.write_text(yaml.safe_dump(ensemble))
    sources_path.write_text(yaml.safe_dump(sources))
    return ensemble_path, sources_path


def _run(tmp_path: Path, urls: dict[str, str], shared_data: Path, out: str = "out", **extra: Any):
    ensemble_path, sources_path = _write_configs(tmp_path, urls, **extra)
    return run_pipeline(
        load_ensemble(ensemble_path),
        load_sources(sources_path),
        sources_path,
        tmp_path / out,
        load_catalog(),
        data_root=shared_data,
    )


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_unparseable_reply_is_retried_with_light_sampling(serve, tmp_path: Path, shared_data: Path) -> None:
    def first_rambles(body: dict[str, Any]) -> Reply:
        if body["temperature"] == 0:
            return Reply(text="This summary is mostly fine, I would say.")
        return good_annotator("Fair")(body)

    a, url_a = serve(first_rambles)
    _, url_b = serve(good_annotator("Good"))
    _, url_sup = serve(good_annotator())
    summary = _run(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert summary.records == 3 and summary.unscored == 0
    retries = [body for body in a.bodies if body["temperature"] != 0]
    assert len(retries) == 3 and all(b["top_p"] == 0.95 and b["seed"] == 1 for b in retries)
    record = (_lines(tmp_path / "out" / "train.jsonl") + _lines(tmp_path / "out" / "validation.jsonl"))[0]
    first = record["provenance"]["annotators"][0]
    assert first["label"] == "Fair" and len(first["raw_replies"]) == 2
    assert record["evaluation"]["score"] == 65  # mean of Fair (3) and Good (4) -> 62.5 -> 65


@pytest.mark.parametrize(
    "bad",
    [
        Reply(text="Error 1:\nLocation: the\nExplanation: The sentence is cut"),  # truncated mid-block
        Reply(text="Overall score: Good to Excellent"),
    ],
    ids=["truncated", "ambiguous"],  # an empty reply is a failed call: test_faults_second_run.py
)
def test_replies_that_never_parse_are_unscored_with_their_reasons(
    serve, tmp_path: Path, shared_data: Path, bad: Reply
) -> None:
    _, url_a = serve([bad])
    _, url_b = serve([bad])
    sup, url_sup = serve(good_annotator())
    summary = _run(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (summary.records, summary.unscored, summary.incomplete) == (0, 3, 0)
    assert sup.hits == 0  # nothing to merge without a parsed annotation
    for record in _lines(tmp_path / "out" / "unscored.jsonl"):
        assert record["unscored_reason"] == "no annotator reply could be parsed"
        for annotator in record["provenance"]["annotators"]:
            assert annotator["parse_failure"] and len(annotator["raw_replies"]) == 3  # first try + 2 retries
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["parse_failure_rate"] == {"a": 1.0, "b": 1.0}


@pytest.mark.parametrize("broken", [Reply(status=500), Reply(delay=5)], ids=["http-500", "hang-past-timeout"])
def test_failing_server_leaves_incomplete_requests_that_a_rerun_finishes(
    serve, tmp_path: Path, shared_data: Path, broken: Reply
) -> None:
    a, url_a = serve(good_annotator("Good"))
    b_broken, url_broken = serve([broken])
    _, url_sup = serve(good_annotator())
    first = _run(tmp_path, {"a": url_a, "b": url_broken, "sup": url_sup}, shared_data)
    assert (first.records, first.incomplete) == (0, 3)
    assert b_broken.hits == 3 * 2  # every request tried, and retried once
    reasons = [r["reason"] for r in _lines(tmp_path / "out" / "incomplete.jsonl")]
    assert all(("server" in r or "timeout" in r) and "b:" in r for r in reasons)

    _, url_b = serve(good_annotator("Excellent"))
    again = _run(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    assert (again.records, again.incomplete) == (3, 0)
    assert again.model_calls["a"] == 0 and a.hits == 3  # a's answers came from the cache


def test_min_annotators_lets_a_run_finish_without_a_dead_model(serve, tmp_path: Path, shared_data: Path) -> None:
    _, url_a = serve(good_annotator("Good"))
    _, url_sup = serve(good_annotator())
    dead = "http://127.0.0.1:9/v1"
    summary = _run(tmp_path, {"a": url_a, "b": dead, "sup": url_sup}, shared_data, min_annotators=1)
    assert (summary.records, summary.incomplete) == (3, 0)
    record = _lines(tmp_path / "out" / "train.jsonl")[0]
    assert record["evaluation"]["score"] == 75
    assert record["provenance"]["annotators"][1]["call_failure"].startswith("connection")


def test_supervisor_result_is_capped_at_eight_most_severe_errors(serve, tmp_path: Path, shared_data: Path) -> None:
    def ten_errors(body: dict[str, Any]) -> Reply:
        word = _output_word(body)
        blocks = [f"Error {i}:\nLocation: {word}\nExplanation: issue {i}\nSeverity: {1 + i % 5}" for i in range(10)]
        return Reply(text="\n\n".join(blocks))

    _, url_a = serve(good_annotator("Poor", 4))
    _, url_b = serve(good_annotator("Poor", 3))
    _, url_sup = serve(ten_errors)
    _run(tmp_path, {"a": url_a, "b": url_b, "sup": url_sup}, shared_data)
    records = _lines(tmp_path / "out" / "train.jsonl") + _lines(tmp_path / "out" / "validation.jsonl")
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
    ensemble, sources = _write_configs(tmp_path, {"a": url, "b": url, "sup": url})
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
