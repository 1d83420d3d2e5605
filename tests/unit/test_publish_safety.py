"""`spanjudge publish` on hostile or messy run folders (issue #19 items 1-2) and on the
multi-judge results.json of `spanjudge meta-eval` (issue #15 item 2). No network, no model:
the adapter is a real, tiny safetensors file, and results.json is written by meta-eval's own
report writer, so a change to its layout breaks these tests rather than the card."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import yaml
from safetensors.numpy import save_file

from spanjudge.app.cli import main
from spanjudge.eval.correlation.report import write_reports
from spanjudge.eval.correlation.runner import Cell, MetaEvalResult

FAKE_TOKEN = "hf_fakeTOKENfakeTOKENfakeTOKEN1234567"
HUB_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"


def _run(root: Path, *, metadata: dict[str, str] | None = None) -> Path:
    """A run folder as `spanjudge train` leaves it, with machine-local paths in its config."""
    run = root / "run"
    adapter = run / "adapter"
    adapter.mkdir(parents=True)
    weights = {"base_model.model.layers.0.q_proj.lora_A.weight": np.zeros((4, 8), dtype=np.float32)}
    save_file(weights, str(adapter / "adapter_model.safetensors"), metadata=metadata or {"format": "pt"})
    (adapter / "adapter_config.json").write_text(
        json.dumps({"base_model_name_or_path": str(root / "bases" / "smol"), "r": 4, "peft_type": "LORA"})
    )
    (adapter / "tokenizer_config.json").write_text(json.dumps({"model_max_length": 2048}))
    (adapter / "spanjudge.json").write_text(
        json.dumps({"base_model": HUB_BASE, "train_file": str(root / "data" / "train.jsonl"), "max_length": 64})
    )
    (run / "train_config.yaml").write_text(
        "# resolved by spanjudge train\n"
        + yaml.safe_dump(
            {
                "model": {"base": HUB_BASE},
                "data": {"train": str(root / "data" / "train.jsonl"), "max_length": 64},
                "training": {"output_dir": str(run), "logging_dir": "~/logs/run", "max_steps": 2},
            },
            sort_keys=False,
        )
    )
    return run


def _publish(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = main(["publish", "--repo-id", "someone/tiny-judge", *args])
    return code, capsys.readouterr().err


def _refused(capsys: pytest.CaptureFixture[str], run: Path, out: Path, *words: str) -> str:
    code, err = _publish(capsys, "--model", str(run), "--dry-run", str(out))
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, (word, err)
    assert FAKE_TOKEN not in err and "root:" not in err
    assert not out.exists()  # nothing half-staged
    return err


# --- item 1: links, foreign files and what hides in safetensors ---------------------------


def test_symlinked_run_files_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    secret = tmp_path / "outside" / "token.txt"
    secret.parent.mkdir()
    secret.write_text(FAKE_TOKEN)
    passwd = Path("/etc/passwd")

    run = _run(tmp_path / "a")
    (run / "adapter" / "tokenizer.json").symlink_to(passwd if passwd.exists() else secret)
    _refused(capsys, run, tmp_path / "out-a", "tokenizer.json", "symbolic link")

    run = _run(tmp_path / "b")
    weights = run / "adapter" / "adapter_model.safetensors"
    weights.unlink()
    weights.symlink_to(secret)
    _refused(capsys, run, tmp_path / "out-b", "adapter_model.safetensors", "symbolic link")

    run = _run(tmp_path / "c")  # a link inside the run folder is still a link
    (run / "train_config.yaml").rename(run / "real.yaml")
    (run / "train_config.yaml").symlink_to(run / "real.yaml")
    _refused(capsys, run, tmp_path / "out-c", "train_config.yaml", "symbolic link")

    run = _run(tmp_path / "d")  # the adapter folder itself lives elsewhere
    elsewhere = tmp_path / "outside" / "adapter"
    (run / "adapter").rename(elsewhere)
    (run / "adapter").symlink_to(elsewhere)
    _refused(capsys, run, tmp_path / "out-d", "outside the run folder")


def test_safetensors_are_verified_and_their_headers_scanned(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path / "a")  # a token file under the weights' name
    (run / "adapter" / "adapter_model.safetensors").write_text(FAKE_TOKEN)
    _refused(capsys, run, tmp_path / "out-a", "adapter_model.safetensors", "not a valid safetensors file")

    run = _run(tmp_path / "b")  # cut short: the header promises more bytes than there are
    weights = run / "adapter" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16])
    _refused(capsys, run, tmp_path / "out-b", "adapter_model.safetensors", "not a valid safetensors file")

    run = _run(tmp_path / "c", metadata={"format": "pt", "note": f"pushed with {FAKE_TOKEN}"})
    _refused(capsys, run, tmp_path / "out-c", "token-like", "adapter_model.safetensors")

    run = _run(tmp_path / "d")  # a JSON escape in __metadata__ must not hide the token
    weights = run / "adapter" / "adapter_model.safetensors"
    data = weights.read_bytes()
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8 : 8 + size])
    header["__metadata__"]["note"] = "\\u0068" + FAKE_TOKEN[1:]
    text = json.dumps(header).replace("\\\\u0068", "\\u0068").encode()
    text += b" " * (-len(text) % 8)
    weights.write_bytes(len(text).to_bytes(8, "little") + text + data[8 + size :])
    _refused(capsys, run, tmp_path / "out-d", "token-like", "adapter_model.safetensors")


# --- item 2: machine-local paths ----------------------------------------------------------


def test_machine_local_paths_are_cut_everywhere_staged(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path)
    out = tmp_path / "staged"
    code, err = _publish(capsys, "--model", str(run), "--dry-run", str(out))
    assert code == 0, err
    home = str(Path.home())
    for path in out.iterdir():
        text = path.read_text(encoding="utf-8", errors="replace")
        assert str(tmp_path) not in text and str(tmp_path.resolve()) not in text, path.name
        assert "~/logs" not in text, path.name
        if len(Path(home).parts) > 1:
            assert home + os.sep not in text, path.name
    config = (out / "train_config.yaml").read_text()
    assert config.startswith("# resolved by spanjudge train\n")  # edited in place: comments kept
    loaded = yaml.safe_load(config)
    assert loaded["data"]["train"] == "train.jsonl" and loaded["training"]["output_dir"] == "run"
    assert loaded["training"]["logging_dir"] == "run" and loaded["model"]["base"] == HUB_BASE  # hub ids stay
    card = (out / "README.md").read_text()
    assert "output_dir: run\n" in card and "train: train.jsonl\n" in card
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_BASE
    assert json.loads((out / "spanjudge.json").read_text())["train_file"] == "train.jsonl"

    # a path only in free text (a comment, no value names it) is not rewritten: publishing stops
    (run / "train_config.yaml").write_text(f"# copied from {run.resolve()}/old\nmodel:\n  base: {HUB_BASE}\n")
    _refused(capsys, run, tmp_path / "out-2", "machine-local path", "train_config.yaml")


# --- #15 item 2: cards from multi-judge meta-eval results --------------------------------


def _cell(judge: str, aspect: str, value: float | None, low: float, high: float, scored: int) -> Cell:
    return Cell(judge, "summeval", aspect, "kendall", "summary", value, low, high, 1600, scored, 0, 100, 0, 0)


def _meta_eval(out: Path, judges: list[str]) -> Path:
    result = MetaEvalResult(suite="thesis", judges=judges, datasets={})
    for index, judge in enumerate(judges):
        base = 0.1 * (index + 1)
        result.cells += [
            _cell(judge, "coherence", base + 0.012, base - 0.03, base + 0.05, 1590 + index),
            _cell(judge, "fluency", base + 0.021, base - 0.02, base + 0.06, 1580 + index),
            _cell(judge, "relevance", None, 0.0, 0.0, 0),  # undefined: left out and counted
        ]
    return write_reports(result, None, out)[0]


def test_card_holds_only_the_published_judges_rows_with_intervals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _run(tmp_path)
    # the README's recipe: the distilled judge and a ROUGE baseline in one results.json
    results = _meta_eval(tmp_path / "meta_eval", ["distilled:adapter", "metric:rouge1"])
    out = tmp_path / "staged"
    code, err = _publish(capsys, "--model", str(run), "--dry-run", str(out), "--eval-results", str(results))
    assert code == 0, err
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n", 2)[1])
    [entry] = front["model-index"]
    values = sorted(m["value"] for result in entry["results"] for m in result["metrics"])
    assert values == [0.112, 0.121]  # the distilled judge's two defined cells, once each
    assert "judge `distilled:adapter`" in card
    assert "| 0.112 | [0.070, 0.150] | 1590 |" in card and "| 0.121 | [0.080, 0.160] | 1580 |" in card
    assert "0.212" not in card and "0.221" not in card  # no ROUGE row
    assert "1 rows of the results file" in card

    # two judges that could be the published one: the user names it
    results = _meta_eval(tmp_path / "two", ["distilled:adapter", "distilled:base", "metric:bleu"])
    code, err = _publish(capsys, "--model", str(run), "--dry-run", str(out), "--eval-results", str(results))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert "several judges" in err and "--judge-name" in err and "distilled:base" in err
    code, err = _publish(
        capsys, "--model", str(run), "--dry-run", str(out), "--eval-results", str(results),
        "--judge-name", "distilled:base",
    )  # fmt: skip
    assert code == 0, err
    card = (out / "README.md").read_text()
    assert "| 0.212 | [0.170, 0.250] | 1591 |" in card and "0.112" not in card and "0.312" not in card
    code, err = _publish(
        capsys, "--model", str(run), "--dry-run", str(out), "--eval-results", str(results), "--judge-name", "nope"
    )
    assert code == 2 and "'nope' is not a judge" in err and "distilled:adapter" in err, err

    # baselines only: nothing to publish unless named
    results = _meta_eval(tmp_path / "base-only", ["metric:rouge1"])
    code, err = _publish(capsys, "--model", str(run), "--dry-run", str(out), "--eval-results", str(results))
    assert code == 2 and "only baseline judges" in err and "--judge-name" in err, err

    # a broken cell is named by file and field, not a traceback
    data = json.loads(results.read_text())
    data["cells"][1]["value"] = "high"
    results.write_text(json.dumps(data))
    code, err = _publish(capsys, "--model", str(run), "--dry-run", str(out), "--eval-results", str(results))
    assert code == 2 and "cells[1].value" in err and "Traceback" not in err, err
