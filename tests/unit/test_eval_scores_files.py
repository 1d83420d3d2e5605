"""Meta-evaluation judge stores and scores files (issue #19 items 5 and 11): each judge's
judgments are stored under what decides them, not under its display name, and a scores file
that cannot mean what it says is refused with its file and line. Real SummEval rows through
the real `spanjudge meta-eval` command (in this process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanjudge.app.cli import main as cli_main
from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite
from spanjudge.eval.judging.judge_files import ScoresFileJudge, model_fingerprint
from spanjudge.eval.judging.store import judgment_path
from spanjudge.eval.judging.suite import load_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"
ITEMS = 24
ASPECTS = ("coherence", "consistency", "fluency", "relevance")


def _summeval(shared_data: Path) -> list[tuple[str, dict[str, float]]]:
    """(item id, human scores) of the items `--max-items ITEMS` samples (whole inputs, seed 0)."""
    dataset = load_suite_dataset(open_suite(load_suite(SUITE), SUITE, shared_data), "summeval", ITEMS)
    return [(item.id, item.human) for item in dataset.items]


def write_scores(path: Path, shared_data: Path, sign: float) -> Path:
    """A stand-in for `spanjudge score` output: the human score (sign 1) or its mirror (sign -1)."""
    lines = []
    for item_id, human in _summeval(shared_data):
        for aspect in ASPECTS:
            score = 50 + sign * (human[aspect] - 3) * 20
            lines.append(json.dumps({"id": f"{item_id}@{aspect}", "evaluation": {"errors": [], "score": score}}))
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def meta_eval(out: Path, capsys: pytest.CaptureFixture[str], *judges: str) -> tuple[int, str]:
    args = ["meta-eval", "--suite", str(SUITE), "--dataset", "summeval", "--max-items", str(ITEMS)]
    args += ["--out", str(out), "--no-plots", "--resamples", "0"]
    for judge in judges:
        args += ["--judge", judge]
    code = cli_main(args)
    return code, capsys.readouterr().err


def coherence(out: Path, judge: str) -> float:
    data = json.loads((out / "results.json").read_text())
    [cell] = [
        c for c in data["cells"] if (c["judge"], c["aspect"], c["coefficient"]) == (judge, "coherence", "spearman")
    ]
    return cell["value"]


def test_two_scores_files_of_one_name_do_not_share_a_store(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the issue: A's judgments were reused for B (rho +0.41 reported where B gives -0.41)
    a = write_scores(tmp_path / "A" / "scores.jsonl", shared_data, 1)
    b = write_scores(tmp_path / "B" / "scores.jsonl", shared_data, -1)
    out = tmp_path / "run"
    assert meta_eval(out, capsys, f"scores:{a}")[0] == 0
    first = coherence(out, "scores:scores.jsonl")
    assert meta_eval(out, capsys, f"scores:{b}")[0] == 0
    second = coherence(out, "scores:scores.jsonl")
    assert first > 0.5 and second == pytest.approx(-first)
    stores = sorted(p.name for p in (out / "judgments").iterdir())
    assert len(stores) == 2 and all(name.startswith("scores_scores.jsonl-") for name in stores)

    # the same file again: its store is reused, nothing appended
    store = judgment_path(out, ScoresFileJudge(a))
    before = store.read_text()
    assert meta_eval(out, capsys, f"scores:{a}")[0] == 0
    assert store.read_text() == before and coherence(out, "scores:scores.jsonl") == first
    # the same path with other content is another judge
    write_scores(a, shared_data, -1)
    assert judgment_path(out, ScoresFileJudge(a)) != store


def test_adapters_in_folders_of_one_name_are_told_apart(tmp_path: Path) -> None:
    # `distilled:runs/x/adapter` and `distilled:runs/y/adapter` share the name distilled:adapter
    folders = []
    for run, weights in (("x", b"weights of run x"), ("y", b"weights of run y")):
        folder = tmp_path / run / "adapter"
        folder.mkdir(parents=True)
        (folder / "adapter_model.safetensors").write_bytes(weights)
        (folder / "spanjudge.json").write_text('{"format": "spanjudge-judge/1"}')
        folders.append(folder)
    x, y = (model_fingerprint(str(f)) for f in folders)
    assert x != y
    # retrained in place: same folder, new weights, new store
    (folders[0] / "adapter_model.safetensors").write_bytes(b"weights of run x, trained again")
    assert model_fingerprint(str(folders[0])) != x
    assert model_fingerprint("@smollm2") == "@smollm2"  # an alias or Hub id names itself


def _first_lines(path: Path, shared_data: Path) -> list[str]:
    return write_scores(path, shared_data, 1).read_text().splitlines()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        # a duplicate id silently took the last value (rho 0.41 -> -0.27 in the issue)
        (
            lambda lines: [*lines, json.dumps({"id": json.loads(lines[0])["id"], "evaluation": {"score": 5}})],
            "{path}:{last}: id '{first}' aspect 'coherence' is already scored at {path}:1",
        ),
        (
            lambda lines: [lines[0].replace(lines[0].split('"score": ')[1], "1e9}}"), *lines[1:]],
            "{path}:1: score 1000000000.0 is outside 0-100",
        ),
        (
            lambda lines: [lines[0].replace(lines[0].split('"score": ')[1], "-5}}"), *lines[1:]],
            "{path}:1: score -5 is outside 0-100",
        ),
        (lambda lines: ["", "  "], "{path}: the scores file holds no evaluation"),
    ],
    ids=["duplicate-id", "score-1e9", "negative-score", "empty-file"],
)
def test_a_scores_file_that_cannot_mean_what_it_says_is_refused_with_its_line(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str], change, message: str
) -> None:
    path = tmp_path / "scores.jsonl"
    lines = change(_first_lines(path, shared_data))
    path.write_text("\n".join(lines) + "\n")
    code, err = meta_eval(tmp_path / "out", capsys, f"scores:{path}")
    first = json.loads(lines[0])["id"].split("@")[0] if lines[0].strip() else ""
    assert code == 2 and message.format(path=path, last=len(lines), first=first) in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_unknown_aspects_of_a_scores_file_are_warned_about(
    tmp_path: Path, shared_data: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "scores.jsonl"
    lines = _first_lines(path, shared_data)
    lines.append(json.dumps({"id": "summeval-0@cohrence", "evaluation": {"score": 40}}))  # a typo
    path.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    code, err = meta_eval(out, capsys, f"scores:{path}")
    assert code == 0, err
    expected = f"{path}:{len(lines)}: aspect 'cohrence' is not an aspect of this suite"
    assert expected in " ".join(err.split())
    assert any(expected in w for w in json.loads((out / "results.json").read_text())["warnings"])
