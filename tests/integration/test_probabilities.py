"""Probability-aware judging (issue #29, item 1): the judge's probabilities along its written
evaluation. The reader's cached, batched computation must equal a brute-force one (each
alternative reply scored by a whole forward pass of its own), on a tiny randomly initialised
Llama with SmolLM2's real tokenizer (tests/support/brute_force.py); then the option end to end on
SmolLM2-135M-Instruct with the contract's grammar, through `Judge` and `spanjudge score`. vLLM's readers
are in test_probabilities_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.brute_force import EIGHT_ERRORS, NO_ERROR, QUESTION, TWO_ERRORS, assert_brute_force, tiny_llama
from support.tiny_models import tiny_gemma3_model

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import SpanjudgeError
from spanjudge.inference.backends.base import ChatRequest
from spanjudge.inference.backends.transformers_reader import ProbabilityReader
from spanjudge.inference.contract import Evaluation, parse_judge
from spanjudge.inference.contract.render import render_judge
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.probabilities import SCORES
from spanjudge.inference.shipped_models import smollm2_gguf


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_llama()


@pytest.mark.parametrize("tree", [True, False], ids=["tree", "batched"])
@pytest.mark.parametrize("reply", [TWO_ERRORS, NO_ERROR, EIGHT_ERRORS], ids=["two", "none", "eight"])
def test_read_probabilities_equal_a_brute_force_computation(
    tiny: tuple[Any, Any], reply: str, tree: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Both readings of the alternatives: all in one masked row after the cache (Llama's sdpa attention takes our
    mask), here in passes of 7 tokens, and as a batch of copies of the cache (what flash attention needs)."""
    from spanjudge.inference.backends import transformers_reader

    monkeypatch.setattr(transformers_reader, "TREE_TOKENS", 7)  # several passes, each cut from the cache after
    model, tokenizer = tiny
    end = {tokenizer.eos_token_id}

    def read(prompt: list[int], evaluation: Evaluation) -> Any:
        reader = ProbabilityReader(model, tokenizer, end, tree=tree)
        assert reader._tree == tree  # a Llama with sdpa attention and no sliding window: by default the tree
        return reader.read(prompt, evaluation)

    assert_brute_force(model, tokenizer, reply, end, read)


@pytest.fixture(scope="module")
def tiny_gemma(tiny: tuple[Any, Any]) -> Any:
    """A 2-layer Gemma 3 with random weights whose local layer sees 8 tokens: every prompt and reply here is
    longer than its window."""
    return tiny_gemma3_model(len(tiny[1]))


