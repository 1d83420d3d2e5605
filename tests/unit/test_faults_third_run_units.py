"""The third fault-injection run (issue #46), the items that need no model and no server: comparisons that
refuse apples against oranges, factgenie campaigns and results rows that cannot mean what they say, writes
that leave nothing behind on a full disk and honour the umask, a torn checkpoint, time-based checkpoints,
a crashed child said as a crash, span metrics in (n + m) log, one-line annotator fields, and the llama.cpp
build check. Each test failed on the main the issue was filed against."""

from __future__ import annotations

import errno
import json
import math
import os
import random
import signal
import stat
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from spanjudge.app.cli import main as cli_main
from spanjudge.core.crash import crashed, describe_exit
from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_directory, atomic_write_text
from spanjudge.eval.compare import compare_systems, markdown
from spanjudge.eval.spans import metrics
from spanjudge.inference.backends.llamacpp import build as llamacpp_build
from spanjudge.inference.contract.parse import parse_annotator
from spanjudge.inference.score.interchange import read_factgenie_campaign

REPO = Path(__file__).resolve().parents[2]
OUTPUT = "The café opened in 1998 and closed in 2003 after a fire."


def _one_line(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    return err.strip().splitlines()[-1]


# -- 0. llama.cpp built for this CPU, never with AMX ------------------------------------------------

HASWELL = frozenset({"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"})
AVX512 = {"avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw", "avx512vbmi", "avx512_vnni", "avx512_bf16"}
SAPPHIRE_RAPIDS = HASWELL | AVX512 | {"avx_vnni", "amx_tile", "amx_int8", "amx_bf16"}


def test_the_build_flags_name_the_hosts_instruction_sets_and_never_amx() -> None:
    args = llamacpp_build.cmake_args(SAPPHIRE_RAPIDS).split()
    assert "-DGGML_NATIVE=OFF" in args  # never -march=native, which compiles ggml's AMX path on such a host
    assert {"-DGGML_AMX_TILE=OFF", "-DGGML_AMX_INT8=OFF", "-DGGML_AMX_BF16=OFF"} <= set(args)
    assert {"-DGGML_AVX512=ON", "-DGGML_AVX512_VNNI=ON", "-DGGML_AVX2=ON"} <= set(args)
    older = llamacpp_build.cmake_args(HASWELL).split()
    assert {"-DGGML_AVX2=ON", "-DGGML_AVX512=OFF", "-DGGML_AVX512_BF16=OFF", "-DGGML_AVX_VNNI=OFF"} <= set(older)


def test_a_build_with_amx_or_with_what_the_cpu_lacks_is_a_problem() -> None:
    info = "CPU : SSE3 = 1 | AVX = 1 | AVX2 = 1 | AVX512 = 1 | AMX_INT8 = 1 | LLAMAFILE = 1 | OPENMP = 1 |"
    compiled = llamacpp_build.compiled_features(info)
    assert compiled == {"SSE3", "AVX", "AVX2", "AVX512", "AMX_INT8"}
    on_amx_host = llamacpp_build.problems(compiled, SAPPHIRE_RAPIDS | {"pni"})
    assert len(on_amx_host) == 1 and "AMX" in on_amx_host[0] and "ldtilecfg" in on_amx_host[0]
    on_haswell = llamacpp_build.problems(compiled, HASWELL | {"pni"})
    assert any("AVX512" in p and "SIGILL" in p and "avx512f" in p for p in on_haswell)
    assert llamacpp_build.problems({"SSE3", "AVX", "AVX2"}, HASWELL | {"pni"}) == []


def test_the_installed_llamacpp_runs_on_this_cpu() -> None:
    """What `make install` built (or took from pip's cache) carries no AMX code path and no instruction
    set this host lacks; a native build on an AMX host fails here."""
    assert llamacpp_build.installed_problems() == []
    assert subprocess.run([sys.executable, str(REPO / "inference/backends/llamacpp/build.py"), "check"]).returncode == 0


def test_a_crashed_child_is_said_as_a_crash() -> None:
    assert describe_exit(-signal.SIGSEGV).startswith("killed by SIGSEGV (signal 11")
    assert "out-of-memory killer" in describe_exit(-signal.SIGKILL)
    assert "another CPU" in describe_exit(-signal.SIGILL)
    assert describe_exit(3) == "exit code 3"
    assert crashed(-signal.SIGSEGV) and crashed(-signal.SIGKILL)
    assert not crashed(-signal.SIGTERM) and not crashed(0) and not crashed(None)


# -- 4. compare: like with like, finite scores, one row per item, a bounded alpha ------------------


def _row(item: str, score: Any, *, aspect: str = "relevance", severity: Any = 2, model: str = "judge-a") -> dict:
    error = {"location": "x", "start": 0, "end": 1, "severity": severity, "explanation": "e"}
    return {"id": item, "task": "summeval", "aspect": aspect, "model": model, "output": "xyz",
            "evaluation": {"errors": [error], "score": score}}  # fmt: skip


def _system(scores: list[Any], **settings: Any) -> list[dict]:
    return [_row(f"i{n}", score, **settings) for n, score in enumerate(scores)]


def test_compare_refuses_results_of_another_aspect_or_judge_unless_allowed() -> None:
    a = _system([40, 50, 60, 70])
    with pytest.raises(InputError, match=r"different aspects \(A: relevance; B: coherence\).*--allow-mixed"):
        compare_systems({"A": a, "B": _system([50, 60, 70, 80], aspect="coherence")}, resamples=100)
    with pytest.raises(InputError, match="different judges"):
        compare_systems({"A": a, "B": _system([50, 60, 70, 80], model="judge-b")}, resamples=100)
    mixed = compare_systems(
        {"A": a, "B": _system([50, 60, 70, 80], aspect="coherence")}, resamples=100, allow_mixed=True
    )
    assert mixed.mixed == {"aspect": {"A": "relevance", "B": "coherence"}}
    assert markdown(mixed).startswith("**Mixed settings (--allow-mixed)**: the systems differ in aspect")
    with pytest.raises(InputError, match="system 'A' mixes rows of several aspects"):
        compare_systems({"A": [*a, _row("i9", 10, aspect="coherence")], "B": a}, resamples=100)


@pytest.mark.parametrize(
    ("bad", "said"),
    [
        (math.nan, "score nan is not a number within 0-100"),
        (math.inf, "score inf is not a number within 0-100"),
        (1e9, "score 1000000000.0 is not a number within 0-100"),
        ("70", "score '70' is not a number within 0-100"),
    ],
)
def test_compare_refuses_a_score_outside_the_contract(bad: Any, said: str) -> None:
    a, b = _system([40, 50, 60, 70]), _system([50, 60, 70, 80])
    b[2]["evaluation"]["score"] = bad
    with pytest.raises(InputError, match=rf"system 'B', id 'i2' \(row 3\): {said}"):
        compare_systems({"A": a, "B": b}, resamples=100)


def test_compare_refuses_repeated_ids_string_severities_and_a_bad_alpha() -> None:
    a, b = _system([40, 50, 60, 70]), _system([50, 60, 70, 80])
    with pytest.raises(InputError, match=r"system 'B': id 'i1' appears twice \(row 5\)"):
        compare_systems({"A": a, "B": [*b, _row("i1", 99)]}, resamples=100)
    with pytest.raises(InputError, match="severity 'major' is not a number within 1-5"):
        compare_systems({"A": a, "B": _system([50, 60, 70, 80], severity="major")}, resamples=100)
    for alpha in (1.5, 0, -0.1):
        with pytest.raises(InputError, match="alpha must be between 0 and 1"):
            compare_systems({"A": a, "B": b}, resamples=100, alpha=alpha)


def _results(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_compare_cli_never_writes_over_its_results_or_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = _results(tmp_path / "a.jsonl", _system([40, 50, 60, 70]))
    b = _results(tmp_path / "b.json", _system([50, 60, 70, 80]))
    before = b.read_bytes()
    args = ["compare", "--results", str(a), "--results", str(b), "--resamples", "100"]
    assert cli_main([*args, "--out", str(b)]) == 2
    assert "is one of this command's inputs" in _one_line(capsys) and b.read_bytes() == before
    (tmp_path / "notes.md").write_text("my notes\n")
    assert cli_main([*args, "--out", str(tmp_path / "notes.json")]) == 2
    assert "the file exists and is not spanjudge's comparison table" in _one_line(capsys)
    assert (tmp_path / "notes.md").read_text() == "my notes\n"
    assert cli_main([*args, "--out", str(tmp_path / "cmp.json")]) == 0
    assert cli_main([*args, "--out", str(tmp_path / "cmp.json")]) == 0  # its own files: overwritten
    assert cli_main([*args, "--alpha", "1.5"]) == 2 and "alpha must be between 0 and 1" in _one_line(capsys)


def test_the_plot_of_many_categories_stays_a_readable_size(tmp_path: Path) -> None:
    from PIL import Image

    def with_categories(score: float) -> list[dict]:
        rows = _system([score, score + 5, score + 10])
        for row in rows:
            row["evaluation"]["errors"] = [
                {"location": "x", "start": 0, "end": 1, "severity": 2, "explanation": "e", "category": f"c{k}"}
                for k in range(800)
            ]
        return rows

    args = ["compare", "--results", str(_results(tmp_path / "a.jsonl", with_categories(40)))]
    args += ["--results", str(_results(tmp_path / "b.jsonl", with_categories(60))), "--resamples", "100"]
    assert cli_main([*args, "--out", str(tmp_path / "cmp.json")]) == 0
    width, height = Image.open(tmp_path / "cmp.png").size
    assert width <= 8 * 4 * 110 and height <= 4 * 110  # at most 8 panels of 4 inches at 110 dpi
    assert "'c799' errors per output" in (tmp_path / "cmp.md").read_text()  # every category is in the table


# -- 7. render writes only over what it wrote ------------------------------------------------------


def _scores(path: Path, rows: list[dict] | None = None) -> Path:
    return _results(path, rows or [_row("a", 60)])


@pytest.mark.parametrize("to", ["xcomet", "html"])
def test_render_never_overwrites_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], to: str
) -> None:
    results = _scores(tmp_path / "scores.jsonl")
    other = tmp_path / "other.jsonl"
    other.write_text('{"my": "data"}\n')
    assert cli_main(["render", str(results), "--to", to, "--out", str(other)]) == 2
    assert "the file exists and is not spanjudge's" in _one_line(capsys) and other.read_text() == '{"my": "data"}\n'
    mine = tmp_path / f"mine.{to}"
    assert cli_main(["render", str(results), "--to", to, "--out", str(mine)]) == 0
    assert cli_main(["render", str(results), "--to", to, "--out", str(mine)]) == 0  # again: its own file
    assert cli_main(["render", str(results), "--to", to, "--out", str(results)]) == 2
    assert "is one of this command's inputs" in _one_line(capsys)


