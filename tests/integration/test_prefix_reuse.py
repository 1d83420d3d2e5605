"""Prefix reuse (issue #31): requests sharing a prompt prefix run together after it, read once, and
greedy replies are those of the same engine without reuse, in the caller's order. On a tiny randomly
initialised Llama with SmolLM2's tokenizer and chat template (transformers), and on SmolLM2's GGUF
(llama.cpp in this process). Random weights make a different prompt give a different reply, so a
prefix that ignored a difference (the aspect, the input) would show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from support.tiny_models import tiny_gemma3, tiny_llama

from spanjudge.inference.backends.prefix import MIN_TOKENS, prefix_batches, prefix_runs
from spanjudge.inference.chat import shared_length
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.judge import Judge
from spanjudge.inference.shipped_models import smollm2_gguf

ARTICLES = {
    "a": "The council met on Tuesday to discuss the new budget for schools, roads and the harbour. " * 3,
    "b": "A storm closed the harbour for two days; the ferries resumed on Friday morning. " * 3,
}
ASPECTS = ("coherence", "relevance")
OUTPUTS = ["The council met.", "A budget for roads was approved on Tuesday.", "Ferries stopped.", "Nothing happened."]


def test_runs_follow_the_tokens_and_stop_where_prompts_part() -> None:
    shared = list(range(100, 140))  # 40 tokens of instructions and input
    other_input = [*range(100, 110), *range(500, 530)]  # parts after 10 tokens: a different input
    prompts = [
        [*shared, 7, 8],
        [*other_input, 1],
        [*shared, 9],
        [*shared, 7, 9, 9],
        [*shared[:30], 999, *shared[31:], 1],  # a different aspect 30 tokens in
    ]
    runs = prefix_runs(prompts)
    grouped = {run.members: run.length for run in runs}
    assert grouped[(0, 3, 2)] == 40  # sorted by tokens; the prefix is what all three share
    assert grouped[(4,)] == 0  # parts 30 tokens in: joining would cut the run's prefix from 40 to 30
    assert grouped[(1,)] == 0  # shares 10 tokens: under MIN_TOKENS and half of the prompt
    assert sorted(i for run in runs for i in run.members) == list(range(5))
    assert prefix_runs([[1] * 40, [1] * 40]) == prefix_runs([[1] * 40, [1] * 40])  # identical prompts
    (run,) = prefix_runs([[1] * 40, [1] * 40])
    assert run.length == 39  # each member keeps one token of its own to read
    assert prefix_runs([[1] * 10 + [2], [1] * 10 + [3]])[0].length == 0  # under MIN_TOKENS
    assert shared_length([1, 2, 3], [1, 2, 4]) == 2 and MIN_TOKENS > 10


def test_batches_pack_whole_runs_and_read_a_long_run_once() -> None:
    tables = [[t] * 40 + [t, 100 + n] for t in range(1, 4) for n in range(4)]  # 3 inputs x 4 outputs
    batches = prefix_batches(tables, 8)
    assert [len(b.members) for b in batches] == [8, 4]  # two runs of 4, then the third: never a run cut in two
    assert [len(b.runs) for b in batches] == [2, 1] and not any(b.same_prefixes for b in batches)
    article = [[7] * 50 + [200 + n] for n in range(16)]  # one input, 16 outputs: a run longer than a batch
    long = prefix_batches(article, 8)
    assert [len(b.members) for b in long] == [8, 8] and [b.same_prefixes for b in long] == [False, True]
    alone = prefix_batches([[1, 2, 3], [9] * 30], 8)
    assert sorted(run.length for run in alone[0].runs) == [2, 29]  # alone: all but its last token
    everyone = sorted(m for b in batches for m in b.members)
    assert everyone == list(range(12))


@pytest.fixture(scope="module")
def tiny_judge_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 2-layer Llama with random weights, saved with SmolLM2's tokenizer (it has a chat template)."""
    folder = tmp_path_factory.mktemp("tiny-judge")
    tiny_llama(folder, initializer_range=0.2)
    return folder


def _requests(judge: Judge, outputs: int = len(OUTPUTS), aspects: tuple[str, ...] = ASPECTS) -> list[Any]:
    """Interleaved on purpose: two inputs, the aspects, several outputs each, and one output alone (3rd)."""
    requests = [
        judge.request("summeval", aspect, {"Article": ARTICLES[key]}, output, id=f"{key}-{aspect}-{n}")
        for n, output in enumerate(OUTPUTS[:outputs])
        for key in ARTICLES
        for aspect in aspects
    ]
    alone = judge.request("qags_xsum", "factual consistency", {"Article": "Short."}, "Alone.", id="alone")
    return [*requests[:2], alone, *requests[2:]]


