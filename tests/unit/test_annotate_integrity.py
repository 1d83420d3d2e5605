"""`spanjudge annotate` keeps every row and one run per folder (issue #19 items 7, 9, 15):
rows sharing an input id or lacking a system field are annotated or listed with their reason,
a second run on a busy folder is refused naming the holder, and a padded reply never reaches
train.jsonl. The real pipeline; the models are scripted stand-ins on 127.0.0.1 (tests/support/standin.py)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.annotate_runs import GOOD, good_annotator, output_word
from support.standin import Reply

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.data_gen.config import SourceSpec, load_ensemble, load_sources
from spanjudge.data_gen.folder_lock import FolderBusy
from spanjudge.data_gen.pipeline import run_pipeline
from spanjudge.data_gen.source_run import SourceRun
from spanjudge.data_gen.sources import read_source

pytestmark = pytest.mark.timeout(300)

ARTICLE_A = "The council approved the new bridge on Monday after a two-year debate."
ARTICLE_B = "A storm closed the harbour for three days and fishing boats stayed in port."


def write_source(path: Path, rows: list[dict[str, str]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def source_spec(path: Path, **fields: str) -> dict[str, Any]:
    mapping = {"output": "summary", "inputs": {"Article": "article"}, **fields}
    return {"name": "mine", "format": "jsonl", "path": str(path), "task": "summeval", "fields": mapping}


def write_configs(
    tmp_path: Path, urls: dict[str, str], source: dict[str, Any], *, timeout_s: float = 2, **ensemble_extra: Any
) -> tuple[Path, Path]:
    def role(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "backend": {"kind": "openai", "model": name, "endpoints": [urls[name]], "retries": 1, "backoff_s": 0.01,
                        "timeout_s": timeout_s, "max_consecutive_failures": 50},
        }  # fmt: skip

    ensemble = {
        "name": "stand-ins",
        "annotators": [role("a"), role("b")],
        "supervisor": role("sup"),
        "sampling": {"max_tokens": 64},
        "supervisor_sampling": {"max_tokens": 64},
        **ensemble_extra,
    }
    sources = {"seed": 0, "n_systems": 4, "n_aspects": 1, "validation_fraction": 0, "sources": [source]}
    ensemble_path, sources_path = tmp_path / "ensemble.yaml", tmp_path / "sources.yaml"
    ensemble_path.write_text(yaml.safe_dump(ensemble))
    sources_path.write_text(yaml.safe_dump(sources))
    return ensemble_path, sources_path


def run(tmp_path: Path, configs: tuple[Path, Path], out: str = "out"):
    ensemble_path, sources_path = configs
    run = SourceRun(load_sources(sources_path), sources_path, tmp_path / out, load_catalog(), None)
    return run_pipeline(load_ensemble(ensemble_path), run)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# -- item 7: no row is dropped without a reason ------------------------------------------


def test_outputs_of_one_input_without_a_system_field_are_all_annotated(serve, tmp_path: Path) -> None:
    data = write_source(
        tmp_path / "data.jsonl",
        [
            {"doc": "d1", "article": ARTICLE_A, "summary": "The council approved a bridge."},
            {"doc": "d1", "article": ARTICLE_A, "summary": "A bridge was rejected by the council."},
            {"doc": "d1", "article": ARTICLE_A, "summary": "Monday brought a bridge decision."},
            {"doc": "d1", "article": ARTICLE_A, "summary": "The council approved a bridge."},  # a repeated row
            {"doc": "d2", "article": ARTICLE_B, "summary": "A storm closed the harbour."},
        ],
    )
    _, url = serve(good_annotator())
    urls = {"a": url, "b": url, "sup": url}
    summary = run(tmp_path, write_configs(tmp_path, urls, source_spec(data, input_id="doc")))
    # before: one output per input (2 of 5 rows) and skipped == []
    assert (summary.requests, summary.records) == (4, 4) and summary.not_sampled == 0
    assert summary.skipped == [f"duplicate: {data}:4: repeats {data}:1 (same input, system and output)"]
    records = lines(tmp_path / "out" / "train.jsonl")
    assert sorted(r["system"] for r in records if r["input_id"] == "d1") == ["unknown", "unknown#2", "unknown#3"]
    assert len({r["id"] for r in records}) == 4
    assert json.loads((tmp_path / "out" / "run.json").read_text())["skipped"] == summary.skipped


def test_a_repeated_system_of_one_input_is_listed_with_its_reason(tmp_path: Path) -> None:
    data = write_source(
        tmp_path / "data.jsonl",
        [
            {"doc": "d1", "sys": "M1", "article": ARTICLE_A, "summary": "The council approved a bridge."},
            {"doc": "d1", "sys": "M1", "article": ARTICLE_A, "summary": "Another text, same system."},
        ],
    )
    spec = SourceSpec.model_validate(source_spec(data, input_id="doc", system="sys"))
    report = read_source(spec, data, load_catalog().task("summeval"))
    assert [i.where for i in report.items] == [f"{data}:1"]
    assert report.duplicates == [
        f"{data}:2: input 'd1' already has an output of system 'M1' at {data}:1; "
        "map fields.system to tell the outputs apart"
    ]


def test_one_input_id_for_two_different_inputs_is_a_clear_error(tmp_path: Path) -> None:
    data = write_source(
        tmp_path / "data.jsonl",
        [
            {"doc": "1", "article": ARTICLE_A, "summary": "The council approved a bridge."},
            {"doc": "1", "article": ARTICLE_B, "summary": "A storm closed the harbour."},
        ],
    )
    spec = SourceSpec.model_validate(source_spec(data, input_id="doc"))
    with pytest.raises(InputError, match=rf"{data}:2: input id '1' also names other inputs at {data}:1"):
        read_source(spec, data, load_catalog().task("summeval"))


# -- item 9: one run per output folder ---------------------------------------------------


def test_a_second_run_on_a_busy_folder_is_refused_naming_the_holder(serve, tmp_path: Path) -> None:
    data = write_source(
        tmp_path / "data.jsonl",
        [{"doc": f"d{i}", "article": f"{ARTICLE_A} Item {i}.", "summary": "The council approved."} for i in range(3)],
    )
    release = threading.Event()

    def held(body: dict[str, Any]) -> Reply:
        release.wait(20)  # bounded: the test releases it as soon as the second run is refused
        return good_annotator()(body)

    a, url_a = serve(held)
    _, url = serve(good_annotator())
    configs = write_configs(
        tmp_path, {"a": url_a, "b": url, "sup": url}, source_spec(data, input_id="doc"), timeout_s=30
    )
    first: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: first.update(summary=run(tmp_path, configs)))
    worker.start()
    try:
        deadline = time.monotonic() + 30
        while a.hits == 0:  # the first run holds the folder and is asking its models
            assert time.monotonic() < deadline and worker.is_alive()
            time.sleep(0.05)
        with pytest.raises(FolderBusy) as refused:
            run(tmp_path, configs)
    finally:
        release.set()
        worker.join(60)
    message = str(refused.value)
    assert "is in use by `spanjudge annotate` (pid" in message and "choose another --out" in message
    assert "\n" not in message
    assert first["summary"].records == 3 and a.hits == 3  # every call made once, by the first run
    again = run(tmp_path, configs)  # the lock died with the first run
    assert again.records == 3 and again.total_model_calls == 0


# -- item 15: field limits ---------------------------------------------------------------


def padded_then_good(body: dict[str, Any]) -> Reply:
    """A parseable reply whose explanation is padded to 5 KB (as many characters as 64 tokens can spell: a
    longer reply is a server ignoring max_tokens, refused as a failed call), then (on the retry) a good one."""
    if body["temperature"] == 0:
        padded = "Not supported by the article. " + "x" * 5_000
        return Reply(text=GOOD.format(loc=output_word(body), sev=2, label="Good").replace(
            "Not supported by the article.", padded))  # fmt: skip
    return good_annotator()(body)


def test_a_padded_reply_is_rejected_and_retried_not_trained_on(serve, tmp_path: Path) -> None:
    data = write_source(
        tmp_path / "data.jsonl", [{"doc": "d1", "article": ARTICLE_A, "summary": "The council approved a bridge."}]
    )
    _, url = serve(good_annotator())
    _, url_sup = serve(padded_then_good)
    summary = run(tmp_path, write_configs(tmp_path, {"a": url, "b": url, "sup": url_sup}, source_spec(data)))
    assert summary.records == 1
    [record] = lines(tmp_path / "out" / "train.jsonl")
    assert all(len(e["explanation"]) <= 1000 for e in record["evaluation"]["errors"])
    supervisor = record["provenance"]["supervisor"]
    assert len(supervisor["raw_replies"]) == 2 and supervisor["rejected_too_long"] == 1
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["field_limits"]["rejected_replies"] == {"a": 0, "b": 0, "sup": 1}
    assert "replies rejected" in (tmp_path / "out" / "stats.md").read_text()


def test_with_cap_a_too_long_field_is_cut_and_counted(serve, tmp_path: Path) -> None:
    data = write_source(
        tmp_path / "data.jsonl", [{"doc": "d1", "article": ARTICLE_A, "summary": "The council approved a bridge."}]
    )
    _, url = serve(good_annotator())
    padded = Reply(text="Error 1:\nLocation: council\nExplanation: " + "y" * 5000 + "\nSeverity: 2")
    sup, url_sup = serve([padded])
    limits = {"explanation": 200, "too_long": "cap"}
    configs = write_configs(tmp_path, {"a": url, "b": url, "sup": url_sup}, source_spec(data), field_limits=limits)
    assert run(tmp_path, configs).records == 1
    [record] = lines(tmp_path / "out" / "train.jsonl")
    [error] = record["evaluation"]["errors"]
    assert len(error["explanation"]) == 200 and error["explanation"].endswith("…")
    assert sup.hits == 1 and record["provenance"]["supervisor"]["capped_fields"] == 1
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["field_limits"]["capped_fields"]["sup"] == 1