# -- 13. rows of other tools are checked as spanjudge's own ----------------------------------------


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda row: row.pop("task"), "the row has no task"),
        (lambda row: row["evaluation"]["errors"][0].pop("explanation"), "error 1: has no explanation text"),
        (lambda row: row["evaluation"]["errors"][0].update(severity=None), "severity None is not an integer 1-5"),
        (lambda row: row["evaluation"]["errors"][0].update(severity=9), "severity 9 is not an integer 1-5"),
        (lambda row: row["evaluation"]["errors"][0].update(start="0"), "offsets '0', 1 are not both integers"),
        (lambda row: row["evaluation"]["errors"][0].update(end=99), r"offsets \[0, 99\) are not a range inside"),
        (lambda row: row["evaluation"]["errors"][0].update(start=-2), r"offsets \[-2, 1\) are not a range inside"),
    ],
)
@pytest.mark.parametrize("to", ["xcomet", "factgenie"])
def test_render_checks_foreign_rows_and_copies_no_impossible_offset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: Any, said: str, to: str
) -> None:
    row = _row("a", 60)
    change(row)
    results = _scores(tmp_path / "scores.jsonl", [row])
    assert cli_main(["render", str(results), "--to", to]) == 2
    line = _one_line(capsys)
    assert f"{results}:1" in line and __import__("re").search(said, line), line
    assert not (tmp_path / "scores.xcomet.jsonl").exists() and not (tmp_path / "scores-factgenie").exists()


