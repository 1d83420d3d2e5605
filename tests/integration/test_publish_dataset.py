"""`spanjudge publish --dataset-dir`: an annotated dataset staged for the Hub (allow-list, dataset
card, paths cut, no secrets) and uploaded as a dataset repo.

The folder is real: `spanjudge import` of a small quintd1 sample (tests/integration/test_teacher_import.py),
plus the files publishing must leave behind. No model hub is reachable, so the upload goes to a
stand-in of the Hub's HTTP API on 127.0.0.1, through huggingface_hub's own client."""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.publish_folders import FAKE_TOKEN, imported_folder

from spanjudge.app.cli import main
from spanjudge.core.fileio import OUTPUT_MARKER
from spanjudge.core.hub_data import from_hub_row

SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))
STAGED = [
    "README.md",
    "hf_dataset/dataset_dict.json",
    "hf_dataset/train/data-00000-of-00001.arrow",
    "hf_dataset/train/dataset_info.json",
    "hf_dataset/train/state.json",
    "hf_dataset/validation/data-00000-of-00001.arrow",
    "hf_dataset/validation/dataset_info.json",
    "hf_dataset/validation/state.json",
    "run.json",
    "stats.json",
    "stats.md",
    "train.jsonl",
    "validation.jsonl",
]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return imported_folder(tmp_path_factory.mktemp("dataset"))


def publish(*args: str) -> int:
    return main(["publish", "--repo-id", "someone/tiny-spans", *args])


def front_matter(card: str) -> dict[str, Any]:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n", 2)[1])


