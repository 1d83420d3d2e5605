"""The contract and prompts on the real path: a llama.cpp server on 127.0.0.1 serving the
PyPI-shipped SmolLM2-135M-Instruct, real SummEval data, real replies. The tiny model's
judgments are poor; what is tested is that every byte travels the real path and that any
reply ends as a parsed result or an explicit, reasoned failure."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import OpenAI

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import SpanjudgeError
from spanjudge.inference.backends.llamacpp import LlamaCppServer
from spanjudge.inference.contract import (
    AnnotatorEvaluation,
    ParseFailure,
    anchor_errors,
    parse_annotator,
    parse_judge,
)
from spanjudge.inference.prompts import render_annotator_prompt, render_judge_prompt
from spanjudge.inference.shipped_models import smollm2_gguf

pytestmark = pytest.mark.slow


def _summeval(shared_data: Path, count: int) -> list[dict]:
    with (shared_data / "meta_eval" / "summeval" / "summeval.jsonl").open() as lines:
        return [json.loads(next(lines)) for _ in range(count)]


def _chat(server: LlamaCppServer, prompt: str, max_tokens: int = 300) -> str:
    client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=300)
    reply = client.chat.completions.create(
        model=server.alias,
        messages=[{"role": "user", "content": prompt}],
        temperature=0.0,
        max_tokens=max_tokens,
        seed=0,
    )
    return reply.choices[0].message.content or ""


def test_real_annotator_replies_parse_or_fail_with_a_reason(smollm2_server: LlamaCppServer, shared_data: Path) -> None:
    task = load_catalog().task("summeval")
    outcomes = []
    for record in _summeval(shared_data, 3):
        prompt = render_annotator_prompt(
            task, task.aspect("consistency"), {"Article": record["source"]}, record["system_output"]
        )
        reply = _chat(smollm2_server, prompt)
        assert reply.strip(), "the server returned an empty reply"
        result = parse_annotator(reply)
        if isinstance(result, ParseFailure):
            assert result.reason and result.raw == reply
            outcomes.append("failure")
            continue
        assert isinstance(result, AnnotatorEvaluation)
        anchored = anchor_errors(result.errors, record["system_output"])
        for error in anchored:
            if error.anchored:
                assert error.start is not None and error.end is not None
                assert 0 <= error.start < error.end <= len(record["system_output"])
        outcomes.append(result.label.text)
    assert len(outcomes) == 3


def test_real_judge_prompt_round_trip(smollm2_server: LlamaCppServer, shared_data: Path) -> None:
    task = load_catalog().task("summeval")
    record = _summeval(shared_data, 1)[0]
    prompt = render_judge_prompt(task, task.aspect("fluency"), {"Article": record["source"]}, record["system_output"])
    result = parse_judge(_chat(smollm2_server, prompt))
    # an untrained base model rarely follows the judge format; either outcome is explicit
    assert isinstance(result, ParseFailure) or result.score is not None


def test_gemma_base_model_serves_completions(gemma3_path: Path, tmp_path: Path) -> None:
    with LlamaCppServer(gemma3_path, alias="gemma3", n_ctx=1024, log_path=tmp_path / "gemma.log") as server:
        client = OpenAI(base_url=server.base_url, api_key="none", max_retries=0, timeout=120)
        text = client.completions.create(model="gemma3", prompt="The capital of France is", max_tokens=8, temperature=0)
    assert text.choices[0].text.strip()


def test_server_with_a_missing_model_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(SpanjudgeError, match="model file not found"):
        LlamaCppServer(tmp_path / "missing.gguf", alias="x").start()


def test_server_that_cannot_load_reports_its_log(tmp_path: Path) -> None:
    fake = tmp_path / "not-a-model.gguf"
    fake.write_bytes(b"this is not a gguf file")
    with pytest.raises(SpanjudgeError, match="is not a GGUF file"):  # checked before a process starts
        LlamaCppServer(fake, alias="x").start(timeout=60)
    cut = tmp_path / "cut.gguf"  # a GGUF whose header promises tensors its data does not hold
    cut.write_bytes(Path(smollm2_gguf()).read_bytes()[: 4 << 20])
    with pytest.raises(SpanjudgeError, match=r"the llama.cpp server 'x' .* stopped: exit code \d+; .*its log"):
        LlamaCppServer(cut, alias="x").start(timeout=60)