# -- 8, 9. a full disk leaves no temporary file; the umask is honoured -----------------------------


def test_a_failed_atomic_write_leaves_no_temporary_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def full(descriptor: int) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match="No space left"):
        atomic_write_text(tmp_path / "results.json", "x" * 1000)
    assert list(tmp_path.iterdir()) == []


def test_written_files_and_folders_follow_the_umask(tmp_path: Path) -> None:
    previous = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "shared.json", "{}")
        with atomic_directory(tmp_path / "dataset", "test output") as scratch:
            (scratch / "part.txt").write_text("x")
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.json", "{}")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "shared.json").stat().st_mode) == 0o644
    assert stat.S_IMODE((tmp_path / "dataset").stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "private.json").stat().st_mode) == 0o600


# -- 12. hostile factgenie campaigns: one line naming the file and line ----------------------------


def _campaign(folder: Path, *, metadata: Any = None, lines: list[bytes] | None = None) -> Path:
    (folder / "files").mkdir(parents=True)
    categories = {"config": {"annotation_span_categories": [{"name": "Incorrect", "color": "#f00"}]}}
    (folder / "metadata.json").write_text(json.dumps(categories if metadata is None else metadata))
    record = {"dataset": "d", "split": "test", "setup_id": "s", "example_idx": 0, "output": OUTPUT,
              "annotations": [{"text": "1998", "start": OUTPUT.index("1998"), "type": 0}]}  # fmt: skip
    (folder / "files" / "a.jsonl").write_bytes(b"\n".join(lines or [json.dumps(record).encode()]) + b"\n")
    return folder


