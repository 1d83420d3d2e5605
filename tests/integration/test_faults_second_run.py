"""The second fault-injection run (issue #28): nothing deleted, nothing overwritten, nothing
executed, and one clear line instead of a traceback. One test (or more) per item, each of which
failed on the main it was filed against.

Model servers are the scripted stand-in of tests/support/standin.py on 127.0.0.1 (they stop with the
test); adapters are real, tiny safetensors files; a full disk and a read-only folder are real
tmpfs mounts, skipped with the reason where this machine cannot mount one.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import save_file
from support.standin import Reply, StandIn

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.fileio import OUTPUT_MARKER, atomic_directory
from spanjudge.core.locks import Busy

REPO = Path(__file__).resolve().parents[2]
SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
TASK, ASPECT = "qags_xsum", "factual consistency"
GOOD = "Error 1:\nLocation: on a hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"
Serve = Callable[..., tuple[StandIn, str]]


def _items(path: Path, count: int, first: int = 0) -> Path:
    rows = [
        {"id": f"item-{n}", "article": f"The cat {n} sat on the mat.", "summary": "A cat sat on a hat."}
        for n in range(first, first + count)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows), encoding="utf-8")
    return path


def _score_args(url: str, data: Path, out: Path, *more: str) -> list[str]:
    return [
        "score", "--model", "stand-in-judge", "--engine", "openai", "--base-url", url, "--served-model", "judge",
        "--data", str(data), "--out", str(out), "--task", TASK, "--aspect", ASPECT,
        "--input", "Article=article", "--output-field", "summary", "--max-new-tokens", "96", "--retries", "0", *more,
    ]  # fmt: skip


def _score(url: str, data: Path, out: Path, *more: str) -> int:
    return cli_main(_score_args(url, data, out, *more))


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The last line printed to stderr, after checking no traceback was printed."""
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    lines = err.strip().splitlines()
    assert lines, "nothing printed"
    return lines[-1]


