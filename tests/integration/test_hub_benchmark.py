"""A span set as a Hub Benchmark (`spanjudge publish --benchmark`): the staged repository's eval.yaml, card and data,
and its inspect task run by inspect itself, in Python (`inspect_ai.eval` on the staged task file) and on the command
line (`inspect eval`). The judge under evaluation is inspect's own mock model, replying as the test scripts it (the
people's own spans as an oracle, "No Error", and text that is no reply at all), and on the command line a real small
model through inspect's `hf/` provider. The Hub is a stand-in on 127.0.0.1
where a dataset's eval.yaml is asked for (`--hub-dataset` is warned about unless it names a Benchmark)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import yaml
from inspect_ai import eval as inspect_eval
from inspect_ai.model import ModelOutput, ModelUsage, get_model

from spanjudge.app.cli import main as cli_main
from spanjudge.inference.contract import ErrorAnnotation, Evaluation, render_judge
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.shipped_models import smollm2_gguf

BIN = Path(sys.executable).parent
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "INSPECT_LOG_LEVEL": "warning"}


def _reply(errors: list[str], score: int) -> str:
    return render_judge(Evaluation(errors=[ErrorAnnotation(location=t, explanation="Wrong.", severity=3)
                                           for t in errors], score=score))  # fmt: skip


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    out = tmp_path_factory.mktemp("benchmark") / "staged"
    args = ["publish", "--benchmark", "quintd1:dev", "--repo-id", "someone/quintd1-dev-spans", "--max-items", "12"]
    assert cli_main([*args, "--data-dir", str(shared_data), "--dry-run", str(out)]) == 0
    return out


def test_the_staged_repository_registers_one_inspect_task_over_its_data(staged: Path) -> None:
    names = sorted(str(p.relative_to(staged)) for p in staged.rglob("*") if p.is_file() and p.name != ".spanjudge")
    assert [n for n in names if not n.startswith(".")] == [
        "README.md",
        "data/test.jsonl",
        "eval.yaml",
        "spanjudge_task.py",
    ]
    registration = yaml.safe_load((staged / "eval.yaml").read_text())
    assert registration["evaluation_framework"] == "inspect-ai"
    assert registration["tasks"] == [{"id": "error_spans", "config": "default", "split": "test"}]
    card = (staged / "README.md").read_text()
    front = yaml.safe_load(card.split("---")[1])
    assert front["configs"] == [
        {"config_name": "default", "data_files": [{"split": "test", "path": "data/test.jsonl"}]}
    ]
    assert "inspect eval quintd1-dev-spans/spanjudge_task.py --model hf/YOUR_JUDGE" in card
    rows = [json.loads(line) for line in (staged / "data/test.jsonl").read_text().splitlines()]
    assert len(rows) == 12 and all(r["task"] == "quintd1" and r["aspect"] == "accuracy" for r in rows)
    for row in rows:  # each gold span's text is at its offsets, and the prompt shows the output it judges
        assert all(row["output"][g["start"] : g["end"]] == g["text"] for g in row["gold_spans"])
        assert row["output"] in row["prompt"]


def test_inspect_runs_the_staged_task_and_scores_the_judges_spans_with_mpp(
    staged: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = [json.loads(line) for line in (staged / "data/test.jsonl").read_text().splitlines()]

    def unique(row: dict[str, Any]) -> bool:  # the oracle's quotes are placed where the people marked them
        return bool(row["gold_spans"]) and all(row["output"].count(g["text"]) == 1 for g in row["gold_spans"])

    oracle = [r for r in rows if unique(r)][:3]
    silent = next(r for r in rows if r["gold_spans"] and r not in oracle)
    chosen = {r["id"] for r in [*oracle, silent]}
    replies = {r["id"]: _reply([g["text"] for g in r["gold_spans"]], 40) for r in oracle}
    replies[silent["id"]] = _reply([], 100)  # "No Error" where people marked errors
    # the other rows get no reply at all, which is unscored
    order = [replies.get(r["id"], "I cannot help with that.") for r in rows]
    outputs = [ModelOutput.from_content("mockllm/model", o) for o in order]
    for output in outputs:  # given, or the mock model counts tokens with tiktoken, which downloads its vocabulary
        output.usage = ModelUsage()
    model = get_model("mockllm/model", custom_outputs=outputs)
    monkeypatch.chdir(staged)  # inspect finds a task file by a path relative to where it runs
    [log] = inspect_eval("spanjudge_task.py", model=model, max_samples=1, log_dir=str(tmp_path / "logs"),
                         display="none")  # fmt: skip
    assert log.status == "success", log.error
    scores = {str(s.id): s.scores["spanjudge_error_spans"] for s in log.samples or []}
    assert all((scores[i].metadata or {}).get("mpp") is not None for i in chosen)
    assert all(scores[r["id"]].value != scores[r["id"]].value for r in rows if r["id"] not in chosen)  # nan: unscored
    # micro MPP over the four scored samples: the oracle's spans are the people's (precision 1, each gold span
    # credited in full), "No Error" predicts nothing and misses its spans
    gold = {r["id"]: len(r["gold_spans"]) for r in rows}
    expected_recall = sum(gold[r["id"]] for r in oracle) / sum(gold[i] for i in chosen)
    metrics = log.results.scores[0].metrics  # type: ignore[union-attr]
    assert metrics["mpp_precision"].value == pytest.approx(1.0)
    assert metrics["mpp_recall"].value == pytest.approx(expected_recall)
    assert metrics["mpp_f1"].value == pytest.approx(2 * expected_recall / (1 + expected_recall))


def test_inspect_eval_on_the_command_line_runs_the_staged_task(staged: Path, tmp_path: Path) -> None:
    """As the card says to run it, with a real model through inspect's own `hf/` provider: SmolLM2-135M-Instruct
    (a local transformers folder), which is no judge: its few tokens are no reply the contract reads."""
    model = f"hf/{convert_gguf(smollm2_gguf())}"
    command = [str(BIN / "inspect"), "eval", "spanjudge_task.py", "--model", model, "--limit", "1", "--max-tokens", "8",
               "--log-dir", str(tmp_path / "logs"), "--log-format", "json", "--display", "none"]  # fmt: skip
    done = subprocess.run(command, cwd=staged, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [log_file] = (tmp_path / "logs").glob("*.json")
    log = json.loads(log_file.read_text())
    assert log["status"] == "success" and log["eval"]["task"].endswith("error_spans"), log.get("error")
    [sample] = log["samples"]
    assert sample["output"]["choices"][0]["message"]["content"]  # the model wrote
    # what it wrote is no judge reply: unscored and named as such, never counted as 0
    assert sample["scores"]["spanjudge_error_spans"]["explanation"].startswith("unparsed reply")


class _Hub(BaseHTTPRequestHandler):
    """The one call `HfApi.file_exists` makes: HEAD on a dataset file; only someone/quintd1-dev-spans has eval.yaml."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        found = self.path.startswith("/datasets/someone/quintd1-dev-spans/resolve/main/eval.yaml")
        self.send_response(200 if found else 404)
        self.send_header("Content-Length", "0")
        if not found:
            self.send_header("X-Error-Code", "EntryNotFound")  # the repository is there, the file is not
        if found:
            self.send_header("ETag", '"abc"')
            self.send_header("X-Repo-Commit", "a" * 40)
        self.end_headers()