def _record(**changes: Any) -> bytes:
    record = {"dataset": "d", "split": "test", "setup_id": "s", "example_idx": 0, "output": OUTPUT,
              "annotations": [{"text": "1998", "start": OUTPUT.index("1998"), "type": 0}], **changes}  # fmt: skip
    return json.dumps(record).encode()


@pytest.mark.parametrize(
    ("build", "said"),
    [
        (lambda f: _campaign(f, lines=[_record(), "caf\xe9".encode("latin-1")]), r"a\.jsonl:2: not UTF-8 text"),
        (lambda f: _campaign(f, metadata=[1, 2]), r"metadata\.json: not a factgenie campaign's metadata"),
        (
            lambda f: _campaign(f, metadata={"config": {"annotation_span_categories": [{"color": "#f00"}]}}),
            r"metadata\.json: span category 0 has no name",
        ),
        (lambda f: _campaign(f, lines=[_record(output=17)]), r"a\.jsonl:1: the record's output must be text, got int"),
        (lambda f: _campaign(f, lines=[_record(annotations=["1998"])]), r"a\.jsonl:1: a span must be an object"),
        (
            lambda f: _campaign(f, lines=[_record(annotations=[{"text": "fire.", "start": -5, "type": 0}])]),
            r"a\.jsonl:1: span 'fire\.' is not at character -5",
        ),
        (lambda f: _campaign(f, lines=[_record(metadata=[1])]), r"a\.jsonl:1: the record's metadata must be an object"),
    ],
)
def test_a_hostile_campaign_is_one_line(tmp_path: Path, build: Any, said: str) -> None:
    folder = build(tmp_path / "campaign")
    with pytest.raises(InputError, match=said):
        read_factgenie_campaign(folder)


