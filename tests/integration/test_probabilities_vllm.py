"""Probability-aware judging on vLLM, whose engine needs a CUDA GPU: its two readers (prompt logprobs, and
one-token generations with the top K that keep vLLM's prefix cache) run against stand-ins for `vllm.LLM`
that answer in vLLM's shapes from whole forward passes of a transformers model, and must read what the
brute-force computation reads (tests/support/brute_force.py), or, with the top 20 on the trained smoke judge,
stay within stated tolerances of the exact transformers reader."""

from __future__ import annotations

import sys
from types import SimpleNamespace
from typing import Any

import pytest
from support.brute_force import NO_ERROR, QUESTION, TWO_ERRORS, assert_brute_force, tiny_llama

from spanjudge.inference.backends.base import ChatRequest
from spanjudge.inference.backends.transformers_reader import ProbabilityReader
from spanjudge.inference.backends.vllm_offline import VLLMCachedProbabilityReader, VLLMProbabilityReader
from spanjudge.inference.contract import parse_judge
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.probabilities import SCORES
from spanjudge.inference.shipped_models import smollm2_gguf


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_llama()


class _PromptLogprobsLLM:
    """A stand-in for `vllm.LLM`, which needs a CUDA GPU: `generate` answers prompts of token ids with
    `prompt_logprobs` in vLLM's shape (None for the first token, then {token: Logprob}), each computed by a
    whole forward pass of the tiny model of its own."""

    def __init__(self, model: Any) -> None:
        self.model, self.prompts = model, 0

    def generate(self, prompts: list[dict[str, list[int]]], params: Any, use_tqdm: bool, lora_request: Any) -> list:
        import torch

        assert params.prompt_logprobs == 0 and params.max_tokens == 1 and not use_tqdm and lora_request == "lora"
        self.prompts += len(prompts)
        outputs = []
        for prompt in prompts:
            ids = prompt["prompt_token_ids"]
            with torch.no_grad():
                rows = self.model(torch.tensor([ids])).logits[0].float().log_softmax(-1)
            entries = [{ids[j]: SimpleNamespace(logprob=float(rows[j - 1, ids[j]]))} for j in range(1, len(ids))]
            outputs.append(SimpleNamespace(prompt_logprobs=[None, *entries]))
        return outputs


@pytest.mark.parametrize("reply", [TWO_ERRORS, NO_ERROR], ids=["two", "none"])
def test_vllm_prompt_logprobs_read_what_a_brute_force_computation_reads(
    tiny: tuple[Any, Any], reply: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's reader on the stand-in, with two end tokens (the turn's end and eos, as Gemma has): every
    alternative is one prompt, and an ending alternative one prompt per end token."""
    model, tokenizer = tiny
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: SimpleNamespace(**kw)))
    llm, end = _PromptLogprobsLLM(model), {tokenizer.eos_token_id, 0}  # <|endoftext|> beside eos
    reader = VLLMProbabilityReader(llm, tokenizer, end, lora_request="lora")
    assert_brute_force(model, tokenizer, reply, end, reader.read)
    assert llm.prompts > len(SCORES) * len(end)  # the score's alternatives each end the reply: 2 prompts each


def test_the_vllm_engine_reads_along_the_prompt_its_chat_sends(
    tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`VLLMBackend.read_probabilities` encodes a request as its `generate` sends it (`chat.encode_chat`) and
    reads what the transformers reader reads there (the stand-in as vLLM's `LLM`)."""
    from spanjudge.inference.backends import BackendSpec, make_backend
    from spanjudge.inference.chat import encode_chat, judge_end_ids

    model, tokenizer = tiny
    llm = _PromptLogprobsLLM(model)
    llm.get_tokenizer = lambda: tokenizer  # type: ignore[attr-defined]
    fake = SimpleNamespace(SamplingParams=lambda **kw: SimpleNamespace(**kw), LLM=lambda model, **options: llm)
    monkeypatch.setitem(sys.modules, "vllm", fake)
    backend = make_backend(BackendSpec(kind="vllm", model="tiny", options={"exact_probabilities": True}))
    backend._lora = "lora"  # what an `adapter` option makes: the reader sends the judge's LoRA with each prompt
    evaluation = parse_judge(TWO_ERRORS)
    request = ChatRequest.user(QUESTION)
    read = backend.read_probabilities(request, evaluation)
    prompt = encode_chat(tokenizer, [m.model_dump() for m in request.messages])
    expected = ProbabilityReader(model, tokenizer, judge_end_ids(tokenizer)).read(prompt, evaluation)
    assert read.expected_score == pytest.approx(expected.expected_score, abs=1e-4)
    assert read.expected_errors == pytest.approx(expected.expected_errors, abs=1e-5)
    assert [e.confidence for e in read.errors] == pytest.approx([e.confidence for e in expected.errors], abs=1e-5)