def _adapter(folder: Path, *, pickle_only: bool = False) -> Path:
    """A LoRA adapter folder as `spanjudge train` leaves it (tiny real safetensors weights)."""
    folder.mkdir(parents=True)
    config = {"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct", "r": 4, "lora_alpha": 8,
              "peft_type": "LORA", "target_modules": ["q_proj"], "task_type": "CAUSAL_LM"}  # fmt: skip
    (folder / "adapter_config.json").write_text(json.dumps(config))
    weights = {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight": np.zeros((4, 8), np.float32)}
    if pickle_only:
        (folder / "adapter_model.bin").write_bytes(b"\x80\x04K\x01.")  # a pickle: never to be loaded
    else:
        save_file(weights, str(folder / "adapter_model.safetensors"))
    (folder / "spanjudge.json").write_text(json.dumps({"base_model": "@smollm2"}))
    return folder


# -- 1. export never removes or overwrites what it did not write -------------------------------


def test_export_merge_refuses_a_folder_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adapter = _adapter(tmp_path / "adapter")
    mine = tmp_path / "work"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert cli_main(["export", "--model", str(adapter), "--merge", "--out", str(mine)]) == 2
    line = _one_line(capsys)
    assert f"--out {mine}" in line and "never replaced" in line
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_export_gguf_refuses_an_existing_file_and_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adapter = _adapter(tmp_path / "adapter")
    existing = tmp_path / "judge.gguf"
    existing.write_text("someone else's file")
    assert cli_main(["export", "--model", str(adapter), "--gguf-lora", "--out", str(existing)]) == 2
    assert "never overwritten" in _one_line(capsys)
    assert existing.read_text() == "someone else's file"
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert cli_main(["export", "--model", str(adapter), "--gguf-lora", "--out", str(folder)]) == 2
    assert "is a folder" in _one_line(capsys)
    assert not list(tmp_path.glob("*.partial"))


def test_an_output_folder_is_replaced_only_when_it_is_an_earlier_output_of_its_kind(tmp_path: Path) -> None:
    out = tmp_path / "merged"
    with atomic_directory(out, "merged export") as scratch:
        (scratch / "model.safetensors").write_text("one")
    assert (out / OUTPUT_MARKER).read_text() == "merged export\n"
    with atomic_directory(out, "merged export") as scratch:  # an earlier export: replaced whole
        (scratch / "model.safetensors").write_text("two")
    assert (out / "model.safetensors").read_text() == "two"
    with pytest.raises(InputError, match="never replaced"), atomic_directory(out, "publish dry run (model)"):
        pass  # another kind's folder is not this command's to replace
    assert (out / "model.safetensors").read_text() == "two"


# -- 2. the HTML page never overwrites the results ----------------------------------------------


def test_score_html_never_writes_the_page_over_the_results(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data, out = _items(tmp_path / "items.jsonl", 2), tmp_path / "x.html"
    assert _score(url, data, out, "--format", "html") == 2
    assert "the HTML page would be written over the results" in _one_line(capsys)
    assert not out.exists() and stand_in.hits == 0
    results = tmp_path / "x.jsonl"
    assert _score(url, data, results, "--format", "html") == 0
    assert len(results.read_text().splitlines()) == 2 and (tmp_path / "x.html").read_text().startswith("<!")
    assert cli_main(["render", str(results), "--out", str(results)]) == 2
    assert "is one of this command's inputs; write the page to another file" in _one_line(capsys)
    assert len(results.read_text().splitlines()) == 2


# -- 3. a dry run never writes into the folder it publishes ---------------------------------------


def test_publish_dry_run_into_the_adapter_or_run_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    adapter = _adapter(run / "adapter")
    before = (adapter / "spanjudge.json").read_text()
    for target in (adapter, run, run / "inside"):
        code = cli_main(["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", str(target)])
        line = _one_line(capsys)
        assert code == 2 and "the folder being published" in line, line
    assert (adapter / "spanjudge.json").read_text() == before and not (run / "inside").exists()


# -- 4. score appends only to a results file -----------------------------------------------------


def test_score_refuses_to_append_to_training_records(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    train = tmp_path / "train.jsonl"
    record = {"id": "summeval/1/m1/coherence", "evaluation": {"errors": [], "score": 80}, "task_id": "summeval"}
    train.write_text(json.dumps(record) + "\n")
    before = train.read_text()
    assert _score(url, _items(tmp_path / "items.jsonl", 2), train) == 2
    line = _one_line(capsys)
    assert f"{train}:1: not a result of `spanjudge score`" in line and "resume key" in line
    assert train.read_text() == before and stand_in.hits == 0


# -- 5. a results file holds one run's settings, whatever the ids --------------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (["--model", "another-judge"], "judge 'stand-in-judge (served as judge)'"),
        (["--aspect", "fluency", "--aspect-definition", "How fluent."], "--aspect 'factual consistency'"),
        (["--max-new-tokens", "200"], "decoding max_new_tokens=96, not 200 as now"),
    ],
    ids=["model", "aspect", "decoding"],
)
def test_new_ids_under_other_settings_are_refused(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str], expected: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    out = tmp_path / "scores.jsonl"
    assert _score(url, _items(tmp_path / "a.jsonl", 2), out) == 0
    before = out.read_text()
    capsys.readouterr()
    assert _score(url, _items(tmp_path / "b.jsonl", 2, first=10), out, *change) == 2  # other ids
    line = _one_line(capsys)
    assert f"{out}:1: id 'item-0' was scored with {expected}" in line and "another --out" in line
    assert out.read_text() == before and stand_in.hits == 2


def test_an_edited_prompt_template_is_another_run(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = serve([Reply(text=GOOD)])
    template = tmp_path / "judge.jinja"
    template.write_text("Rate {{ aspect_name }}: {{ outputs }}\n")
    out = tmp_path / "scores.jsonl"
    assert _score(url, _items(tmp_path / "a.jsonl", 1), out, "--prompt-template", str(template)) == 0
    template.write_text("Judge {{ aspect_name }} strictly: {{ outputs }}\n")
    capsys.readouterr()
    assert _score(url, _items(tmp_path / "b.jsonl", 1, first=5), out, "--prompt-template", str(template)) == 2
    assert "prompt template" in _one_line(capsys)


# -- 6. meta-eval's judgments are keyed by every file that shapes the prompt ----------------------


def test_meta_eval_judge_store_follows_the_template_content(tmp_path: Path) -> None:
    from spanjudge.eval.judge_files import DistilledJudge, model_fingerprint
    from spanjudge.eval.store import store_name

    template = tmp_path / "judge.jinja"
    template.write_text("Rate {{ aspect_name }}:\n{{ outputs | fence }}\n")
    options = {"engine": "openai", "base_url": "http://127.0.0.1:9/v1", "prompt_template": str(template)}
    first = DistilledJudge("stand-in", options)
    template.write_text("Judge {{ aspect_name }} strictly:\n{{ outputs | fence }}\n")  # same name, new text
    second = DistilledJudge("stand-in", options)
    assert store_name(first) != store_name(second)
    first.close()
    second.close()
    adapter = _adapter(tmp_path / "adapter")
    (adapter / "prompt_template.jinja").write_text("one")
    before = model_fingerprint(str(adapter))
    (adapter / "prompt_template.jinja").write_text("two")
    assert model_fingerprint(str(adapter)) != before


# -- 7. perturb never reuses another perturber's frozen perturbations ------------------------------


def test_frozen_perturbations_of_another_model_are_refused(serve: Serve, tmp_path: Path) -> None:
    from spanjudge.eval.perturb.llm_perturb import LLMPerturber
    from spanjudge.eval.perturb.perturbations import get
    from spanjudge.inference.backends import BackendSpec

    stand_in, url = serve([Reply(text="The dog sat on the mat.")])
    store = tmp_path / "frozen.jsonl"
    perturbation = get("dhp.fictional_entities.minor")
    items = [("a", "The cat sat on the mat.")]

    def spec(model: str) -> BackendSpec:
        return BackendSpec(kind="openai", model=model, endpoints=(url,), backoff_s=0.01, retries=0)

    with LLMPerturber(spec("model-a"), store) as perturber:
        perturber.perturb(perturbation, items, seed=0)
    with LLMPerturber(spec("model-a"), store) as again:  # the same perturber: reused, no call
        again.perturb(perturbation, items, seed=0)
    assert stand_in.hits == 1
    with pytest.raises(InputError, match=r"frozen\.jsonl:1: frozen by another perturber \(model 'openai:model-a'"):
        LLMPerturber(spec("model-b"), store)
    assert stand_in.hits == 1


# -- 8. the lock is on the file, not on the name it was given ------------------------------------


def test_a_symlinked_out_meets_the_same_lock(tmp_path: Path) -> None:
    from spanjudge.inference.score_data import ScoreStore

    real = tmp_path / "scores.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    holder = subprocess.Popen(  # another run holds the file by its real name
        [sys.executable, "-c", "import sys, time\nfrom spanjudge.inference.score_data import ScoreStore\n"
         f"store = ScoreStore(__import__('pathlib').Path({str(real)!r}), 'spanjudge score')\n"
         "print('held', flush=True)\ntime.sleep(60)"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(Busy, match="in use by"):
            ScoreStore(link, "spanjudge score")  # this run names it through the link
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / ".link.jsonl.lock").exists()


# -- 9. systems' templates render in the sandbox ---------------------------------------------------


def test_generate_templates_cannot_reach_python(tmp_path: Path) -> None:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.core.errors import ConfigError
    from spanjudge.data_gen.generate_config import TemplateSpec
    from spanjudge.data_gen.generate_prompts import Template, render_prompt

    task = load_catalog().task("summeval")
    hostile = "{{ ''.__class__.__mro__[1].__subclasses__() }} {{ article }}"
    spec = TemplateSpec.model_validate({"chat": hostile, "tasks": ["summeval"]})
    with pytest.raises(ConfigError, match=r"systems\.yaml: templates\.evil: the template is refused by the sandbox"):
        render_prompt(Template("evil", spec, tmp_path / "systems.yaml"), task, {"Article": "A text."}, "chat")
    fine = TemplateSpec.model_validate({"chat": "Summarise: {{ article }}", "tasks": ["summeval"]})
    assert render_prompt(Template("ok", fine, tmp_path / "s.yaml"), task, {"Article": "A text."}, "chat").endswith(
        "A text."
    )


# -- 10. publish stages no hard link and only files that are what they say -------------------------


def test_publish_refuses_hard_links_and_files_that_are_not_what_they_say(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    adapter = _adapter(run / "adapter")
    secret = tmp_path / "secret.txt"
    secret.write_text('{"token": "not for the hub"}')
    os.link(secret, adapter / "tokenizer.json")
    args = ["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", str(tmp_path / "staged")]
    assert cli_main(args) == 2
    assert "hard links" in _one_line(capsys)
    (adapter / "tokenizer.json").unlink()
    (adapter / "tokenizer.json").write_text("root:x:0:0:root:/root:/bin/bash\n")
    assert cli_main(args) == 2
    assert "tokenizer.json: not valid JSON" in _one_line(capsys)
    assert not (tmp_path / "staged").exists()


# -- 11. when every call fails, the reasons are shown and the rows kept ----------------------------


@pytest.fixture
def no_backoff(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server backend's retries without their back-off waits (Retry-After: tests/integration/test_ecosystem.py)."""
    from spanjudge.inference.backends import server

    monkeypatch.setattr(server, "backoff_delay", lambda backoff_s, retry: 0.0)


@pytest.mark.parametrize("server", ["dead port", "content null"])
def test_every_call_failing_shows_why_and_writes_the_rows(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], server: str, no_backoff: None
) -> None:
    if server == "dead port":
        url = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
    else:
        _, url = serve([Reply(text=None)])  # type: ignore[arg-type]  # a 200 whose message has no content
    data, out = _items(tmp_path / "items.jsonl", 1), tmp_path / "scores.jsonl"  # one: each waits out the retries
    code = _score(url, data, out)
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" not in err and "file not found" not in err, err
    assert "unscored ×1: model call failed" in err and "re-run the same command" in err.strip().splitlines()[-1]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["evaluation"]["score"] for row in rows] == [None]
    assert all(row["call_failure"] for row in rows)  # the reason, kept with the row


def test_rows_whose_call_failed_are_scored_again(serve: Serve, tmp_path: Path, no_backoff: None) -> None:
    data, out = _items(tmp_path / "items.jsonl", 2), tmp_path / "scores.jsonl"
    stand_in, url = serve([Reply(text=GOOD), Reply(text=None)])  # type: ignore[list-item]  # then content: null
    assert _score(url, data, out) == 1
    assert [json.loads(line).get("call_failure") is None for line in out.read_text().splitlines()] == [True, False]
    stand_in.replies = [Reply(text=GOOD)]
    assert _score(url, data, out) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(row["id"], row["evaluation"]["score"]) for row in rows] == [("item-0", 40), ("item-1", 40)]
    assert stand_in.hits == 1 + 4 + 1  # item-0 once; item-1 failed (a call and its 3 retries), then once more


# -- 12. a read-only folder or a full disk: one line naming the path -------------------------------


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """mount_tmpfs(size, read_only) -> a fresh tmpfs folder (unmounted at the end); skips with the
    reason where this machine cannot mount one (not root, no mount namespace)."""
    mounted: list[Path] = []

    def mount(size: str = "1m", read_only: bool = False) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip() or done.returncode}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_read_only_out_is_one_line(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], mount_tmpfs: Callable[..., Path]
) -> None:
    _, url = serve([Reply(text=GOOD)])
    read_only = mount_tmpfs(read_only=True)
    assert _score(url, _items(tmp_path / "items.jsonl", 1), read_only / "scores.jsonl") == 2
    line = _one_line(capsys)
    assert f"cannot write {read_only}" in line and "Read-only file system" in line and "re-run" in line