def files_of(folder: Path) -> list[str]:
    """The staged files, less the dry-run marker (which is never uploaded)."""
    names = (p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    return sorted(name for name in names if name != OUTPUT_MARKER)


def test_dry_run_stages_the_allow_list_with_a_dataset_card(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import datasets

    staged = tmp_path / "staged"
    assert publish("--dataset-dir", str(folder), "--dry-run", str(staged), "--source-license", "quintd1=cc-by-4.0") == 0
    assert files_of(staged) == STAGED  # no cache.sqlite, unscored.jsonl, notes.txt, score_histogram.png
    card = (staged / "README.md").read_text()
    meta = front_matter(card)
    assert meta["license"] == "other" and meta["task_categories"] == ["text-generation"]
    assert meta["size_categories"] == ["n<1K"] and "spanjudge" in meta["tags"]
    assert meta["configs"] == [
        {
            "config_name": "default",
            "data_files": [
                {"split": "train", "path": "hf_dataset/train/*.arrow"},
                {"split": "validation", "path": "hf_dataset/validation/*.arrow"},
            ],
        }
    ]
    assert "| gpt-4-1106-preview | – | annotator | 0.00% |" in card  # the teacher, from the provenance
    assert "Imported with `spanjudge import`" in card and "format `quintd1`" in card
    assert "Records: train 1, validation 1" in card
    assert "| quintd1 | 2 | cc-by-4.0 |" in card  # the source's licence, as given
    assert 'load_dataset("someone/tiny-spans")' in card
    # machine-local paths are cut in the staged JSON, in the records' provenance, and nowhere else
    for name in files_of(staged):
        assert str(folder.parent).encode() not in (staged / name).read_bytes(), name
    assert json.loads((staged / "run.json").read_text())["out_dir"] == "annotated"
    staged_records = [json.loads(line) for line in (staged / "train.jsonl").read_text().splitlines()]
    source_records = [json.loads(line) for line in (folder / "train.jsonl").read_text().splitlines()]
    assert staged_records[0]["provenance"]["source"] == "gpt-4-wikidata-test-llama2.jsonl:1"
    assert source_records[0]["provenance"]["source"].startswith(str(folder.parent))
    assert [{k: v for k, v in r.items() if k != "provenance"} for r in staged_records] == [
        {k: v for k, v in r.items() if k != "provenance"} for r in source_records
    ]  # the texts and evaluations are exactly the source's
    # what the Hub serves from the card's configs is the same records
    loaded = datasets.load_dataset(str(staged))
    assert sorted(loaded) == ["train", "validation"]
    first = from_hub_row(loaded["train"][0])
    assert (first["inputs"], first["provenance"]) == (staged_records[0]["inputs"], staged_records[0]["provenance"])
    out = capsys.readouterr()
    assert "13 files staged" in out.err and "nothing uploaded" in out.err
    # a second dry run into the same folder replaces it
    assert publish("--dataset-dir", str(folder), "--dry-run", str(staged)) == 0
    assert "| quintd1 | 2 | unknown |" in (staged / "README.md").read_text()


def annotate_like(folder: Path, target: Path) -> Path:
    """The imported folder rewritten as `spanjudge annotate` writes it: an ensemble's provenance."""
    shutil.copytree(folder, target)
    for name in ("train.jsonl", "validation.jsonl"):
        records = [json.loads(line) for line in (target / name).read_text().splitlines()]
        for record in records:
            record["provenance"] = {
                "ensemble": "tiny-ensemble",
                "seed": 0,
                "source": "/abs/where/items.jsonl:3",
                "annotators": [
                    {"name": "llama", "model_id": "meta-llama/Llama-3.1-8B-Instruct", "rating": 3},
                    {"name": "qwen", "model_id": "Qwen/Qwen2.5-7B-Instruct", "rating": 4},
                ],
                "supervisor": {"name": "sup", "model_id": "Qwen/Qwen2.5-72B-Instruct"},
            }
        (target / name).write_text("".join(json.dumps(r) + "\n" for r in records))
    run = {"out_dir": str(target), "records": 2, "train": 1, "validation": 1, "unscored": 1, "incomplete": 0,
           "model_calls": {"llama": 3, "qwen": 3, "sup": 2}, "licenses": {"quintd1": "mit"},
           "decontamination": {"against": "/abs/configs/eval/thesis.yaml", "allow_overlap": False,
                               "overlapping_inputs": 2, "excluded_examples": 5, "overlaps": []}}  # fmt: skip
    (target / "run.json").write_text(json.dumps(run))
    stats = json.loads((target / "stats.json").read_text())
    stats["parse_failure_rate"] = {"llama": 0.0, "qwen": 0.25}
    (target / "stats.json").write_text(json.dumps(stats))
    return target


def test_card_names_the_annotators_supervisor_and_recorded_licences(folder: Path, tmp_path: Path) -> None:
    annotated = annotate_like(folder, tmp_path / "annotate")
    staged = tmp_path / "staged"
    assert publish("--dataset-dir", str(annotated), "--dry-run", str(staged), "--license", "cc-by-nc-4.0") == 0
    card = (staged / "README.md").read_text()
    assert front_matter(card)["license"] == "cc-by-nc-4.0"
    assert "| llama | meta-llama/Llama-3.1-8B-Instruct | annotator | 0.00% |" in card
    assert "| qwen | Qwen/Qwen2.5-7B-Instruct | annotator | 25.00% |" in card
    assert "| sup | Qwen/Qwen2.5-72B-Instruct | supervisor | – |" in card
    assert "`spanjudge annotate` by the LLM ensemble `tiny-ensemble`" in card
    assert "Records: train 1, validation 1, unscored 1, incomplete 0" in card
    assert "| quintd1 | 2 | mit |" in card  # recorded in run.json
    assert "against the meta-evaluation sets (`thesis.yaml`): 5 examples of 2 such inputs were left out" in card
    assert "/abs/" not in card
    assert json.loads((staged / "train.jsonl").read_text())["provenance"]["source"] == "items.jsonl:3"


def test_links_tokens_and_wrong_options_are_refused(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    linked = tmp_path / "linked"
    shutil.copytree(folder, linked)
    (linked / "stats.md").unlink()
    (linked / "stats.md").symlink_to(tmp_path.parent / "elsewhere.md")
    leaky = tmp_path / "leaky"
    shutil.copytree(folder, leaky)
    with (leaky / "stats.md").open("a") as handle:
        handle.write(f"\nuploaded with {FAKE_TOKEN}\n")
    cases = [
        (["--dataset-dir", str(linked)], "stats.md: is a symbolic link"),
        (["--dataset-dir", str(leaky)], "refusing to publish: token-like strings (hf_...) in stats.md"),
        (["--dataset-dir", str(folder), "--source-license", "xsum=mit"], "no source of that name"),
        (["--dataset-dir", str(folder), "--merged"], "--merged describes a judge"),
        (["--dataset-dir", str(folder), "--model", str(folder)], "give --model RUN_FOLDER"),
        (["--dataset-dir", str(folder / "data")], "not a folder"),
    ]
    for args, expected in cases:
        out = tmp_path / "dry"
        assert publish(*args, "--dry-run", str(out)) == 2, args
        err = capsys.readouterr().err
        assert expected in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and FAKE_TOKEN not in err
        assert not out.exists()  # nothing staged


# -- the upload, to a stand-in of the Hub's HTTP API ------------------------------------------


class HubStandIn(BaseHTTPRequestHandler):
    """The four calls `HfApi.create_repo` + `upload_folder` make for small files: create the
    repo, validate the card's YAML, ask each file's upload mode (all "regular": inline in the
    commit), and the commit itself (NDJSON with base64 contents)."""

    calls: list[tuple[str, str | None]]
    committed: dict[str, bytes]
    header: dict[str, Any]

    def log_message(self, *args: Any) -> None:  # quiet
        pass

    def _answer(self, payload: dict[str, Any]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.calls.append((self.path, self.headers.get("Authorization")))
        base = f"http://127.0.0.1:{self.server.server_address[1]}"
        if self.path == "/api/repos/create":
            body = json.loads(raw)
            self._answer({"url": f"{base}/datasets/{body['organization']}/{body['name']}", "type": body.get("type")})
        elif self.path == "/api/validate-yaml":
            self._answer({"errors": [], "warnings": []})
        elif "/preupload/" in self.path:
            files = json.loads(raw)["files"]
            self._answer(
                {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False} for f in files]}
            )
        elif "/commit/" in self.path:
            for line in raw.decode().splitlines():
                item = json.loads(line)
                if item["key"] == "header":
                    self.header.update(item["value"])
                elif item["key"] == "file":
                    self.committed[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            repo = self.path.split("/api/datasets/")[1].split("/commit/")[0]
            self._answer({"commitUrl": f"{base}/datasets/{repo}/commit/{'a' * 40}", "commitOid": "a" * 40})
        else:
            self.send_error(404)


@pytest.fixture
def hub() -> Iterator[tuple[str, type[HubStandIn]]]:
    handler = type("Handler", (HubStandIn,), {"calls": [], "committed": {}, "header": {}})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", handler
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_upload_commits_exactly_the_staged_files_to_a_dataset_repo(
    folder: Path, tmp_path: Path, hub: tuple[str, type[HubStandIn]]
) -> None:
    endpoint, handler = hub
    staged = tmp_path / "staged"
    assert publish("--dataset-dir", str(folder), "--dry-run", str(staged)) == 0
    env = {
        **os.environ,
        "HF_ENDPOINT": endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_TOKEN": FAKE_TOKEN,
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_XET": "1",
    }
    result = subprocess.run(
        [SPANJUDGE, "publish", "--dataset-dir", str(folder), "--repo-id", "someone/tiny-spans", "--private"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().endswith(f"/datasets/someone/tiny-spans/commit/{'a' * 40}")
    assert FAKE_TOKEN not in result.stdout + result.stderr
    paths = [path for path, _ in handler.calls]
    assert paths[0] == "/api/repos/create"
    assert "/api/datasets/someone/tiny-spans/preupload/main" in paths
    assert paths[-1] == "/api/datasets/someone/tiny-spans/commit/main"
    assert {auth for _, auth in handler.calls} == {f"Bearer {FAKE_TOKEN}"}
    assert handler.header["summary"] == "spanjudge publish: annotated dataset and dataset card"
    # exactly the dry run's files, byte for byte (the Arrow files are rebuilt the same way)
    assert sorted(handler.committed) == STAGED
    for name in STAGED:
        assert handler.committed[name] == (staged / name).read_bytes(), name
