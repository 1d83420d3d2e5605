"""`spanjudge annotate` with `merge: {method: vote}`: the annotators' errors merged by vote, no supervisor call,
each kept error's votes and members in the record. Real SummEval data and the real pipeline; the annotators are
scripted stand-ins (tests/support/standin.py), so which spans overlap is known."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.annotate_runs import good_annotator, read_lines, run_annotation, write_configs
from support.standin import Reply

from spanjudge.core.errors import ConfigError
from spanjudge.data_gen.config import load_ensemble

pytestmark = pytest.mark.timeout(300)


def _records(out: Path) -> list[dict[str, Any]]:
    return read_lines(out / "train.jsonl") + read_lines(out / "validation.jsonl")


def _no_error(body: dict[str, Any]) -> Reply:
    return Reply(text="No Error\n\nOverall score: Excellent")


def test_two_of_three_annotators_marking_one_word_keep_it_with_their_votes(
    serve, tmp_path: Path, shared_data: Path
) -> None:
    _, url_a = serve(good_annotator("Fair", severity=2))
    _, url_b = serve(good_annotator("Fair", severity=4))
    _, url_c = serve(_no_error)
    urls = {"a": url_a, "b": url_b, "c": url_c}
    extra = {"annotators": [_role(n, u) for n, u in urls.items()], "merge": {"method": "vote", "min_votes": 2}}
    summary = run_annotation(tmp_path, {**urls, "sup": url_c}, shared_data, **extra)  # sup: left out by the vote
    assert summary.records == 3 and summary.unscored == 0
    assert set(summary.model_calls) == {"a", "b", "c"}  # no supervisor was asked
    for record in _records(tmp_path / "out"):
        (error,) = record["evaluation"]["errors"]
        output = next(iter(record["outputs"].values()))
        assert error["severity"] == 4  # the highest of the two
        assert output[error["start"] : error["end"]] == error["location"] == output.split()[0]
        assert record["provenance"]["merge"]["errors"] == [{"votes": 2, "members": ["a", "b"]}]
        assert record["provenance"]["merge"]["agreement"] == 0.0  # c calls it clean: no cluster has all three
        assert "supervisor" not in record["provenance"]


def test_a_word_one_annotator_marks_is_dropped_at_two_votes(serve, tmp_path: Path, shared_data: Path) -> None:
    _, url_a = serve(good_annotator("Fair"))
    _, url_b = serve(_no_error)
    summary = run_annotation(
        tmp_path, {"a": url_a, "b": url_b, "sup": url_b}, shared_data, merge={"method": "vote", "min_votes": 2}
    )
    assert summary.records == 3
    for record in _records(tmp_path / "out"):
        assert record["evaluation"]["errors"] == [] and record["provenance"]["merge"]["errors"] == []
        assert record["provenance"]["merge"]["agreement"] == 0.0


def test_the_ensemble_file_is_checked(tmp_path: Path) -> None:
    urls = {"a": "http://127.0.0.1:9/v1", "b": "http://127.0.0.1:9/v1", "sup": "http://127.0.0.1:9/v1"}
    path, _ = write_configs(tmp_path, urls, merge={"method": "vote", "min_votes": 3})
    with pytest.raises(ConfigError, match=r"min_votes \(3\) exceeds the 2 annotators"):
        load_ensemble(path)
    path, _ = write_configs(tmp_path, urls, merge={"method": "supervisor", "min_votes": 2})
    with pytest.raises(ConfigError, match="belong to merge method 'vote'"):
        load_ensemble(path)


def _role(name: str, url: str) -> dict[str, Any]:
    return {"name": name, "backend": {"kind": "openai", "model": name, "endpoints": [url], "retries": 0}}