def test_a_folder_named_like_an_annotation_file_is_one_line(tmp_path: Path) -> None:
    folder = _campaign(tmp_path / "campaign")
    (folder / "files" / "x.jsonl").mkdir()
    with pytest.raises(InputError, match=r"x\.jsonl: is not a file"):
        read_factgenie_campaign(folder)


# -- 15. span metrics in (spans + tokens) · log, as the quadratic definitions --------------------


def _quadratic_overlap(predicted: list, gold: list) -> list[bool]:
    remaining, matched = sorted(predicted), [False] * len(gold)
    for g in sorted(range(len(gold)), key=lambda i: gold[i]):
        for p, (start, end) in enumerate(remaining):
            if start < gold[g][1] and gold[g][0] < end:
                del remaining[p]
                matched[g] = True
                break
    return matched


def test_the_fast_span_metrics_equal_their_definitions() -> None:
    rng = random.Random(7)
    for _ in range(2000):
        size = rng.randint(1, 50)

        def spans(count: int, size: int = size) -> list[tuple[int, int]]:
            starts = [rng.randint(0, size) for _ in range(count)]
            return [(s, rng.randint(s + 1, size + 2)) for s in starts]

        predicted, gold = spans(rng.randint(0, 9)), spans(rng.randint(0, 9))
        text = "".join(rng.choice("ab  ") for _ in range(size + 2))
        assert metrics.overlap_matches(predicted, gold) == _quadratic_overlap(predicted, gold)
        tokens = metrics.token_spans(text)
        marked = {i for i, (ts, te) in enumerate(tokens) for s, e in predicted if s < te and ts < e}
        assert metrics._marked_tokens(predicted, tokens) == marked


# -- 18. an annotator that writes an error's fields on one line -----------------------------------


def test_fields_on_one_line_are_read() -> None:
    reply = (
        'Error 1: Location: "family friendly"; Explanation: data says not family friendly; Severity: 4\n'
        "Overall score: Poor"
    )
    parsed = parse_annotator(reply)
    assert not hasattr(parsed, "reason"), parsed
    [error] = parsed.errors
    assert (error.location, error.explanation, error.severity) == (
        "family friendly",
        "data says not family friendly",
        4,
    )
    piped = parse_annotator('Error 1: Location: "a; b" | Explanation: x; and y | Severity: 2\nOverall score: Fair')
    [error] = piped.errors
    assert (error.location, error.explanation, error.severity) == ("a; b", "x; and y", 2)


# -- 5, 17. a torn checkpoint is set aside; checkpoints by time ------------------------------------


