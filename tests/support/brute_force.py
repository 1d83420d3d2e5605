"""The probability readers' reference: a tiny randomly initialised Llama with SmolLM2's real tokenizer, and
each alternative reply scored by a whole forward pass of its own (no cache, no batching), which every
reader's cached, batched computation must equal (tests/integration/test_probabilities*.py)."""

from __future__ import annotations

import math
from typing import Any

import pytest

from spanjudge.inference.contract import Evaluation, parse_judge
from spanjudge.inference.contract.render import render_judge
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.probabilities import LOCATION_TOKENS, SCORES, SEVERITIES, _choices, expected_count
from spanjudge.inference.shipped_models import smollm2_gguf

TWO_ERRORS = (
    "Error 1:\nLocation: on a hat\nExplanation: The article says mat.\nSeverity: 3\n\n"
    "Error 2:\nLocation: A cat\nExplanation: Vague.\nSeverity: 1\n\nOverall score: 40"
)
NO_ERROR = "No Error\n\nOverall score: 100"
QUESTION = "Is 'A cat sat on a hat.' faithful to 'The cat sat on the mat.'?"
EIGHT_ERRORS = (
    "\n\n".join(f"Error {n}:\nLocation: cat\nExplanation: Wrong {n}.\nSeverity: {1 + n % 5}" for n in range(1, 9))
    + "\n\nOverall score: 5"
)


def tiny_llama() -> tuple[Any, Any]:
    """A 1-layer Llama with random weights (spread-out distributions) and SmolLM2's tokenizer."""
    import torch
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf()))
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(tokenizer), initializer_range=0.4)  # fmt: skip
    return LlamaForCausalLM(config).eval(), tokenizer


def brute_force(model: Any, tokenizer: Any, prompt: list[int], text: str, evaluation: Evaluation, end: set[int]):
    """Each alternative of each choice scored as a whole sequence (no cache, no batching), normalised."""
    import torch

    def log_p(reply: str, ends: bool) -> float:
        ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        with torch.no_grad():  # the reply's rows only: each predicts the next token
            rows = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 :].float().log_softmax(-1)
        total = sum(float(rows[j, ids[j]]) for j in range(len(ids)))
        if ends:
            total += float(torch.logsumexp(rows[len(ids)][sorted(end)], dim=0))
        return total

    def distribution(choice: Any) -> list[float]:
        values = [log_p(text[: choice.at] + alternative, choice.end) for alternative in choice.alternatives]
        weights = [math.exp(v - max(values)) for v in values]
        return [w / sum(weights) for w in weights]

    counts, severities, score = _choices(text, evaluation, 8)
    return [distribution(c) for c in counts], [distribution(c) for c in severities], distribution(score)


def brute_force_locations(model: Any, tokenizer: Any, prompt: list[int], text: str) -> list[list[float]]:
    """Each block's location tokens' log-probabilities, read from one whole pass over prompt + reply: the tokens
    whose characters meet the location's (by the tokenizer's own offsets), the first LOCATION_TOKENS of them."""
    import re

    import torch

    encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    ids, offsets = encoded["input_ids"], encoded["offset_mapping"]
    with torch.no_grad():
        rows = model(torch.tensor([prompt + ids])).logits[0, len(prompt) - 1 :].float().log_softmax(-1)
    found = []
    for line in re.finditer(r"^Location: (.*)$", text, re.MULTILINE):
        start, end = line.span(1)
        tokens = [j for j, (a, b) in enumerate(offsets) if a < end and b > start][:LOCATION_TOKENS]
        found.append([float(rows[j, ids[j]]) for j in tokens])
    return found


def assert_brute_force(model: Any, tokenizer: Any, reply: str, end: set[int], read_with: Any) -> None:
    """`read_with(prompt, evaluation)` reads what the brute-force computation reads, on every value."""
    evaluation = parse_judge(reply)
    assert isinstance(evaluation, Evaluation)
    prompt = tokenizer(QUESTION)["input_ids"]
    read = read_with(prompt, evaluation)
    counts, severities, score = brute_force(model, tokenizer, prompt, render_judge(evaluation), evaluation, end)

    going_on = [c[0] for c in counts]  # float32: incremental and whole-sequence attention round apart by ~1e-6
    assert read.p_no_error == pytest.approx(counts[0][1], abs=1e-5)
    assert read.expected_errors == pytest.approx(expected_count(going_on), abs=1e-5)
    assert len(counts) == min(len(evaluation.errors) + 1, 8)  # no decision after the contract's last block
    assert [e.confidence for e in read.errors] == pytest.approx(going_on[: len(evaluation.errors)], abs=1e-5)
    for error, severity in zip(read.errors, severities, strict=True):
        assert list(error.severity_distribution.values()) == pytest.approx(severity, abs=1e-5)
        assert error.expected_severity == pytest.approx(
            sum(v * p for v, p in zip(SEVERITIES, severity, strict=True)), abs=1e-5
        )
    assert list(read.score_distribution) == list(SCORES)  # every value the contract allows, no hand-picked subset
    assert sum(read.score_distribution.values()) == pytest.approx(1.0, abs=1e-9)
    assert list(read.score_distribution.values()) == pytest.approx(score, abs=1e-5)
    assert read.expected_score == pytest.approx(sum(v * p for v, p in zip(SCORES, score, strict=True)), abs=1e-4)
    assert 0 < read.p_no_error < 1 and 0 <= read.expected_errors <= 8
    locations = brute_force_locations(model, tokenizer, prompt, render_judge(evaluation))
    assert [len(e.location_log_probs) for e in read.errors] == [len(tokens) for tokens in locations]
    for error, tokens in zip(read.errors, locations, strict=True):
        assert error.location_log_probs == pytest.approx(tokens, abs=1e-5)
