"""Runs split across machines (issue #17, item 4): `--shard K/N` for annotate, generate and
score, `spanjudge merge`, and Ollama annotators run one model at a time with keep_alive.

Real SummEval data and the real pipeline; the models are the scripted stand-in servers of
tests/support/standin.py, answering deterministically from the prompt, so a run split in shards and
merged must give, byte for byte, what one run gives.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.standin import Reply, StandIn

from spanjudge.app.cli import main as cli_main
from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.core.sharding import Shard, parse_shard, shard_number
from spanjudge.data_gen.config import load_ensemble, load_sources
from spanjudge.data_gen.generate import run_generate
from spanjudge.data_gen.generate_config import load_generate_config
from spanjudge.data_gen.pipeline import run_pipeline
from spanjudge.data_gen.source_run import SourceRun

pytestmark = pytest.mark.timeout(300)
Serve = Callable[..., tuple[StandIn, str]]

ANNOTATION = (
    "Error 1:\nLocation: {loc}\nExplanation: Not supported by the article.\nSeverity: {sev}\n\nOverall score: {label}"
)
LABELS = ("Poor", "Fair", "Good", "Excellent")


def _prompt(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"] if "messages" in body else body["prompt"]


def _digest(text: str, salt: str) -> int:
    return int(hashlib.sha256((salt + text).encode()).hexdigest()[:8], 16)


def annotator(salt: str) -> Callable[[dict[str, Any]], Reply]:
    """Replies that depend only on the prompt: some unparseable, the rest with varied labels."""

    def reply(body: dict[str, Any]) -> Reply:
        prompt = _prompt(body)
        pick = _digest(prompt, salt)
        if pick % 7 == 0 and body["temperature"] == 0:
            return Reply(text="I would rather not say.")  # retried with light sampling
        if pick % 11 == 0 or _digest(prompt, "every annotator") % 5 == 0:  # the latter: an item left unscored
            return Reply(text="Still not saying.")
        marker = "### Summary\n```\n" if "### Summary" in prompt else "### Model output\n```\n"
        word = prompt.split(marker, 1)[1].split()[0]
        return Reply(text=ANNOTATION.format(loc=word, sev=1 + pick % 5, label=LABELS[pick % 4]))

    return reply


def _configs(tmp_path: Path, urls: dict[str, str], *, seed: int = 0, inputs: int = 8) -> tuple[Path, Path]:
    def role(name: str) -> dict[str, Any]:
        return {"name": name, "backend": {"kind": "openai", "model": name, "endpoints": [urls[name]], "retries": 1,
                                          "backoff_s": 0.01, "timeout_s": 5}}  # fmt: skip

    ensemble = {
        "name": "stand-ins",
        "annotators": [role("a"), role("b"), role("c")],
        "supervisor": role("sup"),
        "sampling": {"max_tokens": 64},
        "supervisor_sampling": {"max_tokens": 64},
    }
    sources = {
        "seed": seed,
        "n_systems": 2,
        "n_aspects": 2,
        "validation_fraction": 0.25,
        "sources": [
            {"name": "summeval", "format": "summeval", "path": "$DATA/meta_eval/summeval/summeval.jsonl",
             "task": "summeval", "limit_inputs": inputs}
        ],
    }  # fmt: skip
    ensemble_path, sources_path = tmp_path / "ensemble.yaml", tmp_path / f"sources-{seed}.yaml"
    ensemble_path.write_text(yaml.safe_dump(ensemble))
    sources_path.write_text(yaml.safe_dump(sources))
    return ensemble_path, sources_path


def _urls(serve: Serve) -> dict[str, str]:
    return {name: serve(annotator(name))[1] for name in ("a", "b", "c", "sup")}


def _annotate(
    tmp_path: Path, urls: dict[str, str], out: Path, data: Path, shard: Shard | None = None, seed: int = 0
) -> Any:
    ensemble, sources = _configs(tmp_path, urls, seed=seed)
    run = SourceRun(load_sources(sources), sources, out, load_catalog(), data, shard=shard)
    return run_pipeline(load_ensemble(ensemble), run)


def _merge(*args: str) -> int:
    return cli_main(["merge", *args])


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    return lines[0]


# -- the split ----------------------------------------------------------------------------


def test_shard_of_an_input_depends_only_on_its_key_and_n() -> None:
    keys = [f"summeval\x1fdoc-{n}" for n in range(400)]
    assert [shard_number(k, 4) for k in keys] == [shard_number(k, 4) for k in reversed(keys)][::-1]
    counts = [sum(shard_number(k, 4) == s for k in keys) for s in range(1, 5)]
    assert all(60 < c < 140 for c in counts), counts  # roughly even
    assert shard_number("summeval\x1fdoc-1", 4) == 4  # sha256: the same on every machine, every Python


@pytest.mark.parametrize("bad", ["0/3", "4/3", "3", "a/b", "1/0", "-1/2", "1/2/3"])
def test_bad_shard_is_one_line(bad: str) -> None:
    with pytest.raises(InputError, match=r"^--shard expects K/N with 1 <= K <= N \(e\.g\. --shard 2/8\), got"):
        parse_shard(bad)
    assert parse_shard(" 2 / 8 ") == Shard(2, 8)


def test_bad_shard_on_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    ensemble, sources = _configs(tmp_path, dict.fromkeys(("a", "b", "c", "sup"), "http://127.0.0.1:9/v1"))
    for command in (
        ["annotate", "--ensemble", str(ensemble), "--sources", str(sources)],
        ["generate", "--systems", str(ensemble), "--sources", str(sources)],
        ["score", "--model", "judge", "--data", str(sources), "--task", "summeval"],
    ):
        assert cli_main([*command, "--out", str(tmp_path / "out"), "--shard", "5/4"]) == 2
        assert "--shard expects K/N with 1 <= K <= N" in _error_line(capsys)
    assert not (tmp_path / "out").exists()


# -- annotate: shards + merge == one run --------------------------------------------------


def test_sharded_annotate_merged_is_the_single_run(
    serve: Serve, tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = _urls(serve)
    single = _annotate(tmp_path, urls, tmp_path / "single", shared_data)
    assert single.records > 8 and single.unscored > 0 and single.validation > 0  # the data exercise it all
    shards = [tmp_path / f"shard{k}" for k in (1, 2, 3)]
    parts = [_annotate(tmp_path, urls, folder, shared_data, Shard(k, 3)) for k, folder in enumerate(shards, 1)]
    assert sum(p.requests for p in parts) == single.requests and sum(p.records for p in parts) == single.records
    assert sum(p.requests > 0 for p in parts) >= 2  # the inputs really are spread
    for folder in shards:  # a shard is no dataset: the split needs all of them
        assert (folder / "records.jsonl").is_file() and not (folder / "train.jsonl").exists()
        assert (folder / "cache.sqlite").is_file()  # its own cache
    inputs = [set(map(tuple, json.loads((f / "shard.json").read_text())["inputs"])) for f in shards]
    assert not (inputs[0] & inputs[1] or inputs[0] & inputs[2] or inputs[1] & inputs[2])

    merged = tmp_path / "merged"
    capsys.readouterr()
    code = _merge("--shards", str(shards[2]), str(shards[0]), str(shards[1]), "--out", str(merged))  # any order
    assert code == 0, capsys.readouterr().err
    for name in ("train.jsonl", "validation.jsonl", "unscored.jsonl", "incomplete.jsonl", "stats.json", "stats.md"):
        assert (merged / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    run = json.loads((merged / "run.json").read_text())
    expected = json.loads((tmp_path / "single" / "run.json").read_text())
    assert run.pop("merged_from") == [str(s) for s in shards]
    assert {**run, "out_dir": None} == {**expected, "out_dir": None}

    import datasets

    ours, theirs = (
        datasets.load_from_disk(str(merged / "hf_dataset")),
        datasets.load_from_disk(str(tmp_path / "single" / "hf_dataset")),
    )
    assert {k: ours[k].to_list() for k in ours} == {k: theirs[k].to_list() for k in theirs}


def test_merge_refuses_what_is_not_one_whole_run(
    serve: Serve, tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    urls = _urls(serve)
    one, two = tmp_path / "s1", tmp_path / "s2"
    _annotate(tmp_path, urls, one, shared_data, Shard(1, 2))
    _annotate(tmp_path, urls, two, shared_data, Shard(2, 2))
    other_seed = tmp_path / "other"
    _annotate(tmp_path, urls, other_seed, shared_data, Shard(2, 2), seed=5)
    out = str(tmp_path / "merged")
    capsys.readouterr()
    cases = [
        ([str(one)], "shard 2/2 missing: merge needs all 2 shards of the run"),
        ([str(one), str(one), str(two)], f"shard 1/2 is given twice: {one} and {one}"),
        ([str(one), str(other_seed)], f"{other_seed} (shard 2/2) was run with other settings than {one}"),
        ([str(one), str(tmp_path)], f"{tmp_path}: no shard.json; not the output folder of a run with --shard"),
    ]
    for folders, message in cases:
        assert _merge("--shards", *folders, "--out", out) == 2
        assert message in _error_line(capsys)

    manifest = json.loads((two / "shard.json").read_text())  # a copied folder: one input in two shards
    manifest["inputs"].append(json.loads((one / "shard.json").read_text())["inputs"][0])
    (two / "shard.json").write_text(json.dumps(manifest))
    assert _merge("--shards", str(one), str(two), "--out", out) == 2
    assert "is in two shards" in _error_line(capsys)
    manifest["finished"] = False  # a shard that was killed, or is still running
    (two / "shard.json").write_text(json.dumps(manifest))
    assert _merge("--shards", str(one), str(two), "--out", out) == 2
    assert "shard 2/2 has not finished; re-run its command" in _error_line(capsys)
    assert not (tmp_path / "merged" / "train.jsonl").exists()


def test_a_folder_holds_one_shard(serve: Serve, tmp_path: Path, shared_data: Path) -> None:
    urls = _urls(serve)
    _annotate(tmp_path, urls, tmp_path / "s", shared_data, Shard(1, 2))
    _annotate(tmp_path, urls, tmp_path / "s", shared_data, Shard(1, 2))  # the same shard again: resumes
    with pytest.raises(InputError, match="holds shard 1/2 of a `annotate` run; give shard 2/2 its own --out"):
        _annotate(tmp_path, urls, tmp_path / "s", shared_data, Shard(2, 2))
    with pytest.raises(InputError, match="give an unsharded run its own --out"):
        _annotate(tmp_path, urls, tmp_path / "s", shared_data)
    _annotate(tmp_path, urls, tmp_path / "full", shared_data)
    with pytest.raises(InputError, match="holds an unsharded run; give shard 1/2 its own --out"):
        _annotate(tmp_path, urls, tmp_path / "full", shared_data, Shard(1, 2))


# -- generate: shards + merge == one run --------------------------------------------------


def _generate(tmp_path: Path, url: str, out: Path, data: Path, shard: Shard | None = None) -> Any:
    systems = {
        "name": "stand-ins",
        "sampling": {"max_tokens": 16},
        "systems": [
            {"name": name, "backend": {"kind": "openai", "model": name, "endpoints": [url], "retries": 1,
                                       "backoff_s": 0.01, "timeout_s": 5}}
            for name in ("m1", "m2")
        ],
    }  # fmt: skip
    sources = {"sources": [
        {"name": "summeval", "format": "summeval", "path": "$DATA/meta_eval/summeval/summeval.jsonl",
         "task": "summeval", "limit_inputs": 6},
    ]}  # fmt: skip
    systems_path, sources_path = tmp_path / "systems.yaml", tmp_path / "gen-sources.yaml"
    systems_path.write_text(yaml.safe_dump(systems))
    sources_path.write_text(yaml.safe_dump(sources))
    run = SourceRun(load_sources(sources_path), sources_path, out, load_catalog(), data, shard=shard)
    return run_generate(load_generate_config(systems_path), systems_path, run)


def test_sharded_generate_merged_is_the_single_run(
    serve: Serve, tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    def writer(body: dict[str, Any]) -> Reply:
        prompt = _prompt(body)
        if _digest(prompt, body["model"]) % 5 == 0:
            return Reply(text="Sure! Here is a short summary of the article:")  # rejected: nothing after it
        return Reply(text=f"{body['model']} says {_digest(prompt, 'x') % 1000}.")

    _, url = serve(writer)
    single = _generate(tmp_path, url, tmp_path / "single", shared_data)
    shards = [tmp_path / f"g{k}" for k in (1, 2)]
    for k, folder in enumerate(shards, 1):
        _generate(tmp_path, url, folder, shared_data, Shard(k, 2))
    capsys.readouterr()
    assert _merge("--shards", *map(str, shards), "--out", str(tmp_path / "merged")) == 0
    merged = tmp_path / "merged"
    assert single.outputs > 0 and single.rejected > 0
    for name in ("outputs/summeval.jsonl", "rejected.jsonl", "incomplete.jsonl", "sources.yaml"):
        assert (merged / name).read_bytes() == (tmp_path / "single" / name).read_bytes(), name
    run = json.loads((merged / "run.json").read_text())
    expected = json.loads((tmp_path / "single" / "run.json").read_text())
    assert run.pop("merged_from") == [str(s) for s in shards]
    assert {**run, "out_dir": None} == {**expected, "out_dir": None}


# -- score --------------------------------------------------------------------------------


def test_score_shards_split_by_input_and_keep_their_own_file(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge = "Error 1:\nLocation: hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"
    stand_in, url = serve([Reply(text=judge)])
    rows = [  # three systems' summaries of each of four articles
        {"id": f"{doc}-{system}", "article": f"The cat {doc} sat on the mat.", "summary": f"A cat {system} sat."}
        for doc in range(4)
        for system in ("x", "y", "z")
    ]
    data = tmp_path / "items.jsonl"
    data.write_text("".join(json.dumps(row) + "\n" for row in rows))

    def score(out: Path, *more: str) -> int:
        return cli_main(
            ["score", "--model", "judge", "--engine", "openai", "--base-url", url, "--served-model", "judge",
             "--data", str(data), "--out", str(out), "--task", "qags_xsum", "--aspect", "factual consistency",
             "--input", "Article=article", "--output-field", "summary", "--max-new-tokens", "96", *more]
        )  # fmt: skip

    outs = [tmp_path / f"scores-{k}.jsonl" for k in (1, 2)]
    for k, out in enumerate(outs, 1):
        assert score(out, "--shard", f"{k}/2") == 0
    ids = [[json.loads(line)["id"] for line in out.read_text().splitlines()] for out in outs]
    assert sorted(ids[0] + ids[1]) == sorted(r["id"] for r in rows) and not set(ids[0]) & set(ids[1])
    for part in ids:  # all systems of an article in one shard
        assert all({f"{i.split('-')[0]}-{s}" for s in "xyz"} <= set(part) for i in part)
    assert stand_in.hits == len(rows)
    capsys.readouterr()
    assert score(outs[0], "--shard", "2/2") == 2  # another shard's results file is not resumed
    assert f"{outs[0]} holds results of rows outside shard 2/2" in _error_line(capsys)


# -- Ollama: one model at a time, kept loaded ---------------------------------------------


def test_ollama_models_run_one_at_a_time_and_stay_loaded(serve: Serve, tmp_path: Path, shared_data: Path) -> None:
    def reply(body: dict[str, Any]) -> Reply:
        return Reply(text=annotator("o")({"messages": body["messages"], "temperature": 1}).text, delay=0.02)

    ollama, host = serve(reply, ollama=True)
    _, other_host = serve(reply, ollama=True)

    def role(name: str, url: str, **options: Any) -> dict[str, Any]:
        return {"name": name, "backend": {"kind": "ollama", "model": f"{name}:70b", "endpoints": [url],
                                          "retries": 0, "timeout_s": 5, "options": options}}  # fmt: skip

    ensemble = {
        "name": "one-host",
        "one_model_at_a_time": True,
        "annotators": [role("a", host), role("b", host, keep_alive="2h"), role("c", other_host)],
        "supervisor": role("sup", host),
        "sampling": {"max_tokens": 64},
        "supervisor_sampling": {"max_tokens": 64},
    }
    _, sources = _configs(tmp_path, dict.fromkeys(("a", "b", "c", "sup"), host), inputs=3)
    ensemble_path = tmp_path / "ollama.yaml"
    ensemble_path.write_text(yaml.safe_dump(ensemble))
    run_pipeline(
        load_ensemble(ensemble_path),
        SourceRun(load_sources(sources), sources, tmp_path / "out", load_catalog(), shared_data),
    )
    models = [body["model"] for body in ollama.bodies]
    annotators = [m for m in models if m != "sup:70b"]
    n = annotators.count("a:70b")
    assert n > 1 and annotators == ["a:70b"] * n + ["b:70b"] * n  # a's prompts all done before b's start
    assert models[-1] == "sup:70b"
    alive = {body["model"]: body.get("keep_alive") for body in ollama.bodies}
    assert alive == {"a:70b": "30m", "b:70b": "2h", "sup:70b": "30m"}  # a request field, not a model option
    assert all("keep_alive" not in body["options"] for body in ollama.bodies)