@pytest.mark.parametrize("tree", [True, False], ids=["tree", "batched"])
@pytest.mark.parametrize("piece", [512, 5], ids=["whole", "in-pieces"])
def test_a_sliding_window_model_reads_what_a_brute_force_computation_reads(
    tiny: tuple[Any, Any], tiny_gemma: Any, piece: int, tree: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each choice's alternatives read from the cache cut back to where they start, past the local layers'
    window (Gemma 3 judges crashed there: its sliding layers kept only their window); so does a reused prompt.
    Read whole, and in pieces of 5 tokens (a CPU reads a long prompt in pieces: `CPU_PREFILL_CHUNK`); the
    alternatives in masked rows (a mask per layer kind, the local one seeing only the window), here in passes of
    7 tokens, and as a batch of cache copies."""
    from spanjudge.inference.backends import transformers_reader

    monkeypatch.setattr(transformers_reader, "CPU_PREFILL_CHUNK", piece)
    monkeypatch.setattr(transformers_reader, "TREE_TOKENS", 7)
    tokenizer = tiny[1]
    end = {tokenizer.eos_token_id}
    reader = ProbabilityReader(tiny_gemma, tokenizer, end, reuse_prefix=True, tree=tree)
    assert reader._tree == tree  # Gemma 3: a mask per layer kind, so by default the tree
    readings: list[Any] = []

    def read(prompt: list[int], evaluation: Evaluation) -> Any:
        readings.append(reader.read(prompt, evaluation))
        return readings[-1]

    assert_brute_force(tiny_gemma, tokenizer, TWO_ERRORS, end, read)
    evaluation = parse_judge(TWO_ERRORS)
    assert isinstance(evaluation, Evaluation)
    again = read(tokenizer(QUESTION)["input_ids"], evaluation)  # after the held cache, cut back past the window
    assert again.expected_errors == pytest.approx(readings[0].expected_errors, abs=1e-5)
    assert list(again.score_distribution.values()) == pytest.approx(
        list(readings[0].score_distribution.values()), abs=1e-5
    )


def test_a_sliding_window_reader_reusing_prompts_reads_what_a_fresh_reader_reads(
    tiny: tuple[Any, Any], tiny_gemma: Any
) -> None:
    """A held cache is cut back past the local layer's window, to less and then more of the next prompt (cut by
    transformers' `crop`, such a layer kept only the window before the cut: a later, shorter prefix crashed or read
    other tokens' states; `roll_back` keeps what it recorded), and every reading equals a fresh reader's."""
    tokenizer = tiny[1]
    end = {tokenizer.eos_token_id}
    evaluation = parse_judge(TWO_ERRORS)
    assert isinstance(evaluation, Evaluation)
    shared = list(range(1000, 1030))  # 30 tokens: more than the window of 8
    prompts = [[*shared, 5, 6, 7], [*shared, 8, 9], [*shared[:5], 11, 12, 13, 14], [*shared[:20], 15]]
    reusing = ProbabilityReader(tiny_gemma, tokenizer, end, reuse_prefix=True)
    for prompt in prompts:
        reading = reusing.read(prompt, evaluation)
        fresh = ProbabilityReader(tiny_gemma, tokenizer, end).read(prompt, evaluation)
        assert list(reading.score_distribution.values()) == pytest.approx(
            list(fresh.score_distribution.values()), abs=1e-5
        )
        assert reading.expected_errors == pytest.approx(fresh.expected_errors, abs=1e-5)
    assert reusing._window == 8 and reusing._held is not None and reusing._tree
    assert ProbabilityReader(tiny[0], tokenizer, end)._window is None  # Llama: no sliding window


def test_alternatives_per_pass_are_bounded_by_the_cache_memory(tiny: tuple[Any, Any]) -> None:
    """A long prompt's cache, copied once per alternative, keeps a pass within the budget; one
    alternative a pass reads the very same probabilities as sixteen."""
    import torch

    from spanjudge.inference.backends.transformers_reader import _cache_bytes, alternatives_per_pass

    assert alternatives_per_pass(0.5e9, 2 * 1024**3) == 4  # an 8B model's 4k-token prompt: 0.5 GB a copy
    assert alternatives_per_pass(10.0, 2 * 1024**3) == 16 and alternatives_per_pass(5e9, 2 * 1024**3) == 1
    model, tokenizer = tiny
    with torch.no_grad():
        cache = model(torch.tensor([[1, 2, 3, 4, 5]]), use_cache=True).past_key_values
    assert _cache_bytes(cache) == 5 * 2 * 2 * 8 * 4  # tokens x (keys, values) x 2 kv heads x head dim 8 x fp32

    evaluation = parse_judge(TWO_ERRORS)
    prompt = tokenizer(QUESTION)["input_ids"]
    end = {tokenizer.eos_token_id}
    # the batched reading, which copies the cache (a Llama's tree reading never does)
    batched = ProbabilityReader(model, tokenizer, end, tree=False).read(prompt, evaluation)
    one_by_one = ProbabilityReader(model, tokenizer, end, cache_budget_bytes=1, tree=False).read(prompt, evaluation)
    assert list(one_by_one.score_distribution.values()) == pytest.approx(
        list(batched.score_distribution.values()), abs=1e-6
    )
    assert one_by_one.expected_errors == pytest.approx(batched.expected_errors, abs=1e-6)
    assert [e.expected_severity for e in one_by_one.errors] == pytest.approx(
        [e.expected_severity for e in batched.errors], abs=1e-6
    )


def test_the_cache_budget_is_2_gib_or_a_quarter_of_a_gpus_free_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from spanjudge.inference.backends.transformers_reader import CACHE_BUDGET_BYTES, cache_budget

    assert cache_budget(torch.device("cpu")) == CACHE_BUDGET_BYTES == 2 * 1024**3
    free = {"bytes": 60 * 1024**3}  # what torch.cuda.mem_get_info says is free (the stand-in for a GPU here)
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device: (free["bytes"], 80 * 1024**3))
    assert cache_budget(torch.device("cuda", 0)) == 15 * 1024**3
    free["bytes"] = 4 * 1024**3  # a nearly full card: never under the CPU's budget
    assert cache_budget(torch.device("cuda", 0)) == CACHE_BUDGET_BYTES


def test_a_reader_reusing_the_last_prompt_reads_what_a_fresh_one_reads(tiny: tuple[Any, Any]) -> None:
    """With `reuse_prefix`, the next prompt reads only what it does not share with the last reading's
    tokens (the cache cut back to them); the readings equal those of a reader starting afresh."""
    model, tokenizer = tiny
    article = "Article: The cat sat on the mat while the dog slept by the door all afternoon. "
    prompts = [tokenizer(article + f"Summary: {s}")["input_ids"] for s in ("A cat sat.", "A dog sat on a hat.")]
    evaluation = parse_judge(TWO_ERRORS)
    assert isinstance(evaluation, Evaluation)
    end = {tokenizer.eos_token_id}
    reusing = ProbabilityReader(model, tokenizer, end, reuse_prefix=True)
    readings = [reusing.read(prompt, evaluation) for prompt in [*prompts, prompts[0]]]  # A, B (shares), A again
    assert reusing._held is not None and reusing._held[0][: len(prompts[0])] == prompts[0]
    for prompt, reading in zip([*prompts, prompts[0]], readings, strict=True):
        fresh = ProbabilityReader(model, tokenizer, end).read(prompt, evaluation)
        assert reading.expected_errors == pytest.approx(fresh.expected_errors, abs=1e-5)
        assert list(reading.score_distribution.values()) == pytest.approx(
            list(fresh.score_distribution.values()), abs=1e-5
        )
        assert [e.expected_severity for e in reading.errors] == pytest.approx(
            [e.expected_severity for e in fresh.errors], abs=1e-5
        )
    assert readings[0].expected_score != pytest.approx(readings[1].expected_score, abs=1e-6)  # the prompts differ


# -- two engines, one model -------------------------------------------------------------------


@pytest.mark.slow
def test_transformers_and_llama_cpp_read_the_same_probabilities() -> None:
    """SmolLM2-135M-Instruct read by both engines: its Q4_1 GGUF on llama.cpp in this process, and the
    same weights dequantized to float32 on transformers. llama.cpp rounds activations to 8 bits in its
    Q4 matrix products, so the two differ by rounding, not by method. Measured on this reply (2-core
    CPU): P(no error) 0.0017 / 0.0012, expected errors 2.995 / 2.996, confidences within 0.001,
    expected severities within 0.01, expected score 7.37 / 7.30, score distributions 0.063 apart in
    total variation, the locations' token log-probabilities within 0.19. Stated tolerance: probabilities of the
    count decisions within 0.02, expected severities within 0.1, the expected score within 2 points, the score
    distributions within 0.1 (TV), the locations' token log-probabilities within 0.25."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from spanjudge.inference.backends.llamacpp import LlamaCppProbabilityReader

    gguf = smollm2_gguf()
    folder = convert_gguf(gguf)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    question = (
        "Article: The cat sat on the mat.\nSummary: A cat sat on a hat.\nList the summary's errors, then a score."
    )
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": question}], add_generation_prompt=True, tokenize=False
    )
    prompt = tokenizer(text, add_special_tokens=False)["input_ids"]
    end = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")}
    evaluation = parse_judge(TWO_ERRORS)
    on_transformers = ProbabilityReader(model, tokenizer, end).read(prompt, evaluation)
    reader = LlamaCppProbabilityReader(gguf, tokenizer, end, n_ctx=1024)
    try:
        on_llama_cpp = reader.read(prompt, evaluation)
        # the alternatives run one to a pass, none sharing a cell with another: the same reading, up to the
        # rounding of llama.cpp's batches (what sharing and grouping could get wrong is far larger)
        reader.sequences = 2
        one_by_one = reader.read(prompt, evaluation)
    finally:
        reader.close()
    a, b = on_transformers, on_llama_cpp
    assert one_by_one.expected_errors == pytest.approx(b.expected_errors, abs=0.005)
    assert one_by_one.expected_score == pytest.approx(b.expected_score, abs=0.5)
    assert [e.expected_severity for e in one_by_one.errors] == pytest.approx(
        [e.expected_severity for e in b.errors], abs=0.01
    )
    assert sum(b.score_distribution.values()) == pytest.approx(1.0, abs=1e-9)
    assert b.p_no_error == pytest.approx(a.p_no_error, abs=0.02)
    assert [e.confidence for e in b.errors] == pytest.approx([e.confidence for e in a.errors], abs=0.02)
    assert b.expected_errors == pytest.approx(a.expected_errors, abs=0.02 * len(a.errors) + 0.02)
    assert [e.expected_severity for e in b.errors] == pytest.approx([e.expected_severity for e in a.errors], abs=0.1)
    assert b.expected_score == pytest.approx(a.expected_score, abs=2.0)
    total_variation = 0.5 * sum(abs(a.score_distribution[v] - b.score_distribution[v]) for v in SCORES)
    assert total_variation <= 0.1
    for ours, theirs in zip(b.errors, a.errors, strict=True):  # measured: 0.19 nats at most, on a -2.1 token
        assert ours.location_log_probs == pytest.approx(theirs.location_log_probs, abs=0.25)


