"""`spanjudge annotate` end to end on real SFRES data with the tiny ensemble on real
llama.cpp servers (SmolLM2-135M-Instruct and Gemma 3 270M on 127.0.0.1): the files it
builds, a re-run that makes no model call, and runs killed mid-way (the annotate process,
or a model server) that a re-run finishes with exactly the expected records."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.standin import Reply

from spanjudge.inference.backends.llamacpp import LlamaCppServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1500)]

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
ENSEMBLE = REPO / "configs" / "ensemble" / "tiny_local.yaml"


def _sources(tmp_path: Path, inputs: int) -> Path:
    """SFRES's first `inputs` inputs (a restaurant's dialogue act, one system's sentence): the shortest prompts of
    the real sets, so that each call of the 2-core budget goes to the pipeline, not to reading a long article
    (SummEval's, as in the demo's sources/summeval_tiny.yaml, made each call several times as long)."""
    source = {"name": "sfres", "format": "openlgauge", "path": "$DATA/meta_eval/sfres_sfhot/openlgauge_sfres.json",
              "task": "sfres", "system": "sfres-rnnlg", "limit_inputs": inputs}  # fmt: skip
    path = tmp_path / f"sources_{inputs}.yaml"
    path.write_text(yaml.safe_dump({"seed": 0, "n_systems": 1, "n_aspects": 1, "sources": [source]}))
    return path


def _command(out: Path, sources: Path, smollm2: str, gemma3: str) -> list[str]:
    return [
        SPANJUDGE, "annotate", "--ensemble", str(ENSEMBLE), "--sources", str(sources), "--out", str(out),
        "--endpoint", f"smollm2={smollm2}", "--endpoint", f"smollm2-supervisor={smollm2}",
        "--endpoint", f"gemma3={gemma3}",
        "--allow-overlap",  # SFRES is a meta-evaluation set: kept here, where the pipeline is under test
    ]  # fmt: skip


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=1200)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _ids(out: Path) -> list[str]:
    return [r["id"] for name in ("train", "validation", "unscored") for r in _lines(out / f"{name}.jsonl")]


def _cached_calls(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM completions").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.fixture(scope="module")
def full_run(tmp_path_factory: pytest.TempPathFactory, smollm2_server: LlamaCppServer, gemma3_server: LlamaCppServer):
    tmp = tmp_path_factory.mktemp("annotate")
    sources = _sources(tmp, 2)  # 2 inputs x (2 annotators + supervisor): the whole pipeline, on a 2-core budget
    out = tmp / "out"
    command = _command(out, sources, smollm2_server.base_url, gemma3_server.base_url)
    first = _run(*command)
    return command, out, first


def test_annotate_builds_the_dataset(full_run) -> None:
    _, out, first = full_run
    assert first.returncode == 0, first.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["requests"] == 2 and run["incomplete"] == 0
    assert run["records"] + run["unscored"] == 2
    train, validation = _lines(out / "train.jsonl"), _lines(out / "validation.jsonl")
    assert len(train) + len(validation) == run["records"] > 0
    assert {r["input_id"] for r in train}.isdisjoint({r["input_id"] for r in validation})
    for record in train + validation:
        assert record["evaluation"]["score"] % 5 == 0 and 0 <= record["evaluation"]["score"] <= 100
        assert len(record["evaluation"]["errors"]) <= 8
        assert [a["name"] for a in record["provenance"]["annotators"]] == ["smollm2", "gemma3"]
        assert all(a["raw_replies"] for a in record["provenance"]["annotators"])
        for error in record["evaluation"]["errors"]:
            if error["start"] is not None:
                [output] = record["outputs"].values()
                assert 0 <= error["start"] < error["end"] <= len(output)
    for record in _lines(out / "unscored.jsonl"):
        assert record["unscored_reason"] and "evaluation" not in record
    import datasets

    dataset = datasets.load_from_disk(str(out / "hf_dataset"))
    assert sum(len(split) for split in dataset.values()) == run["records"]
    stats = json.loads((out / "stats.json").read_text())
    assert set(stats["parse_failure_rate"]) == {"smollm2", "gemma3"}
    assert (out / "score_histogram.png").stat().st_size > 1000 and "Table 3.3" in (out / "stats.md").read_text()


def test_second_run_makes_no_model_call(full_run) -> None:
    command, out, _ = full_run
    before = {name: (out / name).read_text() for name in ("train.jsonl", "validation.jsonl", "unscored.jsonl")}
    again = _run(*command)
    assert again.returncode == 0, again.stderr
    run = json.loads((out / "run.json").read_text())
    assert sum(run["model_calls"].values()) == 0 and sum(run["cache_hits"].values()) > 0
    assert "model calls 0" in again.stderr
    assert {name: (out / name).read_text() for name in before} == before


def _expected_ids(sources: Path, shared_data: Path) -> list[str]:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.config import load_sources
    from spanjudge.data_gen.pipeline import RunSummary, build_requests

    requests = build_requests(load_sources(sources), sources, load_catalog(), shared_data, RunSummary(Path(".")))
    return sorted(r.id for r in requests)


def test_killed_annotate_process_resumes_without_loss_or_duplicates(
    tmp_path: Path, smollm2_server: LlamaCppServer, gemma3_server: LlamaCppServer, shared_data: Path
) -> None:
    sources = _sources(tmp_path, 1)  # 1 input: killed after its first annotator's call, before the second's
    out = tmp_path / "killed"
    command = _command(out, sources, smollm2_server.base_url, gemma3_server.base_url)
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    while _cached_calls(out / "cache.sqlite") < 1 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert process.poll() is None, "the run finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    assert not (out / "train.jsonl").exists()  # nothing half-written
    resumed = _run(*command)
    assert resumed.returncode == 0, resumed.stderr
    ids = _ids(out)
    assert len(ids) == len(set(ids))  # no duplicates
    assert sorted(ids) == _expected_ids(sources, shared_data)  # nothing lost
    run = json.loads((out / "run.json").read_text())
    assert sum(run["cache_hits"].values()) >= 1  # the killed run's answer was reused


def test_a_dead_server_leaves_records_from_the_others_that_a_rerun_completes(
    tmp_path: Path, smollm2_server: LlamaCppServer, gemma3_path: Path, shared_data: Path
) -> None:
    sources = _sources(tmp_path, 1)  # 1 input: SmolLM2 answers, Gemma's server is gone
    out = tmp_path / "dead"
    gemma = LlamaCppServer(gemma3_path, alias="gemma3", n_ctx=4096, n_threads=1).start()
    command = _command(out, sources, smollm2_server.base_url, gemma.base_url)
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    gemma.stop()  # the model server dies mid-run
    _, stderr = process.communicate(timeout=900)
    # one member never stops the ensemble: the item is merged from SmolLM2's answer, and the run says what failed
    assert process.returncode == 0, stderr
    first = json.loads((out / "run.json").read_text())
    assert (first["incomplete"], first["partial"]) == (0, first["records"]) and first["records"] >= 1
    assert list(first["failed_calls"]) == ["gemma3"], first["failed_calls"]
    assert "model calls failed (gemma3 " in stderr and "a re-run asks the failed calls again" in stderr
    [failure, *_] = _lines(out / "failed_calls.jsonl")
    assert failure["role"] == "gemma3" and failure["cause"] in ("did not answer", "crashed", "not sent")

    with LlamaCppServer(gemma3_path, alias="gemma3", n_ctx=4096, n_threads=1) as revived:
        resumed = _run(*_command(out, sources, smollm2_server.base_url, revived.base_url))
    assert resumed.returncode == 0, resumed.stderr
    run = json.loads((out / "run.json").read_text())
    assert (run["incomplete"], run["partial"], run["failed_calls"]) == (0, 0, {})
    ids = _ids(out)
    assert len(ids) == len(set(ids)) and sorted(ids) == _expected_ids(sources, shared_data)
    assert run["model_calls"]["smollm2"] == 0  # only what failed is asked again


def test_a_member_that_truncates_and_one_that_fails_never_stop_a_real_ensemble(
    tmp_path: Path, smollm2_server: LlamaCppServer, serve, shared_data: Path
) -> None:
    """Three annotators: SmolLM2 on a real llama.cpp server, a stand-in whose every reply runs past max_tokens, and
    a stand-in that answers HTTP 500; SmolLM2 also merges. The run finishes (exit 0), each item is made from
    SmolLM2's answer, the cut-off member was asked once more with twice the room, and every failed call is
    named by its cause, in the records, in failed_calls.jsonl and on the terminal."""
    from support.annotate_runs import good_annotator

    answer = good_annotator("Fair")
    truncating, cut_url = serve(lambda body: Reply(text=answer(body).text, finish_reason="length"))
    failing, fail_url = serve([Reply(status=500)])
    config = yaml.safe_load(ENSEMBLE.read_text())
    smollm2 = config["annotators"][0]
    config["annotators"] = [
        smollm2,
        {"name": "cutoff", "backend": {"kind": "openai", "model": "cutoff", "endpoints": [cut_url], "retries": 0}},
        {"name": "broken", "backend": {"kind": "openai", "model": "broken", "endpoints": [fail_url], "retries": 0}},
    ]
    ensemble = tmp_path / "three.yaml"
    ensemble.write_text(yaml.safe_dump(config))
    out = tmp_path / "three"
    command = [
        SPANJUDGE, "annotate", "--ensemble", str(ensemble), "--sources", str(_sources(tmp_path, 1)), "--out", str(out),
        "--endpoint", f"smollm2={smollm2_server.base_url}",
        "--endpoint", f"smollm2-supervisor={smollm2_server.base_url}", "--allow-overlap",
    ]  # fmt: skip
    done = _run(*command)
    assert done.returncode == 0, done.stderr
    run = json.loads((out / "run.json").read_text())
    items = run["requests"]
    assert run["failed_calls"] == {"cutoff": {"truncated": items}, "broken": {"server error": items}}
    assert run["incomplete"] == 0 and run["records"] + run["unscored"] == items
    assert "cutoff truncated ×1" in done.stderr and "broken server error ×1" in done.stderr
    max_tokens = config["sampling"]["max_tokens"]
    assert [body["max_tokens"] for body in truncating.bodies] == [max_tokens, 2 * max_tokens] * items
    assert failing.hits == items
    for record in _lines(out / "train.jsonl") + _lines(out / "validation.jsonl") + _lines(out / "unscored.jsonl"):
        annotators = {a["name"]: a for a in record["provenance"]["annotators"]}
        assert annotators["cutoff"]["status"] == "truncated"
        assert annotators["cutoff"]["asked_again_with_max_tokens"] == 2 * max_tokens
        assert annotators["broken"]["status"] == "server error"
        assert record["provenance"].get("answered", ["smollm2"]) in (["smollm2"], [])
    causes = {(row["role"], row["cause"]) for row in _lines(out / "failed_calls.jsonl")}
    assert causes == {("cutoff", "truncated"), ("broken", "server error")}


def test_three_annotators_merged_by_vote(full_run, serve, smollm2_server: LlamaCppServer, gemma3_server) -> None:
    """The tiny ensemble (its real replies, from the first run's cache: no model is asked again) plus a third
    member that marks each output's first word, merged by vote (`merge: {method: vote}`, every cluster kept:
    models this small rarely mark the same words): no supervisor is asked, and every record's errors are the
    clusters of its annotators' placed errors, each with its votes and members, the highest severity and the
    majority's characters."""
    from support.annotate_runs import good_annotator

    from spanjudge.data_gen.vote import MergeRule, Vote, vote_merge
    from spanjudge.inference.contract import ErrorAnnotation, anchor_errors

    first_command, first_out, _ = full_run
    quoter, quoter_url = serve(good_annotator("Fair", severity=3))
    config = yaml.safe_load(ENSEMBLE.read_text())
    third = {"name": "quoter", "backend": {"kind": "openai", "model": "quoter", "endpoints": [quoter_url]}}
    rule = {"method": "vote", "min_votes": 1, "extent": "majority"}
    config.update(annotators=[*config["annotators"], third], merge=rule)
    del config["supervisor"]
    ensemble = first_out.parent / "vote.yaml"
    ensemble.write_text(yaml.safe_dump(config))
    out = first_out.parent / "vote"
    sources = first_command[first_command.index("--sources") + 1]
    command = [
        SPANJUDGE, "annotate", "--ensemble", str(ensemble), "--sources", sources, "--out", str(out),
        "--cache", str(first_out / "cache.sqlite"), "--endpoint", f"smollm2={smollm2_server.base_url}",
        "--endpoint", f"gemma3={gemma3_server.base_url}", "--allow-overlap",
    ]  # fmt: skip
    done = _run(*command)
    assert done.returncode == 0, done.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["model_calls"] == {"smollm2": 0, "gemma3": 0, "quoter": run["requests"]} == {**run["model_calls"]}
    records = _lines(out / "train.jsonl") + _lines(out / "validation.jsonl")
    assert records and len(records) == run["records"]
    for record in records:
        output = next(iter(record["outputs"].values()))
        by_name = {a["name"]: a for a in record["provenance"]["annotators"]}
        votes = [
            Vote(name, e.start, e.end, e.severity, e.explanation, e.location)
            for name in record["provenance"]["answered"]
            for e in anchor_errors([ErrorAnnotation(**e) for e in by_name[name]["errors"]], output)
        ]
        expected = vote_merge(votes, MergeRule(**rule))
        found = record["provenance"]["merge"]["errors"]
        assert found == [{"votes": m.votes, "members": list(m.members)} for m in expected]
        assert [(e["start"], e["end"], e["severity"]) for e in record["evaluation"]["errors"]] == [
            (m.start, m.end, m.severity) for m in expected
        ]
        assert any("quoter" in entry["members"] for entry in found)  # its first word is always placed
        assert "supervisor" not in record["provenance"]
    assert quoter.hits == run["requests"]