def _replies(folder: Path, reuse: bool, *shape: Any, **engine: Any) -> list[tuple[str | None, list[str]]]:
    judge = Judge.from_pretrained(folder, retries=0, max_new_tokens=16, reuse_prefix=reuse, **engine)
    try:
        return [(result.id, result.raw_replies) for result in judge.score(_requests(judge, *shape))]
    finally:
        judge.close()


@pytest.mark.parametrize("batch_size", [3, 8], ids=["runs-cut-across-batches", "runs-packed-into-a-batch"])
def test_transformers_replies_are_identical_with_and_without_reuse(tiny_judge_folder: Path, batch_size: int) -> None:
    with_reuse = _replies(tiny_judge_folder, True, batch_size=batch_size)
    without = _replies(tiny_judge_folder, False, batch_size=batch_size)
    assert with_reuse == without
    judge = Judge.from_pretrained(tiny_judge_folder, retries=0, max_new_tokens=16)
    assert [id for id, _ in with_reuse] == [r.id for r in _requests(judge)]  # the caller's order
    assert len({tuple(replies) for _, replies in with_reuse}) == len(with_reuse)  # every prompt its own reply


def test_a_sliding_window_judge_writes_the_same_replies_batched_reused_and_alone(tmp_path: Path) -> None:
    """A batch after shared prefixes pads between a row's prefix and its own tokens, and a local layer whose
    window reaches back over them counts the pads (here 128 tokens, longer than a row's own part and shorter than
    its prompt): 2 of these 17 replies changed. A sliding-window model is batched without it, so its replies are
    those without reuse and those it writes alone (drafted decoding, after the last reply's cache)."""
    tiny_gemma3(tmp_path, window=128)
    with_reuse = _replies(tmp_path, True, batch_size=8)
    assert with_reuse == _replies(tmp_path, False, batch_size=8)
    assert with_reuse == _replies(tmp_path, True, decoding="drafted")