@pytest.fixture
def hub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def test_only_a_hub_dataset_that_is_no_benchmark_is_warned_about(hub: str, tmp_path: Path) -> None:
    from huggingface_hub import HfApi  # noqa: F401  (imported here so the child's import is the same library)

    code = (
        "from spanjudge.publish.hub import is_hub_benchmark\n"
        "print(is_hub_benchmark('someone/quintd1-dev-spans', None), is_hub_benchmark('someone/plain', None))\n"
    )
    env = {**os.environ, "HF_ENDPOINT": hub, "HF_HUB_OFFLINE": "0", "HF_HOME": str(tmp_path / "hf-home")}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "False"]


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--benchmark", "quintd1:dev", "--merged"], "--merged does not go with --benchmark"),
        (["--benchmark", "factgenie:runs/x"], "factgenie holds no inputs"),
        (["--benchmark", "quintd1:train"], "quintd1 is named quintd1, quintd1:dev or quintd1:test"),
        (["--dataset-dir", "runs/x", "--max-items", "3"], "give --benchmark SET too"),
        (["--benchmark", "quintd1:dev", "--max-items", "0"], "--max-items must be at least 1"),
    ],
)
def test_a_benchmark_asked_for_wrongly_is_one_line(
    extra: list[str], said: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["publish", *extra, "--repo-id", "someone/x", "--dry-run", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