def test_a_served_judge_reads_its_probabilities_through_the_given_reader(serve: Any) -> None:
    """`probability_reader=` gives `probabilities=True` to an engine that has none (a served judge): the
    reader gets the templated prompt the server got and the parsed evaluation, and its reading lands in
    the result. The reader is a recording stand-in here; `LlamaCppProbabilities` is one (the same reader
    class as the engine test below, which runs it on a real model)."""
    from support.standin import Reply

    from spanjudge.inference.judge import Judge
    from spanjudge.inference.probabilities import ReplyProbabilities

    stand_in, url = serve([Reply(text=TWO_ERRORS)])
    folder = convert_gguf(smollm2_gguf())
    with pytest.raises(SpanjudgeError, match="probabilities are read on"):  # the server alone cannot
        Judge.from_pretrained(folder, engine="openai", base_url=url, probabilities=True)
    seen: list[tuple[Any, Any]] = []
    reading = ReplyProbabilities(p_no_error=0.1, expected_errors=1.5, errors=[], expected_score=42.0,
                                 score_distribution={42: 1.0})  # fmt: skip

    def reader(request: Any, evaluation: Any) -> ReplyProbabilities:
        seen.append((request, evaluation))
        return reading

    judge = Judge.from_pretrained(
        folder, engine="openai", base_url=url, served_model="judge", probabilities=True, probability_reader=reader
    )
    request = judge.request("qags_xsum", "factual consistency", {"Article": "The cat sat on the mat."}, "A cat.")
    (result,) = judge.score([request])
    assert result.probabilities == reading
    [(sent, evaluation)] = seen
    assert sent.messages[-1].content == stand_in.bodies[-1]["prompt"]  # the templated prompt the server got
    assert evaluation == parse_judge(TWO_ERRORS)