def test_prompts_read_in_pieces_give_the_replies_of_prompts_read_whole(
    tiny_judge_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a CPU a long prompt is read in pieces (`CPU_PREFILL_CHUNK`, 512): here pieces of 7 tokens, so every
    prefix and prompt is read in several, with reuse and without."""
    import torch

    from spanjudge.inference.backends import transformers_reader

    whole = _replies(tiny_judge_folder, True, batch_size=8)
    monkeypatch.setattr(transformers_reader, "CPU_PREFILL_CHUNK", 7)
    assert transformers_reader.prefill_chunks(0, 20, torch.device("cpu")) == [(0, 7), (7, 14), (14, 20)]
    assert _replies(tiny_judge_folder, True, batch_size=8) == whole
    assert _replies(tiny_judge_folder, False, batch_size=8) == whole


def test_stopping_at_a_repeated_error_block_is_drafted_decodings(tiny_judge_folder: Path) -> None:
    """`stop_at_repeat` cuts a reply as drafted decoding writes it: batched decoding refuses it before any weights
    load, and a drafted judge's writer stops at `contract.first_repeat`."""
    from spanjudge.core.errors import SpanjudgeError
    from spanjudge.inference.contract.render import first_repeat

    with pytest.raises(SpanjudgeError, match="stop_at_repeat stops a reply as drafted decoding writes it"):
        Judge.from_pretrained(tiny_judge_folder, retries=0, stop_at_repeat=True)
    judge = Judge.from_pretrained(tiny_judge_folder, retries=0, stop_at_repeat=True, decoding="drafted")
    try:
        assert judge.backend._probability_reader().stop_at is first_repeat
    finally:
        judge.close()


def test_transformers_reuses_by_default_only_where_replies_stay_identical(tiny_judge_folder: Path) -> None:
    """float32: on; half precision rounds a prefix read alone differently (bench/results/reuse_numerics.md): off
    unless asked."""

    def reuse(**options: Any) -> bool:
        return Judge.from_pretrained(tiny_judge_folder, retries=0, **options).backend.reuse_prefix

    assert reuse(dtype="float32") is True and reuse(dtype="bfloat16") is False
    assert reuse(dtype="bfloat16", reuse_prefix=True) is True and reuse(dtype="float32", reuse_prefix=False) is False


def test_transformers_groups_by_input_and_aspect(tiny_judge_folder: Path) -> None:
    """The plan reads one prefix per (input, aspect): each run's prefix holds its own aspect and input,
    every member's prompt starts with it, and whole runs share a batch while they fit."""
    from spanjudge.inference.backends.base import ChatRequest
    from spanjudge.inference.judge_conversation import judge_messages

    judge = Judge.from_pretrained(tiny_judge_folder, retries=0, max_new_tokens=16, batch_size=8)
    backend = judge.backend
    requests = _requests(judge)
    calls = [ChatRequest.user(judge_messages(request)[0]["content"]) for request in requests]
    plan = backend._plan(calls, list(range(len(calls))))
    assert [len(batch) for batch, _, _ in plan] == [8, 8, 1]  # two runs of 4 a batch; the one alone last
    runs = {}
    for batch, prefixes, _ in plan:
        for index, r in zip(batch, prefixes.run_of_member, strict=True):
            runs.setdefault(prefixes.runs[r], []).append(index)
    shared = {run: members for run, members in runs.items() if len(members) > 1}
    assert len(shared) == 4 and all(len(members) == len(OUTPUTS) for members in shared.values())
    for run, members in shared.items():
        assert {requests[i].id.rsplit("-", 1)[0] for i in members} == {requests[members[0]].id.rsplit("-", 1)[0]}
        prefix = backend._prompt_ids(calls[members[0]])[: run.length]
        text = backend.tokenizer.decode(prefix)
        assert requests[members[0]].aspect.definition[:60] in text and ARTICLES[requests[members[0]].id[0]][:40] in text
        assert all(backend._prompt_ids(calls[i])[: run.length] == prefix for i in members)
    (alone,) = (members for members in runs.values() if len(members) == 1)
    assert [requests[i].id for i in alone] == ["alone"]
    # reading the prefixes computes the last position's logits only: every position's took a Gemma 3 judge's
    # process to 24 GB on long inputs (#49)
    rows: list[int] = []
    head = backend.model.get_output_embeddings().register_forward_hook(lambda _m, _i, out: rows.append(out.shape[1]))
    _, prefixes, prompts = plan[0]
    cache = backend._read_prefixes(prompts, prefixes)
    head.remove()
    assert rows == [1] and cache.get_seq_length() == max(run.length for run in prefixes.runs) > 1
    judge.close()


@pytest.mark.slow
def test_llama_cpp_replies_are_identical_with_and_without_reuse() -> None:
    gguf = smollm2_gguf()
    engine = {"engine": "llamacpp", "engine_options": {"gguf": str(gguf), "n_ctx": 2048}}
    folder = convert_gguf(gguf)
    shape = (2, ("coherence",))  # 2 inputs x 2 outputs and the one alone: a real 135M model
    with_reuse = _replies(folder, True, *shape, **engine)
    without = _replies(folder, False, *shape, **engine)
    assert with_reuse == without
    assert [id for id, _ in with_reuse] == ["a-coherence-0", "b-coherence-0", "alone", "a-coherence-1", "b-coherence-1"]


def test_a_served_judge_without_reuse_asks_llama_cpp_not_to_use_its_prompt_cache(tiny_judge_folder: Path) -> None:
    served = {"engine": "openai", "base_url": "http://127.0.0.1:9/v1", "constrained": True}  # nothing is sent here
    with_reuse = Judge.from_pretrained(tiny_judge_folder, **served).backend.spec.extra_body
    without = Judge.from_pretrained(tiny_judge_folder, reuse_prefix=False, **served).backend.spec.extra_body
    assert "cache_prompt" not in with_reuse and without == {**with_reuse, "cache_prompt": False}  # the grammar kept


@pytest.mark.slow
def test_a_served_judge_gets_its_requests_in_prefix_order_and_replies_do_not_change(smollm2_server: Any) -> None:
    """engine openai: the judge sends the outputs of one input one after another (llama.cpp's server then
    reads only what a prompt does not share with the one before); replies and their order are unchanged."""
    engine = {"engine": "openai", "base_url": smollm2_server.base_url, "served_model": "smollm2"}
    folder = convert_gguf(smollm2_gguf())
    shape = (2, ("coherence",))
    with_reuse = _replies(folder, True, *shape, **engine)
    assert with_reuse == _replies(folder, False, *shape, **engine)
    assert [id for id, _ in with_reuse] == ["a-coherence-0", "b-coherence-0", "alone", "a-coherence-1", "b-coherence-1"]