def test_resume_skips_a_torn_checkpoint_and_sets_it_aside(tmp_path: Path) -> None:
    from spanjudge.training.checkpoints import TRAINER_STATE, resume_point

    for step, complete in ((10, True), (20, True), (30, False)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        if complete:
            (folder / TRAINER_STATE).write_text("{}")
    said: list[str] = []
    assert resume_point(tmp_path, main=False, say=said.append) == str(tmp_path / "checkpoint-20")
    assert said == [] and (tmp_path / "checkpoint-30").is_dir()  # another process only skips it
    assert resume_point(tmp_path, main=True, say=said.append) == str(tmp_path / "checkpoint-20")
    assert not (tmp_path / "checkpoint-30").exists() and (tmp_path / "torn-checkpoint-30").is_dir()
    assert len(said) == 1 and "checkpoint-30 is incomplete" in said[0]
    assert resume_point(tmp_path / "absent", main=True, say=said.append) is None


def test_a_checkpoint_is_asked_for_once_the_minutes_have_passed() -> None:
    from spanjudge.training.checkpoints import TimedSaves

    now = [0.0]
    saves = TimedSaves(minutes=5, clock=lambda: now[0])
    control = SimpleNamespace(should_save=False)
    now[0] = 299.0
    assert not saves.on_step_end(None, None, control).should_save
    now[0] = 301.0
    assert saves.on_step_end(None, None, control).should_save
    saves.on_save(None, None, control)
    control.should_save = False
    now[0] = 400.0
    assert not saves.on_step_end(None, None, control).should_save


def test_a_killed_training_in_the_bench_names_the_signal_the_memory_and_the_levers(tmp_path: Path) -> None:
    from spanjudge.eval.distill.phases import run_command

    log = tmp_path / "train.log"
    spanjudge = tmp_path / "spanjudge"  # a stand-in for `spanjudge train` that the kernel kills
    spanjudge.write_text("#!/bin/sh\nkill -KILL $$\n")
    spanjudge.chmod(0o755)
    with pytest.raises(SystemExit) as stopped:
        run_command([str(spanjudge), "train", "--config", "x.yaml"], log)
    message = str(stopped.value)
    assert "killed by SIGKILL" in message and "out-of-memory killer" in message and "peak memory" in message
    assert "--device-batch" in message and "data.max_length" in message and "resumes" in message
    assert "killed by SIGKILL" in log.read_text()  # the log says how it ended too


# -- 2. a scores file judged on other texts than the campaign's -------------------------------------


def test_a_scores_row_judged_on_another_text_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from spanjudge.inference.score.interchange import write_factgenie_campaign

    start = OUTPUT.index("1998")
    row = {"id": "a", "task": "summeval", "aspect": "consistency", "output": OUTPUT,
           "evaluation": {"score": 60, "errors": [{"location": "1998", "start": start, "end": start + 4,
                                                   "severity": 3, "explanation": "e"}]}}  # fmt: skip
    scores = _results(tmp_path / "scores.jsonl", [row])

    def campaign(folder: Path, output: str) -> Path:
        metadata = {"id": "humans", "config": {"annotation_span_categories": [{"name": "Incorrect"}]}}
        record = {"dataset": "cafes", "split": "test", "setup_id": "gpt", "example_idx": 0, "output": output,
                  "metadata": {"spanjudge_id": "a", "task": "summeval", "aspect": "consistency"},
                  "annotations": [{"text": output[start : start + 4], "start": start, "type": 0}]}  # fmt: skip
        write_factgenie_campaign(folder, metadata, [record], "humans-1")
        return folder

    same = campaign(tmp_path / "same", OUTPUT)
    args = ["meta-eval", "--judge", f"scores:{scores}", "--spans"]
    assert cli_main([*args, f"factgenie:{same}", "--out", str(tmp_path / "e1")]) == 0
    other = campaign(tmp_path / "other", OUTPUT.replace("1998", "2001").replace("café", "shop"))  # ids match, texts not
    assert cli_main([*args, f"factgenie:{other}", "--out", str(tmp_path / "e2")]) == 2
    line = _one_line(capsys)
    assert f"{scores}:1: id 'a' was judged on another text" in line and "they part at character 4" in line, line


def test_score_never_writes_its_page_over_a_file_it_did_not_write(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    page = tmp_path / "scores.html"
    page.write_text("<p>my notes</p>")
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "x", "summary": "y"}) + "\n")
    args = ["score", "--model", "judge", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1",
            "--data", str(data), "--out", str(tmp_path / "scores.jsonl"), "--task", "qags_xsum",
            "--aspect", "factual consistency", "--input", "Article=article", "--output-field", "summary",
            "--format", "html"]  # fmt: skip
    assert cli_main(args) == 2
    assert "the file exists and is not spanjudge's page" in _one_line(capsys)
    assert page.read_text() == "<p>my notes</p>" and not (tmp_path / "scores.jsonl").exists()
