"""Nothing is overwritten or deleted that a command did not write: export, score pages, publish's dry run, training
records, and an out reached through a symlink meets the same lock.

Adapters are real, tiny safetensors files."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from support.faults import GOOD, Serve, items, one_line, served_score, tiny_adapter
from support.standin import Reply

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import OUTPUT_MARKER, atomic_directory
from spanjudge.core.locks import Busy


def test_export_merge_refuses_a_folder_it_did_not_write(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adapter = tiny_adapter(tmp_path / "adapter")
    mine = tmp_path / "work"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    assert cli_main(["export", "--model", str(adapter), "--merge", "--out", str(mine)]) == 2
    line = one_line(capsys)
    assert f"--out {mine}" in line and "never replaced" in line
    assert (mine / "thesis.tex").read_text() == "years of work"


def test_export_gguf_refuses_an_existing_file_and_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    adapter = tiny_adapter(tmp_path / "adapter")
    existing = tmp_path / "judge.gguf"
    existing.write_text("someone else's file")
    assert cli_main(["export", "--model", str(adapter), "--gguf-lora", "--out", str(existing)]) == 2
    assert "never overwritten" in one_line(capsys)
    assert existing.read_text() == "someone else's file"
    folder = tmp_path / "a-folder"
    folder.mkdir()
    assert cli_main(["export", "--model", str(adapter), "--gguf-lora", "--out", str(folder)]) == 2
    assert "is a folder" in one_line(capsys)
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


def test_score_html_never_writes_the_page_over_the_results(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    data, out = items(tmp_path / "items.jsonl", 2), tmp_path / "x.html"
    assert served_score(url, data, out, "--format", "html") == 2
    assert "the HTML page would be written over the results" in one_line(capsys)
    assert not out.exists() and stand_in.hits == 0
    results = tmp_path / "x.jsonl"
    assert served_score(url, data, results, "--format", "html") == 0
    assert len(results.read_text().splitlines()) == 2 and (tmp_path / "x.html").read_text().startswith("<!")
    assert cli_main(["render", str(results), "--out", str(results)]) == 2
    assert "is one of this command's inputs; write the page to another file" in one_line(capsys)
    assert len(results.read_text().splitlines()) == 2


def test_publish_dry_run_into_the_adapter_or_run_folder_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = tmp_path / "run"
    adapter = tiny_adapter(run / "adapter")
    before = (adapter / "spanjudge.json").read_text()
    for target in (adapter, run, run / "inside"):
        code = cli_main(["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", str(target)])
        line = one_line(capsys)
        assert code == 2 and "the folder being published" in line, line
    assert (adapter / "spanjudge.json").read_text() == before and not (run / "inside").exists()


def test_score_refuses_to_append_to_training_records(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    train = tmp_path / "train.jsonl"
    record = {"id": "summeval/1/m1/coherence", "evaluation": {"errors": [], "score": 80}, "task_id": "summeval"}
    train.write_text(json.dumps(record) + "\n")
    before = train.read_text()
    assert served_score(url, items(tmp_path / "items.jsonl", 2), train) == 2
    line = one_line(capsys)
    assert f"{train}:1: not a result of `spanjudge score`" in line and "resume key" in line
    assert train.read_text() == before and stand_in.hits == 0


def test_a_symlinked_out_meets_the_same_lock(tmp_path: Path) -> None:
    from spanjudge.inference.score.rows import ScoreStore

    real = tmp_path / "scores.jsonl"
    link = tmp_path / "link.jsonl"
    link.symlink_to(real)
    holder = subprocess.Popen(  # another run holds the file by its real name
        [sys.executable, "-c", "import sys, time\nfrom spanjudge.inference.score.rows import ScoreStore\n"
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