class _TopLogprobsLLM:
    """A stand-in for `vllm.LLM` answering one-token generations with `logprobs=K`: each prompt's next-token
    top K in vLLM's shape (`outputs[0].logprobs[0]`: {token: Logprob}), from a whole forward pass of a
    transformers model. It refuses `prompt_logprobs`, which would turn vLLM's prefix cache off."""

    def __init__(self, model: Any) -> None:
        self.model, self.prompts, self.tokens = model, 0, 0

    def generate(self, prompts: list[dict[str, list[int]]], params: Any, use_tqdm: bool, lora_request: Any) -> list:
        import torch

        assert getattr(params, "prompt_logprobs", None) is None and params.max_tokens == 1 and params.logprobs
        self.prompts += len(prompts)
        # vLLM's prefix cache, in the stand-in's way: the prompts that share a length are read in one batch after
        # one pass over the prefix they share, and a prompt that begins a longer one reads its row from that one's
        # pass (a causal model's logits at a position see only the tokens before it)
        every = [tuple(prompt["prompt_token_ids"]) for prompt in prompts]
        wholes: list[tuple[int, ...]] = []
        for ids in sorted(set(every), key=len, reverse=True):
            if not any(whole[: len(ids)] == ids for whole in wholes):
                wholes.append(ids)
        passes: list[tuple[tuple[int, ...], Any, Any]] = []  # (prompt, logits of the shared prefix, of its own tokens)
        for length in sorted({len(whole) for whole in wholes}):
            batch = [whole for whole in wholes if len(whole) == length]
            shared = next((i for i in range(length) if len({whole[i] for whole in batch}) > 1), length - 1)
            with torch.no_grad():
                prefix = self.model(torch.tensor([batch[0][:shared]]), use_cache=True)
                prefix.past_key_values.batch_repeat_interleave(len(batch))
                own = self.model(
                    torch.tensor([whole[shared:] for whole in batch]), past_key_values=prefix.past_key_values
                )
            passes += [(whole, prefix.logits[0], rows) for whole, rows in zip(batch, own.logits, strict=True)]
        outputs = []
        for ids in every:
            self.tokens += len(ids)
            _whole, shared_rows, own_rows = next(found for found in passes if found[0][: len(ids)] == ids)
            at = len(ids) - 1
            row = (
                (shared_rows[at] if at < len(shared_rows) else own_rows[at - len(shared_rows)]).float().log_softmax(-1)
            )
            values, tokens = row.topk(params.logprobs)
            top = dict(zip(tokens.tolist(), values.tolist(), strict=True))
            if params.logprobs <= 100:  # vLLM's shape, a `Logprob` each (plain floats for the whole vocabulary)
                top = {token: SimpleNamespace(logprob=value) for token, value in top.items()}
            outputs.append(SimpleNamespace(outputs=[SimpleNamespace(logprobs=[top])]))
        return outputs


def _fake_vllm(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", SimpleNamespace(SamplingParams=lambda **kw: SimpleNamespace(**kw)))


@pytest.mark.parametrize("reply", [TWO_ERRORS, NO_ERROR], ids=["two", "none"])
def test_vllm_cached_reader_with_the_whole_vocabulary_reads_what_a_brute_force_computation_reads(
    tiny: tuple[Any, Any], reply: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With K = the vocabulary nothing is bounded: the one-token requests and their assembly are exact."""
    model, tokenizer = tiny
    _fake_vllm(monkeypatch)
    llm, end = _TopLogprobsLLM(model), {tokenizer.eos_token_id, 0}
    reader = VLLMCachedProbabilityReader(llm, tokenizer, end, lora_request="lora", top_logprobs=len(tokenizer))
    assert_brute_force(model, tokenizer, reply, end, reader.read)
    assert reader.approximated == 0
    # one request per point an alternative needs, not one per alternative and end token
    assert reader.requests == llm.prompts < len(SCORES) * len(end)


def test_vllm_cached_reader_with_the_top_20_stays_near_the_exact_reader_on_the_trained_judge(
    trained_judge: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The trained smoke judge (peaked, as a trained judge is), vLLM's default K = 20: every value within
    the stated tolerance of the exact transformers reader, and every choice's mass outside the top 20
    bounded, not dropped."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spanjudge.inference.chat import encode_chat, judge_end_ids

    tokenizer = AutoTokenizer.from_pretrained(trained_judge.adapter)
    base = AutoModelForCausalLM.from_pretrained(convert_gguf(smollm2_gguf()), dtype="float32")
    model = PeftModel.from_pretrained(base, trained_judge.adapter).merge_and_unload().eval()
    end = judge_end_ids(tokenizer)
    question = "Article: The cat sat on the mat.\nSummary: A cat sat on a hat. Is the summary factually consistent?"
    prompt = encode_chat(tokenizer, [{"role": "user", "content": question}])
    _fake_vllm(monkeypatch)
    evaluation = parse_judge(TWO_ERRORS)  # every kind of choice: counts, severities, the score
    exact = ProbabilityReader(model, tokenizer, end).read(prompt, evaluation)
    reader = VLLMCachedProbabilityReader(_TopLogprobsLLM(model), tokenizer, end, top_logprobs=20)
    read = reader.read(prompt, evaluation)
    assert reader.approximated > 0  # some alternatives (most of the 101 scores) are outside the top 20
    assert read.p_no_error == pytest.approx(exact.p_no_error, abs=0.02)
    assert read.expected_errors == pytest.approx(exact.expected_errors, abs=0.05)
    assert [e.confidence for e in read.errors] == pytest.approx([e.confidence for e in exact.errors], abs=0.02)
    assert read.expected_score == pytest.approx(exact.expected_score, abs=2.0)
    for mine, theirs in zip(read.errors, exact.errors, strict=True):
        assert mine.expected_severity == pytest.approx(theirs.expected_severity, abs=0.1)
