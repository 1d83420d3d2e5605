"""`spanjudge generate` end to end with the two tiny systems on real llama.cpp servers
(SmolLM2-135M-Instruct through chat, Gemma 3 270M - no chat template - through completions)
on 1 SummEval article and 1 TopicalChat context (the first of `sources_tiny.yaml`'s 10 each,
kept small for 2 cores): a run SIGKILLed mid-way that the same
command finishes without repeating a call or writing an output twice, a re-run that makes
no model call, and `spanjudge annotate` reading the generated files as they are."""

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

from spanjudge.inference.backends.llamacpp import LlamaCppServer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
SYSTEMS = REPO / "configs" / "generate" / "systems" / "tiny_local.yaml"
SOURCES = REPO / "configs" / "generate" / "sources_tiny.yaml"
MAX_TOKENS = 32  # long real inputs, short outputs: the prompts dominate the time on 2 cores
INPUTS = 1  # per source
JOBS = (INPUTS + INPUTS) * 2


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, timeout=600)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _generated(out: Path) -> list[dict]:
    """The run's generated outputs, both sources."""
    return _lines(out / "outputs" / "summeval.jsonl") + _lines(out / "outputs" / "topical_chat.jsonl")


def _cached_calls(cache: Path) -> int:
    if not cache.exists():
        return 0
    try:
        with sqlite3.connect(cache, timeout=5) as db:
            return int(db.execute("SELECT COUNT(*) FROM completions").fetchone()[0])
    except sqlite3.Error:
        return 0


@pytest.fixture(scope="module")
def generated(
    tmp_path_factory: pytest.TempPathFactory,
    smollm2_server: LlamaCppServer,
    gemma3_server: LlamaCppServer,
    shared_data: Path,
):
    """A run killed after half of its calls, then the same command again to the end."""
    tmp = tmp_path_factory.mktemp("generate")
    systems = yaml.safe_load(SYSTEMS.read_text())
    systems["sampling"]["max_tokens"] = MAX_TOKENS
    systems_path = tmp / "systems.yaml"
    systems_path.write_text(yaml.safe_dump(systems))
    sources = yaml.safe_load(SOURCES.read_text())
    sources["sources"] = [dict(source, limit_inputs=INPUTS) for source in sources["sources"]]
    sources_path = tmp / "sources.yaml"
    sources_path.write_text(yaml.safe_dump(sources))
    out = tmp / "out"
    command = [
        SPANJUDGE, "generate", "--systems", str(systems_path), "--sources", str(sources_path), "--out", str(out),
        "--data-dir", str(shared_data), "--endpoint", f"smollm2-135m={smollm2_server.base_url}",
        "--endpoint", f"gemma3-270m={gemma3_server.base_url}",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while _cached_calls(out / "cache.sqlite") < JOBS // 2 and time.monotonic() < deadline and process.poll() is None:
        time.sleep(0.1)
    assert process.poll() is None, "the run finished before it could be killed"
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    killed_with = _cached_calls(out / "cache.sqlite")
    assert killed_with >= JOBS // 2
    assert not (out / "outputs").exists() and not (out / "run.json").exists()  # nothing half-written
    started = time.monotonic()
    resumed = _run(*command)
    return command, out, resumed, killed_with, time.monotonic() - started


def test_killed_run_resumes_without_repeats_or_duplicates(generated) -> None:
    _, out, resumed, killed_with, _ = generated
    assert resumed.returncode == 0, resumed.stderr
    run = json.loads((out / "run.json").read_text())
    assert run["jobs"] == JOBS and run["incomplete"] == 0
    assert run["outputs"] + run["rejected"] == JOBS
    assert sum(run["cache_hits"].values()) >= killed_with  # the killed run's calls were reused ...
    assert sum(run["model_calls"].values()) == JOBS - sum(run["cache_hits"].values())  # ... and not made again
    assert _cached_calls(out / "cache.sqlite") == JOBS
    rows = _generated(out)
    rejected = _lines(out / "rejected.jsonl")
    keys = [(r["dataset"], r["input_id"], r["system"]) for r in rows + rejected]
    assert len(keys) == len(set(keys)) == JOBS  # every (input, system) exactly once
    for dataset in ("summeval", "topical_chat"):
        assert len({k[1] for k in keys if k[0] == dataset}) == INPUTS
    assert {r["system"] for r in rows} == {"smollm2-135m", "gemma3-270m"}


def test_outputs_carry_raw_text_and_provenance(generated) -> None:
    _, out, resumed, _, seconds = generated
    rows = _generated(out)
    assert len(rows) >= JOBS // 2  # tiny models, but mostly usable text
    for row in rows:
        provenance = row["provenance"]
        assert row["output"].strip() and row["raw_output"].strip()
        assert provenance["params"]["max_tokens"] == MAX_TOKENS and len(provenance["prompt_hash"]) == 16
        chat = row["system"] == "smollm2-135m"
        assert provenance["prompt_style"] == ("chat" if chat else "completion")
        assert provenance["model_id"] == ("openai:smollm2" if chat else "openai-completions:gemma3")
        expected = "news_summary" if row["dataset"] == "summeval" else "grounded_dialogue_response"
        assert provenance["template"] == expected
        if row["dataset"] == "topical_chat":
            assert set(row["inputs"]) == {"Dialogue history", "Knowledge"}
            assert "\n" not in row["output"]  # one line (the template's stop)
        if row["output"] != row["raw_output"].strip():
            assert provenance["postprocess"]  # what changed the raw text is said
    assert f"{JOBS} prompts" in resumed.stderr
    print(f"\nresumed generation of {JOBS} outputs took {seconds:.1f} s")


def test_rerun_makes_no_model_call(generated) -> None:
    command, out, _, _, _ = generated
    names = ("outputs/summeval.jsonl", "outputs/topical_chat.jsonl", "rejected.jsonl", "sources.yaml")
    before = {name: (out / name).read_text() for name in names}
    again = _run(*command)
    assert again.returncode == 0, again.stderr
    run = json.loads((out / "run.json").read_text())
    assert sum(run["model_calls"].values()) == 0 and sum(run["cache_hits"].values()) == JOBS
    assert "model calls 0" in again.stderr
    assert {name: (out / name).read_text() for name in names} == before


def test_annotate_reads_the_generated_outputs_directly(generated) -> None:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.config import load_sources
    from spanjudge.data_gen.pipeline import RunSummary, build_requests

    _, out, _, _, _ = generated
    generated_sources = out / "sources.yaml"
    run = json.loads((out / "run.json").read_text())
    # annotate's own reader takes every generated output as it is
    summary = RunSummary(out)
    requests = build_requests(load_sources(generated_sources), generated_sources, load_catalog(), None, summary)
    sampled = {(r.item.dataset, r.item.input_id, r.item.system) for r in requests}
    assert len(sampled) == run["outputs"] and not summary.skipped  # n_systems 2 of 2: every output is sampled

    # each request is the generated row as it was written: its inputs and its output, untouched
    generated_rows = {(r["dataset"], r["input_id"], r["system"]): r for r in _generated(out)}
    for request in requests:
        row = generated_rows[(request.item.dataset, request.item.input_id, request.item.system)]
        assert request.item.output == row["output"] and request.item.inputs == row["inputs"]
