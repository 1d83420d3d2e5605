"""A run is what made it: new ids under other settings are refused, an edited prompt template is another run, the
meta-eval judge store follows the template's content, and frozen perturbations of another model are refused.

Model servers are the scripted stand-in of tests/support/standin.py on 127.0.0.1."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file
from support.standin import Reply, StandIn

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError

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


def test_meta_eval_judge_store_follows_the_template_content(tmp_path: Path) -> None:
    from spanjudge.eval.judging.judge_files import DistilledJudge, model_fingerprint
    from spanjudge.eval.judging.store import store_name

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