@pytest.mark.slow
def test_the_in_process_llama_cpp_engine_reads_what_a_fresh_reader_reads() -> None:
    """`engine="llamacpp"`: llama.cpp in this process writes the evaluations (held to the contract's grammar)
    and reads the probabilities along them on a second context of the same GGUF, into which the prompt the
    generating model has just read is copied; each reading equals one made on a fresh context (which reads
    the prompt itself) up to llama.cpp's batch rounding."""
    from spanjudge.inference.backends.llamacpp import LlamaCppProbabilityReader
    from spanjudge.inference.judge import Judge

    gguf = smollm2_gguf()
    judge = Judge.from_pretrained(
        convert_gguf(gguf), engine="llamacpp", engine_options={"gguf": str(gguf), "n_ctx": 2048},
        constrained=True, probabilities=True, max_new_tokens=160, retries=0, max_context=2048,
    )  # fmt: skip
    article = {"Article": "The cat sat on the mat."}
    requests = [judge.request("qags_xsum", "factual consistency", article, output) for output in ("A cat.", "A dog.")]
    try:
        results = judge.score(requests)
        assert all(result.scored and result.probabilities is not None for result in results)
        backend = judge.backend
        # each reading took the prompt from the generating model's cache: it read only the prompt's last token
        # (its row is read) and the reply, never the prompt itself
        replies = [backend._reader._ids(render_judge(parse_judge(r.raw_replies[-1]))) for r in results]
        assert backend._reader.tokens_read == sum(len(reply) + 1 for reply in replies)
        readings = []
        for request, result in zip(requests, results, strict=True):
            fresh = LlamaCppProbabilityReader(gguf, backend.tokenizer, backend._end_ids, n_ctx=2048)
            try:
                prompt = backend._prompt_ids(ChatRequest.user(judge_chat_text(judge, request)))
                readings.append(fresh.read(prompt, parse_judge(result.raw_replies[-1])))
            finally:
                fresh.close()
    finally:
        judge.close()
    for result, reading in zip(results, readings, strict=True):
        kept = result.probabilities
        assert kept.expected_errors == pytest.approx(reading.expected_errors, abs=1e-3)
        assert kept.expected_score == pytest.approx(reading.expected_score, abs=0.05)
        assert sum(kept.score_distribution.values()) == pytest.approx(1.0, abs=1e-9)


def judge_chat_text(judge: Any, request: Any) -> str:
    """The user message the judge sends an in-process engine for `request` (the engine applies the template)."""
    from spanjudge.inference.judge_conversation import judge_messages

    return judge_messages(request)[0]["content"]


