"""`spanjudge publish`: the staged folder (allow-list, card metadata, no secrets), --merged, and
the missing-token failure. No network: uploads themselves are not exercised.

The run folder is real but tiny: a random 2-layer Llama with SmolLM2's tokenizer and a PEFT
LoRA adapter saved the way `spanjudge train` saves it, beside a checkpoint with optimizer and
RNG states that must never be uploaded."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from spanjudge.app.cli import main
from spanjudge.core.fileio import OUTPUT_MARKER

FAKE_TOKEN = "hf_fakeTOKENfakeTOKENfakeTOKEN1234567"
HUB_BASE = "HuggingFaceTB/SmolLM2-135M-Instruct"
REQUIRED = {"base_model", "library_name", "pipeline_tag", "license", "tags"}
FORBIDDEN = ("optimizer", "rng_state", "scheduler", "checkpoint", "training_args", "log_history", "metrics.json")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from spanjudge.inference.hf_models import convert_gguf
    from spanjudge.inference.shipped_models import smollm2_gguf

    root = tmp_path_factory.mktemp("publish")
    tokenizer = AutoTokenizer.from_pretrained(str(convert_gguf(smollm2_gguf())))
    torch.manual_seed(0)
    config = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=len(tokenizer),
        max_position_embeddings=256,
    )
    base = LlamaForCausalLM(config)
    base.save_pretrained(root / "tiny-base", safe_serialization=True)
    tokenizer.save_pretrained(root / "tiny-base")
    model = get_peft_model(base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    for name, param in model.named_parameters():
        if "lora_B" in name:  # trained-looking: a merge must change the base weights
            torch.nn.init.normal_(param, std=0.05)
    run = root / "run"
    adapter = run / "adapter"
    model.save_pretrained(adapter)
    tokenizer.save_pretrained(adapter)
    (adapter / "README.md").write_text("TRL's auto-generated card\n")
    (adapter / "training_args.bin").write_bytes(b"\x80pickle")
    checkpoint = run / "checkpoint-2"
    checkpoint.mkdir()
    for name in ("optimizer.pt", "rng_state.pth", "scheduler.pt", "training_args.bin"):
        (checkpoint / name).write_bytes(b"\x80state")
    shutil.copy(adapter / "adapter_model.safetensors", checkpoint)
    data = root / "annotate"
    data.mkdir()
    (data / "train.jsonl").write_text("")
    (data / "run.json").write_text(
        json.dumps(
            {
                "records": 40,
                "train": 36,
                "validation": 4,
                "unscored": 2,
                "model_calls": {"smollm2": 42, "gemma3": 42, "smollm2-sup": 40},
            }
        )
    )
    (data / "stats.json").write_text(json.dumps({
        "examples": 40, "unscored": 2,
        "counts_per_category": {"summarization": {"datasets": 1, "systems": 3, "aspects": 2, "examples": 40}},
        "counts_per_aspect": {"qags_xsum/factual consistency": 20, "news_summarization/coherence": 20},
        "parse_failure_rate": {"smollm2": 0.1, "gemma3": 0.05},
    }))  # fmt: skip
    train_config = {
        "model": {"base": "@smollm2", "dtype": "float32"},
        "lora": {"r": 4, "alpha": 8, "dropout": 0.0},
        "data": {"train": str(data), "max_length": 1536},
        "training": {"output_dir": str(run), "max_steps": 2},
    }
    (run / "train_config.yaml").write_text(yaml.safe_dump(train_config, sort_keys=False))
    (run / "metrics.json").write_text(json.dumps({"global_step": 2, "train_loss": 3.21, "train_examples": 36}))
    (run / "log_history.jsonl").write_text('{"loss": 3.2}\n')
    meta = {"format": "spanjudge-judge/1", "base_model": "@smollm2", "max_length": 1536,
            "train_file": str(data / "train.jsonl"), "train_examples": 36,
            "versions": {"spanjudge": "0.1.0.dev0", "peft": "x"}}  # fmt: skip
    (adapter / "spanjudge.json").write_text(json.dumps(meta))
    # the same judge, trained on a local base folder: the card needs --base-model
    local = root / "run-local"
    shutil.copytree(run, local)
    (local / "adapter" / "spanjudge.json").write_text(json.dumps({**meta, "base_model": str(root / "tiny-base")}))
    # a config that (wrongly) holds a token: staging must refuse it
    leaky = root / "run-leaky"
    shutil.copytree(run, leaky)
    with (leaky / "train_config.yaml").open("a") as handle:
        handle.write(f"# token: {FAKE_TOKEN}\n")
    # a fully fine-tuned judge (training.finetuning full): its adapter/ folder holds the whole model
    full = root / "run-full"
    shutil.copytree(run, full)
    shutil.rmtree(full / "adapter")
    torch.manual_seed(1)  # other weights than the base's: "trained"
    LlamaForCausalLM(config).save_pretrained(full / "adapter", safe_serialization=True)
    tokenizer.save_pretrained(full / "adapter")
    (full / "adapter" / "training_args.bin").write_bytes(b"\x80pickle")
    (full / "adapter" / "spanjudge.json").write_text(json.dumps({**meta, "finetuning": "full"}))
    full_config = {**train_config, "training": {**train_config["training"], "finetuning": "full"}}
    (full / "train_config.yaml").write_text(yaml.safe_dump({k: v for k, v in full_config.items() if k != "lora"}))
    return {"run": run, "local": local, "leaky": leaky, "full": full, "base": root / "tiny-base", "root": root}


def _front_matter(card: str) -> dict:
    assert card.startswith("---\n")
    return yaml.safe_load(card.split("---\n", 2)[1])


def _no_secret(folder: Path, *texts: str) -> None:
    for path in folder.iterdir():
        assert FAKE_TOKEN.encode() not in path.read_bytes(), path.name
    for text in texts:
        assert FAKE_TOKEN not in text


def _publish(*args: str) -> int:
    return main(["publish", "--repo-id", "someone/tiny-judge", *args])


def test_dry_run_stages_only_the_allow_list_with_a_valid_card(
    runs: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("HF_TOKEN", FAKE_TOKEN)
    results = tmp_path / "meta_eval.json"
    rows = [
        {"dataset": "SummEval", "aspect": "coherence", "level": "summary", "coefficient": "kendall",
         "value": 0.412, "ci_low": 0.37, "ci_high": 0.45, "n": 1600},
        {"dataset": "QAGS-XSum", "aspect": "factual consistency", "level": "summary", "metric": "spearman",
         "value": "0.3"},
        {"dataset": "broken row without a value"},
    ]  # fmt: skip
    results.write_text(json.dumps({"rows": rows}))
    out = tmp_path / "staged"
    code = _publish("--model", str(runs["run"]), "--dry-run", str(out), "--eval-results", str(results),
                    "--dataset", "someone/spanjudge-data", "--license", "apache-2.0")  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    names = sorted(p.name for p in out.iterdir() if p.name != OUTPUT_MARKER)  # the marker is never uploaded
    assert (out / OUTPUT_MARKER).read_text() == "publish dry run (model)\n"
    assert names == sorted(
        [
            "README.md",
            "adapter_config.json",
            "adapter_model.safetensors",
            "chat_template.jinja",
            "spanjudge.json",
            "tokenizer.json",
            "tokenizer_config.json",
            "train_config.yaml",
        ]
        + (["special_tokens_map.json"] if (runs["run"] / "adapter/special_tokens_map.json").exists() else [])
    )
    assert all(p.is_file() for p in out.iterdir())
    assert not any(word in name for name in names for word in FORBIDDEN)
    assert not any(name.endswith((".bin", ".pt", ".pth", ".pkl")) for name in names)
    for name in names:  # the printed list is the folder
        assert name in printed.out
    _no_secret(out, printed.out, printed.err)

    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert set(meta) >= REQUIRED
    assert meta["base_model"] == HUB_BASE and meta["library_name"] == "peft"
    assert meta["pipeline_tag"] == "text-generation" and meta["license"] == "apache-2.0"
    assert {"spanjudge", "nlg-evaluation", "llm-as-a-judge", "lora"} <= set(meta["tags"])
    assert meta["datasets"] == ["someone/spanjudge-data"]
    [entry] = meta["model-index"]
    metrics = [m for result in entry["results"] for m in result["metrics"]]
    assert {m["value"] for m in metrics} == {0.412, 0.3}
    assert {r["dataset"]["name"] for r in entry["results"]} == {"SummEval", "QAGS-XSum"}
    assert "TRL's auto-generated card" not in card
    wanted = [
        "Intended use",
        "[0.370, 0.450]",
        "1 rows of the results file",
        "--enable-lora --max-lora-rank 8 --lora-modules tiny-judge=someone/tiny-judge",
        "ADAPTER ./tiny-judge",
        "--gguf-lora",
        "PeftModel.from_pretrained",
        "Judge.from_pretrained",
        "`smollm2`",
        "`gemma3`",
        "`smollm2-sup`",
        "`qags_xsum`",
        "max_steps: 2",
    ]
    for expected in wanted:
        assert expected in card, expected
    # no release on the index yet: the wheel of the version that trained the judge, or the repository
    trained_with = json.loads((runs["run"] / "adapter" / "spanjudge.json").read_text())["versions"]["spanjudge"]
    assert f'pip install "spanjudge-{trained_with}-py3-none-any.whl[llamacpp,constrained,gguf]"' in card
    assert "pypi.org" not in card and "pip install spanjudge\n" not in card
    # machine-local paths are rewritten to what a Hub user has
    assert json.loads((out / "adapter_config.json").read_text())["base_model_name_or_path"] == HUB_BASE
    staged_meta = json.loads((out / "spanjudge.json").read_text())
    assert staged_meta["base_model"] == HUB_BASE and staged_meta["trained_base_model"] == "@smollm2"
    assert staged_meta["train_file"] == "train.jsonl"

    # the staged adapter is a working PEFT adapter for its base
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(runs["base"])), str(out))

    # a second dry run into the same folder replaces it; without --eval-results the card says so
    assert _publish("--model", str(runs["run"] / "adapter"), "--dry-run", str(out)) == 0
    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert "model-index" not in meta and meta["license"] == "other" and "datasets" not in meta
    assert "No meta-evaluation was attached" in card


def test_merged_dry_run_writes_merged_safetensors(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file

    # trained on a local folder: the Hub id for the card must be named
    assert _publish("--model", str(runs["local"]), "--dry-run", str(tmp_path / "x")) == 2
    assert "--base-model" in capsys.readouterr().err
    out = tmp_path / "merged"
    code = _publish("--model", str(runs["local"]), "--merged", "--dry-run", str(out), "--base-model", HUB_BASE)
    assert code == 0, capsys.readouterr().err
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "spanjudge.json"} <= names
    assert not names & {"adapter_model.safetensors", "adapter_config.json"}
    assert not any(word in name for name in names for word in FORBIDDEN)
    merged = load_file(str(out / "model.safetensors"))
    base = load_file(str(runs["base"] / "model.safetensors"))
    key = "model.layers.0.self_attn.q_proj.weight"
    assert merged[key].shape == base[key].shape and not merged[key].equal(base[key])
    meta = _front_matter((out / "README.md").read_text())
    assert meta["library_name"] == "transformers" and meta["base_model"] == HUB_BASE
    staged_meta = json.loads((out / "spanjudge.json").read_text())
    assert staged_meta["merged"] is True and "merged_from" not in staged_meta
    assert str(runs["root"]) not in (out / "spanjudge.json").read_text()


def test_a_fully_fine_tuned_judge_is_published_as_its_whole_model(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.torch import load_file

    assert _publish("--model", str(runs["full"]), "--merged", "--dry-run", str(tmp_path / "x")) == 2
    err = capsys.readouterr().err
    assert "was fully fine-tuned" in err and "leave --merged out" in err and len(err.strip().splitlines()) == 1
    out = tmp_path / "full"
    assert _publish("--model", str(runs["full"]), "--dry-run", str(out)) == 0, capsys.readouterr().err
    names = {p.name for p in out.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "spanjudge.json"} <= names
    assert "train_config.yaml" in names
    assert not names & {"adapter_model.safetensors", "adapter_config.json"}
    assert not any(word in name for name in names for word in FORBIDDEN)
    staged = load_file(str(out / "model.safetensors"))
    trained = load_file(str(runs["full"] / "adapter" / "model.safetensors"))
    assert staged.keys() == trained.keys() and all(staged[k].equal(trained[k]) for k in trained)  # its own, as trained
    card = (out / "README.md").read_text()
    meta = _front_matter(card)
    assert meta["library_name"] == "transformers" and "lora" not in meta["tags"] and meta["base_model"] == HUB_BASE
    assert "Full fine-tuning (every weight trained)" in card and "LoRA fine-tuning" not in card
    assert 'Judge.from_pretrained("someone/tiny-judge")' in card  # no base to name: the weights are whole
    staged_meta = json.loads((out / "spanjudge.json").read_text())
    assert staged_meta["finetuning"] == "full" and staged_meta["merged"] is False
    assert str(runs["root"]) not in (out / "config.json").read_text()


def test_staging_refuses_token_like_strings_and_foreign_folders(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "leaky"
    assert _publish("--model", str(runs["leaky"]), "--dry-run", str(out)) == 2
    err = capsys.readouterr().err
    assert "train_config.yaml" in err and FAKE_TOKEN not in err
    assert not out.exists()  # nothing half-staged is left behind
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    assert _publish("--model", str(runs["run"]), "--dry-run", str(busy)) == 2
    assert "did not write there" in capsys.readouterr().err
    assert (busy / "notes.txt").read_text() == "mine"


def test_publish_without_a_token_fails_fast(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH")}
    env["HF_HOME"] = str(tmp_path / "empty-hf-home")
    # the model folder does not exist: the token is checked before the run is even read
    result = subprocess.run(
        [sys.executable, "-m", "spanjudge.app.cli", "publish", "--model", str(tmp_path / "nowhere"),
         "--repo-id", "someone/tiny-judge"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no Hugging Face token" in lines[0] and "HF_TOKEN" in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_a_judge_trained_with_its_own_prompt_template_ships_it(runs: dict[str, Path], tmp_path: Path) -> None:
    """The template is part of the judge (scoring renders the prompt with it), so it is uploaded."""
    run = tmp_path / "run-template"
    shutil.copytree(runs["run"], run)
    (run / "adapter" / "prompt_template.jinja").write_text("Evaluate {{ aspect_name }}:\n{{ outputs | fence }}\n")
    (run / "adapter" / "notes.jinja").write_text("not on the allow-list\n")
    out = tmp_path / "staged"
    assert _publish("--model", str(run), "--dry-run", str(out)) == 0
    names = {p.name for p in out.iterdir()}
    assert "prompt_template.jinja" in names and "notes.jinja" not in names
    assert (out / "prompt_template.jinja").read_text() == (run / "adapter" / "prompt_template.jinja").read_text()


def test_hub_evaluation_results_are_staged_for_the_sets_given_a_hub_dataset(
    runs: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--hub-dataset NAME=OWNER/DATASET[:TASK]: one `.eval_results/*.yaml` per row of that set of a meta-eval
    results.json, in the Hub's documented format (read back by huggingface_hub's own parser), dated by the
    meta-evaluation; the other sets stay in the card only, and say so."""
    from huggingface_hub import parse_eval_result_entries

    from spanjudge.publish.eval_results import schema_problems

    results = tmp_path / "results.json"
    cell = {"judge": "distilled:adapter", "level": "summary"}
    results.write_text(json.dumps({
        "judges": ["distilled:adapter", "metric:rouge1"],
        "cells": [
            {**cell, "dataset": "summeval", "aspect": "coherence", "coefficient": "kendall", "value": 0.41234,
             "low": 0.37, "high": 0.45, "scored": 1600},
            {**cell, "dataset": "summeval", "aspect": "fluency", "coefficient": "kendall", "value": 0.2,
             "scored": 1600},
            {**cell, "dataset": "qags_xsum", "aspect": "factual consistency", "coefficient": "spearman", "value": 0.3},
            {**cell, "judge": "metric:rouge1", "dataset": "summeval", "aspect": "coherence", "coefficient": "kendall",
             "value": 0.15},
        ],
        "run": {"created": "2026-11-27T10:00:00+00:00"},
    }))  # fmt: skip
    out = tmp_path / "staged"
    code = _publish("--model", str(runs["run"]), "--dry-run", str(out), "--eval-results", str(results),
                    "--hub-dataset", "summeval=someone/summeval-benchmark:coherence")  # fmt: skip
    printed = capsys.readouterr()
    assert code == 0, printed.err
    staged = sorted(p.name for p in (out / ".eval_results").iterdir())
    assert staged == ["summeval-coherence-summary-kendall.yaml", "summeval-fluency-summary-kendall.yaml"]
    assert ".eval_results/summeval-coherence-summary-kendall.yaml" in printed.out  # listed as uploaded
    assert "no --hub-dataset for qags_xsum" in printed.err
    # offline (as tests run), whether the dataset is a Hub Benchmark cannot be told: said, not assumed
    assert "--hub-dataset someone/summeval-benchmark could not be checked here" in printed.err
    data = yaml.safe_load((out / ".eval_results" / staged[0]).read_text())
    assert schema_problems(data) == []
    [entry] = parse_eval_result_entries(data)
    assert (entry.dataset_id, entry.task_id, entry.value) == ("someone/summeval-benchmark", "coherence", 0.4123)
    assert entry.date == "2026-11-27T10:00:00+00:00"
    assert entry.notes == (
        "coherence, summary-level kendall correlation with human judgments, n=1600, bootstrap interval [0.3700, 0.4500]"
    )
    assert "0.15" not in (out / ".eval_results" / staged[0]).read_text()  # the baseline's row is not the judge's

    # a set the results do not have, an id that is not one, and the option without results: one line each
    for args, message in (
        (["--eval-results", str(results), "--hub-dataset", "summevl=someone/x"], "no such set in --eval-results"),
        (["--eval-results", str(results), "--hub-dataset", "summeval=summeval"], "is not a Hub dataset id"),
        (["--hub-dataset", "summeval=someone/x"], "give --eval-results FILE too"),
    ):
        assert _publish("--model", str(runs["run"]), "--dry-run", str(tmp_path / "other"), *args) != 0
        assert message in capsys.readouterr().err


def test_the_eval_results_schema_check_names_what_the_hub_would_refuse() -> None:
    from spanjudge.publish.eval_results import schema_problems

    documented = yaml.safe_load(  # the Hub documentation's own examples (docs/hub/eval-results.md)
        """
- dataset: {id: cais/hle, task_id: default, revision: 5503434ddd753f426f4b38109466949a1217c2bb}
  value: 20.90
  date: "2025-01-15"
  source: {url: "https://huggingface.co/spaces/SaylorTwift/smollm3-mmlu-pro", name: Eval traces, user: SaylorTwift}
  notes: "no-tools"
- dataset: {id: Idavidrein/gpqa, task_id: gpqa_diamond}
  value: 0.412
"""
    )
    assert schema_problems(documented) == []
    assert schema_problems([]) == ["the file must hold a non-empty list of results"]
    broken = [
        {"dataset": {"id": "hle"}, "value": True, "source": {"name": "x"}, "score": 1},
    ]
    assert schema_problems(broken) == [
        "result 1: unknown key 'score'",
        "result 1: dataset.id must be a Hub dataset id (owner/name)",
        "result 1: dataset.task_id is required",
        "result 1: `value` (a number) is required",
        "result 1: a `source` needs its `url`",
    ]
