"""The `spanjudge` console script, run as a user runs it (a real subprocess)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SPANJUDGE = str(Path(sys.executable).with_name("spanjudge"))


def run(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200"}  # rich folds tables to the terminal width
    return subprocess.run([SPANJUDGE, *args], capture_output=True, text=True, input=stdin, timeout=120, env=env)


def test_help_teaches_the_pipeline_and_lists_commands() -> None:
    result = run("--help")
    assert result.returncode == 0, result.stderr
    for word in (
        "annotate",
        "train",
        "score",
        "meta-eval",
        "perturb",
        "publish",
        "demo",
        "tasks",
        "Pipeline",
    ):
        assert word in result.stdout


def test_tasks_json_lists_the_catalog() -> None:
    result = run("tasks", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    training = [t for c in data["categories"] for t in c["tasks"] if t["role"] == "training"]
    assert len(training) >= 13
    assert len({c["name"] for c in data["categories"] if any(t["role"] == "training" for t in c["tasks"])}) == 5
    for category in data["categories"]:
        for task in category["tasks"]:
            assert task["aspects"] and all(a["definition"].strip() for a in task["aspects"])


def test_tasks_table_and_one_task() -> None:
    table = run("tasks")
    assert table.returncode == 0 and "news_summarization" in table.stdout
    one = run("tasks", "--task", "topical_chat")
    assert one.returncode == 0 and "groundedness" in one.stdout


def test_bad_config_is_one_line_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("category: mine\ntitle: Mine\naspects: {}\ntasks: {}\n")
    result = run("tasks", "--catalog", str(bad))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert "bad.yaml" in lines[0] and "aspects" in lines[0]


def test_unknown_task_is_one_line_exit_2() -> None:
    result = run("tasks", "--task", "sumeval")
    assert result.returncode == 2 and "did you mean 'summeval'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_prompt_command_prints_the_rendered_prompt() -> None:
    result = run("prompt", "--kind", "judge", "--task", "summeval", "--aspect", "fluency",
                 "--input", "Article=The match ended 2-2.", "--output", "A draw.")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "### Aspect Definition" in result.stdout and "The match ended 2-2." in result.stdout


def test_parse_command_reads_stdin_and_anchors(tmp_path: Path) -> None:
    output = tmp_path / "output.txt"
    output.write_text("The team won on Sunday.")
    reply = "Error 1:\nLocation: on Sunday\nExplanation: It was Saturday.\nSeverity: 2\n\nOverall score: 70"
    result = run("parse", "-", "--kind", "judge", "--output-file", str(output), stdin=reply)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["score"] == 70 and data["errors"][0]["start"] == 13 and data["errors"][0]["anchor"] == "exact"


def test_parse_command_reports_a_failure_without_a_score() -> None:
    result = run("parse", "-", "--kind", "annotator", stdin="Overall score: Good to Excellent")
    assert result.returncode == 1
    assert json.loads(result.stdout) == {
        "ok": False,
        "reason": "the overall score names several labels: 'Good to Excellent'",
    }


def test_missing_file_is_a_clear_error() -> None:
    result = run("parse", "/nonexistent/reply.txt")
    assert result.returncode == 2 and "/nonexistent/reply.txt" in result.stderr and "Traceback" not in result.stderr


def test_annotate_with_a_missing_ensemble_file_is_one_line(tmp_path: Path) -> None:
    sources = Path(__file__).resolve().parents[2] / "configs" / "sources" / "summeval_tiny.yaml"
    result = run(
        "annotate", "--ensemble", str(tmp_path / "nope.yaml"), "--sources", str(sources), "--out", str(tmp_path)
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [f"error: {tmp_path / 'nope.yaml'}: file not found"]