# -- end to end ------------------------------------------------------------------------------


@pytest.mark.slow
def test_score_with_probabilities_writes_expected_values_beside_the_written_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = convert_gguf(smollm2_gguf())
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({"id": "a", "article": "The cat sat on the mat.", "summary": "A cat sat on a hat."}))
    out = tmp_path / "scores.jsonl"
    args = ["score", "--model", str(folder), "--data", str(data), "--out", str(out), "--task", "qags_xsum",
            "--aspect", "factual consistency", "--input", "Article=article", "--output-field", "summary",
            "--constrained", "--max-new-tokens", "160", "--retries", "0", "--format", "html"]  # fmt: skip
    assert cli_main([*args, "--probabilities"]) == 0, capsys.readouterr().err
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["evaluation"]["score"] is not None and row["decoding"]["probabilities"] is True
    read = row["probabilities"]
    assert set(read) == {"p_no_error", "expected_errors", "expected_score", "score_distribution"}
    assert sum(read["score_distribution"].values()) == pytest.approx(1.0)
    assert 0 <= read["expected_score"] <= 100 and 0 <= read["expected_errors"] <= 8
    for error in row["evaluation"]["errors"]:  # the written severity beside the expected one
        assert 0 <= error["confidence"] <= 1 and 1 <= error["expected_severity"] <= 5
    page = (tmp_path / "scores.html").read_text()
    assert "(expected " in page
    capsys.readouterr()
    # the same file without the option is another decoding: refused, not mixed
    assert cli_main(args) == 2
    assert "decoding probabilities=True, not None as now" in capsys.readouterr().err

    # a decision rule stored with the judge (#49): applied by default, its probabilities read without being asked;
    # τ₀ = 0 says "No Error" whatever the reply wrote, and the written errors stay beside, as the reply wrote them
    assert row["evaluation"]["errors"], "the reply wrote no error for the rule to decide on"
    judge = tmp_path / "judge"
    judge.mkdir()
    for file in Path(folder).iterdir():
        (judge / file.name).symlink_to(file)
    # written into spanjudge.json by hand (no fitted_on): still the judge's stored rule, and recorded as such
    (judge / "spanjudge.json").write_text(json.dumps({"decisions": {"no_error_threshold": 0.0}}))
    decided_args = [*args, "--model", str(judge), "--out", str(tmp_path / "decided.jsonl")]
    assert cli_main(decided_args) == 0
    assert "decisions: 'No Error' when P(no error) >= 0\n" in capsys.readouterr().err
    [decided] = [json.loads(line) for line in (tmp_path / "decided.jsonl").read_text().splitlines()]
    assert decided["decoding"]["probabilities"] is True
    assert decided["decoding"]["decisions"] == {"no_error_threshold": 0.0, "min_confidence": None}
    assert decided["evaluation"]["errors"] == [] and decided["evaluation"]["score"] == row["evaluation"]["score"]
    assert decided["decision"] == {"no_error_threshold": 0.0, "min_confidence": None, "source": "stored",
                                   "kept": [], "no_error": True}  # fmt: skip
    assert decided["written_errors"] == row["evaluation"]["errors"]  # with their confidences


def test_probabilities_on_an_engine_that_cannot_read_them_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "o.jsonl"
    code = cli_main(["score", "--model", "judge", "--engine", "openai", "--base-url", "http://127.0.0.1:9/v1",
                     "--data", str(tmp_path / "none.jsonl"), "--out", str(out), "--probabilities"])  # fmt: skip
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert "probabilities are read on the vllm, llamacpp, llamacpp-server or transformers engines, not 'openai'" in err


def test_meta_eval_expected_score_needs_an_engine_that_reads_probabilities() -> None:
    from spanjudge.core.errors import InputError, SpanjudgeError
    from spanjudge.eval.judging.judge_files import DistilledJudge

    with pytest.raises(InputError, match="score=median: must be written, expected or consensus"):
        DistilledJudge("judge", {"score": "median"})
    with pytest.raises(InputError, match="give --judge-option samples=N too"):
        DistilledJudge("judge", {"score": "consensus"})
    with pytest.raises(SpanjudgeError, match="llamacpp-server or transformers engines, not 'openai'"):
        DistilledJudge("judge", {"score": "expected", "engine": "openai", "base_url": "http://127.0.0.1:9/v1"})
    written = DistilledJudge("judge", {"engine": "openai", "base_url": "http://127.0.0.1:9/v1"})
    assert written.name == "distilled:judge" and written.score_kind == "written"
    written.close()