def test_read_only_outs_of_import_and_publish_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mount_tmpfs: Callable[..., Path]
) -> None:
    from support.quintd_files import GOOD as SPANS
    from support.quintd_files import quintd_config, write_quintd

    read_only = mount_tmpfs(read_only=True)
    root = write_quintd(tmp_path / "data", SPANS)
    config = tmp_path / "import.yaml"
    config.write_text(yaml.safe_dump(quintd_config(root).model_dump(mode="json")))
    code = cli_main(["import", "--config", str(config), "--out", str(read_only / "teacher"), "--allow-overlap"])
    line = _one_line(capsys)
    assert code == 2 and f"cannot write {read_only}" in line and "Read-only file system" in line, line
    run = tmp_path / "run"
    _adapter(run / "adapter")
    code = cli_main(["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", str(read_only / "s")])
    line = _one_line(capsys)
    assert code == 2 and f"cannot write {read_only}" in line and "Read-only file system" in line, line


def test_a_full_disk_is_one_line_and_resumes(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], mount_tmpfs: Callable[..., Path]
) -> None:
    _, url = serve([Reply(text=GOOD)])
    disk = mount_tmpfs(size="64k")
    filler = disk / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill the disk, leaving no block for the results (bounded: 64 KB fill in 16 writes)
        for _ in range(1000):
            os.write(descriptor, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(descriptor)
    out = disk / "scores.jsonl"
    data = _items(tmp_path / "items.jsonl", 3)
    assert _score(url, data, out) == 2
    line = _one_line(capsys)
    assert "No space left on device" in line and "free some space" in line and "re-run" in line
    filler.unlink()
    assert _score(url, data, out) == 0  # nothing half-written is in the way
    assert len(out.read_text().splitlines()) == 3


def test_a_full_disk_under_the_call_cache_is_one_line(tmp_path: Path, mount_tmpfs: Callable[..., Path]) -> None:
    from spanjudge.inference.backends import LLMCache
    from spanjudge.inference.backends.base import Completion

    disk = mount_tmpfs(size="256k")
    cache = LLMCache(disk / "cache.sqlite")
    try:
        with pytest.raises(
            SpanjudgeError, match=r"cannot write the call cache .*cache\.sqlite: database or disk is full"
        ):
            for number in range(10_000):  # bounded: 256 KB fill long before
                cache.put(f"key-{number}", "m", Completion(text="x" * 2000, model="m"))
    finally:
        cache.close()


# -- 13. SIGTERM and Ctrl-C say what was kept and how to resume ------------------------------------


@pytest.mark.parametrize(
    ("signum", "code", "said"), [(signal.SIGTERM, 143, "SIGTERM"), (signal.SIGINT, 130, "Ctrl-C")], ids=["term", "int"]
)
def test_a_signal_says_what_was_kept_and_the_rerun_finishes(
    serve: Serve, tmp_path: Path, signum: int, code: int, said: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD, delay=0.3)])
    data, out = _items(tmp_path / "items.jsonl", 20), tmp_path / "scores.jsonl"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    process = subprocess.Popen(  # SIGINT as a terminal delivers it (a background job's shell ignores it)
        [SPANJUDGE, *_score_args(url, data, out)], stderr=subprocess.PIPE, text=True, env=env, cwd=tmp_path,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    deadline = time.monotonic() + 60
    while (not out.exists() or not out.read_text()) and time.monotonic() < deadline:
        time.sleep(0.05)
    process.send_signal(signum)
    _, err = process.communicate(timeout=60)
    assert process.returncode == code, err
    assert "Traceback" not in err and f"interrupted ({said})" in err and "re-run the same command" in err
    kept = len(out.read_text().splitlines())
    assert 1 <= kept < 20
    stand_in.replies = [Reply(text=GOOD)]
    assert _score(url, data, out) == 0
    ids = [json.loads(line)["id"] for line in out.read_text().splitlines()]
    assert sorted(ids) == sorted(f"item-{n}" for n in range(20))  # each once: nothing redone


def test_sigterm_inside_an_asyncio_task_leaves_the_loop_without_an_unhandled_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The race behind a flaky run of the test above: SIGTERM that lands while a task runs (a row
    being written from a served judge's callback) became that task's exception, which asyncio.run's
    shutdown logged as a traceback. Sent from inside the task, it lands there every time."""
    import asyncio

    from spanjudge.app.cli import Terminated, _raise_terminated

    finished: list[str] = []

    async def writes_a_row() -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs right here, inside this task's step
        finished.append("row")  # the step that was running finishes: the row is written
        await asyncio.sleep(5)

    async def judge() -> None:
        await asyncio.gather(writes_a_row(), asyncio.sleep(5))

    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        with pytest.raises(Terminated):
            asyncio.run(judge())
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert finished == ["row"]
    assert not [record for record in caplog.records if record.name == "asyncio"], caplog.text


# -- 14. an empty source is an error; an empty reply is a failed call ------------------------------


def test_annotate_on_an_empty_source_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    ensemble = {
        "name": "one",
        "annotators": [
            {"name": "a", "backend": {"kind": "openai", "model": "a", "endpoints": ["http://127.0.0.1:9/v1"]}}
        ],
        "supervisor": {
            "name": "s",
            "backend": {"kind": "openai", "model": "s", "endpoints": ["http://127.0.0.1:9/v1"]},
        },
    }
    sources = {"sources": [{"name": "mine", "format": "jsonl", "path": str(empty), "task": "summeval",
                            "fields": {"inputs": {"Article": "article"}, "output": "summary"}}]}  # fmt: skip
    (tmp_path / "ensemble.yaml").write_text(yaml.safe_dump(ensemble))
    (tmp_path / "sources.yaml").write_text(yaml.safe_dump(sources))
    code = cli_main(["annotate", "--ensemble", str(tmp_path / "ensemble.yaml"),
                     "--sources", str(tmp_path / "sources.yaml"), "--out", str(tmp_path / "out")])  # fmt: skip
    line = _one_line(capsys)
    assert code == 2 and f"{empty}: source 'mine' has no rows to annotate" in line, line


def test_an_empty_reply_is_a_failed_call_and_is_not_cached(serve: Serve, tmp_path: Path) -> None:
    from spanjudge.inference.backends import BackendSpec, CachedBackend, LLMCache, make_backend
    from spanjudge.inference.backends.base import CallFailure, ChatRequest, Completion

    stand_in, url = serve([Reply(text=""), Reply(text="A real answer.")])
    spec = BackendSpec(kind="openai", model="m", endpoints=(url,), backoff_s=0.01, retries=0)
    with LLMCache(tmp_path / "cache.sqlite") as cache:
        backend = CachedBackend(make_backend(spec), cache)
        request = ChatRequest.user("Say something.")
        [first] = backend.generate([request])
        assert isinstance(first, CallFailure) and "empty content" in first.reason
        assert len(cache) == 0
        [second] = backend.generate([request])  # asked again, not served from the cache
        assert isinstance(second, Completion) and second.text == "A real answer." and stand_in.hits == 2
        backend.close()


# -- 15. import: --data-dir, field limits and the span count ---------------------------------------


def test_import_quintd_reads_the_data_dir_given(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from support.quintd_files import GOOD as SPANS
    from support.quintd_files import RULE, write_quintd

    root = write_quintd(tmp_path / "data", SPANS)  # 2 outputs, where the shared folder has 320
    (root / "meta_eval").symlink_to(shared_data / "meta_eval")  # what import keeps out of training
    config = tmp_path / "import.yaml"
    config.write_text(yaml.safe_dump({"name": "q", "source": {"format": "quintd1", "rule": RULE}}))
    out = tmp_path / "out"
    code = cli_main(["import", "--config", str(config), "--out", str(out), "--data-dir", str(root)])
    assert code == 0, capsys.readouterr().err
    assert json.loads((out / "run.json").read_text())["records"] == 2  # the folder given is the one read


def test_openlgauge_import_applies_the_field_limits_and_counts_spans(tmp_path: Path) -> None:
    from spanjudge.core.catalog import load_catalog
    from spanjudge.data_gen.teacher import ImportConfig, import_annotations

    base = {"dataset": "SummEval", "inputs": {"Article": "The cat sat on the mat all day long."},
            "aspect_name": "fluency", "task_type": "summarization", "task_name": "news_summarization"}  # fmt: skip
    errors = [{"location": "sat sat", "explanation": "Repeated word.", "severity": 2}]
    rows = [
        {**base, "input_id": f"a{n}", "system": "s", "outputs": {"Summary": "The cat sat sat on the mat."},
         "evaluation": {"errors": errors * 2, "score": 70}}
        for n in range(2)
    ]  # fmt: skip
    rows[1]["evaluation"] = {"errors": [{**errors[0], "explanation": "x" * 50_000}], "score": 70}
    (tmp_path / "release.json").write_text(json.dumps(rows))
    source = {"format": "openlgauge", "path": "release.json"}
    config = ImportConfig.model_validate({"name": "o", "source": source})
    with pytest.raises(InputError, match=r"release\.json\[1\]: error 1's explanation has 50000 characters"):
        import_annotations(config, tmp_path, tmp_path / "out", load_catalog())
    capped = ImportConfig.model_validate({"name": "o", "source": {**source, "field_limits": {"too_long": "cap"}}})
    summary = import_annotations(capped, tmp_path, tmp_path / "out", load_catalog())
    records = [
        json.loads(line)
        for name in ("train", "validation")
        for line in (tmp_path / "out" / f"{name}.jsonl").read_text().splitlines()
    ]
    assert max(len(e["explanation"]) for r in records for e in r["evaluation"]["errors"]) <= 1000
    assert summary.spans == 3
    assert "; 3 spans (" in (tmp_path / "out" / "stats.md").read_text()  # each imported error, counted


# -- 16. relative paths inside the project are not machine-local -----------------------------------


def test_publish_accepts_relative_paths_inside_the_project(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = Path("runs/smoke")
    _adapter(run / "adapter")
    (run / "train_config.yaml").write_text(yaml.safe_dump({"training": {"output_dir": "runs/smoke"}}))
    code = cli_main(["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", "staged"])
    assert code == 0, capsys.readouterr().err
    assert "output_dir: runs/smoke" in (tmp_path / "staged" / "train_config.yaml").read_text()


# -- 17. a pickled adapter is one line ----------------------------------------------------------------


def test_a_pickled_adapter_is_refused_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adapter = _adapter(tmp_path / "adapter", pickle_only=True)
    data = _items(tmp_path / "items.jsonl", 1)
    out = tmp_path / "s.jsonl"
    code = cli_main(["score", "--model", str(adapter), "--data", str(data), "--out", str(out), "--task", TASK,
                     "--aspect", ASPECT, "--input", "Article=article", "--output-field", "summary"])  # fmt: skip
    line = _one_line(capsys)
    assert code == 2 and "only safetensors adapters" in line and "weights_only" not in line, line


# -- 18. no library noise that reads like an error ----------------------------------------------------


def test_loading_a_peft_model_prints_no_library_noise(tmp_path: Path) -> None:
    script = """
import warnings
warnings.simplefilter("default")
import spanjudge.inference  # installs the filters, as every command does
from peft import LoraConfig, get_peft_model, PeftModel
from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=2, vocab_size=64))
get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj"])).save_pretrained("adapter")
PeftModel.from_pretrained(LlamaForCausalLM(model.config), "adapter")
print("loaded")
"""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert done.returncode == 0 and "loaded" in done.stdout, done.stderr
    assert "kernels" not in done.stderr and "is_gradient_checkpointing" not in done.stderr, done.stderr
