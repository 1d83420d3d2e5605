"""Drafted greedy decoding (`decoding: drafted`, issue #67): prompt-lookup guesses and a cut output layer write
the replies that greedy decoding over the whole vocabulary writes, and the probability reading after them
reuses their cache. On tiny random models (a Llama; a Gemma 3 whose local layer sees 8 tokens), whose replies
leave the cut vocabulary often, so rewrites happen; then the session's trained smoke judge through `Judge`,
against the batched engine."""

from __future__ import annotations

from typing import Any

import pytest
from support.brute_force import TWO_ERRORS, tiny_llama
from support.judge_records import qags_xsum_records
from support.tiny_models import tiny_gemma3_model
from support.training_runs import TrainedRun

from spanjudge import Judge
from spanjudge.inference.backends.transformers_drafted import DraftedReader, guess_of
from spanjudge.inference.backends.transformers_reader import ProbabilityReader
from spanjudge.inference.contract import Evaluation, parse_judge
from spanjudge.inference.contract.render import SCORE_FIELD, render_judge

ARTICLE = "Article: The cat sat on the mat while the dog slept by the door all afternoon. Summary: "
SUMMARIES = ("A cat sat.", "A dog sat on a hat.", "The dog slept by the door.")


@pytest.fixture(scope="module")
def tiny() -> tuple[Any, Any]:
    return tiny_llama()


@pytest.fixture(scope="module", params=["llama", "gemma3"])
def model(request: pytest.FixtureRequest, tiny: tuple[Any, Any]) -> Any:
    if request.param == "llama":
        return tiny[0]
    return tiny_gemma3_model(len(tiny[1]), seed=1)


def greedy(model: Any, prompt: list[int], max_tokens: int, end: set[int]) -> list[int]:
    import torch

    with torch.inference_mode():
        output = model.generate(
            torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, eos_token_id=sorted(end),
            pad_token_id=sorted(end)[0], temperature=None, top_p=None, top_k=None,
        )  # fmt: skip
    return output[0, len(prompt) :].tolist()


def test_guesses_copy_what_followed_the_latest_earlier_occurrence() -> None:
    assert guess_of([1, 2, 3, 4, 1, 2, 5, 1, 2], ngram=2, draft=3) == [5, 1, 2]  # the latest "1 2" first
    assert guess_of([7, 8, 9, 8], ngram=2, draft=2) == [9, 8]  # no earlier "9 8": the last token alone
    assert guess_of([1, 2, 3], ngram=2, draft=4) == []


def test_drafted_replies_are_the_greedy_replies(model: Any, tiny: tuple[Any, Any]) -> None:
    """Every reply equals `generate`'s greedy one, prompts sharing a prefix one after another (the writer reuses
    the last cache, past the Gemma's 8-token window); the random model leaves the cut vocabulary, so replies are
    rewritten from a token the whole output layer chose, and its repetitions are guessed."""
    tokenizer = tiny[1]
    end = {tokenizer.eos_token_id}
    writer = DraftedReader(model, tokenizer, end)
    for summary in [*SUMMARIES, SUMMARIES[0]]:
        prompt = tokenizer(ARTICLE + summary)["input_ids"]
        assert writer.write(prompt, 40) == greedy(model, prompt, 40, end), summary
    assert writer.rewrites > 0 and writer.guessed > 0


def test_a_stopped_reply_is_greedy_up_to_the_cut_then_the_score_field_then_greedy_again(
    model: Any, tiny: tuple[Any, Any]
) -> None:
    """`stop_at` (for a judge: `contract.first_repeat`, before the first error block written again) cuts the
    checked reply's text; the reply is greedy decoding's up to the cut, then the score field written for the judge,
    then greedy decoding's after both, the cache cut back past the rewrites and the random model's guesses."""
    tokenizer = tiny[1]
    end = {tokenizer.eos_token_id}
    prompt = tokenizer(ARTICLE + SUMMARIES[1])["input_ids"]
    whole = greedy(model, prompt, 60, end)
    assert len(whole) > 40  # the random model writes on
    cut = len(tokenizer.decode(whole[:20], skip_special_tokens=True))
    writer = DraftedReader(model, tokenizer, end, stop_at=lambda text: cut if len(text) > cut else None)
    reply = writer.write(prompt, 60)
    forced = writer._ids(SCORE_FIELD.rstrip())
    kept = 20 + len(forced)
    assert reply[:20] == whole[:20] and reply[20:kept] == forced
    assert reply[kept:] == greedy(model, [*prompt, *reply[:kept]], 60 - kept, end)
    # a rule that finds nothing to cut leaves the greedy reply whole
    assert DraftedReader(model, tokenizer, end, stop_at=lambda text: None).write(prompt, 60) == whole


def test_replies_written_together_are_the_replies_written_one_at_a_time(
    model: Any, tiny: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`write_all` writes each reply as a row of one batch (`RowCache`: holes where a row's guess failed, masks of
    ours, the Gemma's 8-token window by position, rows packed again where the holes pile up): the replies are those
    written one at a time, stopped or not, and each one's cache, handed back to the reading, holds what reading its
    prompt and reply afresh holds."""
    import torch

    from spanjudge.inference.backends import row_cache

    monkeypatch.setattr(row_cache, "SLACK", 3)  # pack often
    tokenizer = tiny[1]
    end = {tokenizer.eos_token_id}
    prompts = [tokenizer(ARTICLE + summary)["input_ids"] for summary in (*SUMMARIES, "A cat sat on a dog.")]
    cut = 30
    for stop_at in (None, lambda text: cut if len(text) > cut else None):
        alone = DraftedReader(model, tokenizer, end, stop_at=stop_at)
        together = DraftedReader(model, tokenizer, end, stop_at=stop_at)
        assert together.writes_together
        replies = together.write_all(prompts, 60)
        assert replies == [alone.write(prompt, 60) for prompt in prompts]
        assert together.passes < alone.passes and together.rewrites > 0
    for (tokens, cache, hidden), prompt, reply in zip(together._written, prompts, replies, strict=True):
        assert tokens == [*prompt, *reply[:-1]] and sorted(hidden)[-1] == len(tokens) - 1
        fresh = together._recording_cache()
        with torch.inference_mode():
            together._states(tokens, fresh)
        assert cache.get_seq_length() == fresh.get_seq_length() == len(tokens)
        for ours, theirs in zip(cache.layers, fresh.layers, strict=True):
            held = ours.keys.shape[-2]  # a sliding layer's: its window's last tokens at least
            assert held >= min(len(tokens), 7)
            assert torch.allclose(ours.keys, theirs.keys[:, :, -held:], atol=1e-5)
            assert torch.allclose(ours.values, theirs.values[:, :, -held:], atol=1e-5)


def test_a_reading_after_written_states_reads_what_a_fresh_reader_reads(model: Any, tiny: tuple[Any, Any]) -> None:
    """A reader holding the cache and final hidden states of prompt + reply (as the writer leaves them) reads the
    reply's choices without running the model over them again, and reads what a reader starting afresh reads."""
    import torch

    tokenizer = tiny[1]
    end = {tokenizer.eos_token_id}
    evaluation = parse_judge(TWO_ERRORS)
    assert isinstance(evaluation, Evaluation)
    prompt = tokenizer(ARTICLE + SUMMARIES[1])["input_ids"]
    reader = DraftedReader(model, tokenizer, end)
    tokens = [*prompt, *reader._ids(render_judge(evaluation))]
    cache = reader._recording_cache()
    with torch.inference_mode():
        states = reader._states(tokens, cache)
    reader.hold(tokens, cache, {position: state for position, state in enumerate(states)})
    calls = []
    original = model.forward
    model.forward = lambda *args, **kwargs: calls.append(kwargs) or original(*args, **kwargs)
    try:
        reading = reader.read(prompt, evaluation)
    finally:
        del model.forward
    assert calls == []  # the rows came from the held states; the alternatives ran through the decoder alone
    fresh = ProbabilityReader(model, tokenizer, end).read(prompt, evaluation)
    assert reading.p_no_error == pytest.approx(fresh.p_no_error, abs=1e-5)
    assert reading.expected_errors == pytest.approx(fresh.expected_errors, abs=1e-5)
    assert list(reading.score_distribution.values()) == pytest.approx(list(fresh.score_distribution.values()), abs=1e-5)
    assert [e.expected_severity for e in reading.errors] == pytest.approx(
        [e.expected_severity for e in fresh.errors], abs=1e-5
    )
    # the locations' tokens are read from the written states too
    assert all(e.location_log_probs for e in fresh.errors)
    for ours, theirs in zip(reading.errors, fresh.errors, strict=True):
        assert ours.location_log_probs == pytest.approx(theirs.location_log_probs, abs=1e-5)


@pytest.mark.slow
def test_a_drafted_judge_writes_and_reads_what_the_batched_judge_does(
    trained_judge: TrainedRun, shared_data: Any
) -> None:
    """The trained smoke judge on held-out QAGS-XSum items, with its probabilities: the same replies, and
    probabilities within 1e-4 of the exact reader's."""
    records = qags_xsum_records(shared_data, 4, offset=20)
    items = [{"input": r["inputs"]["Article"][:1200], "output": r["outputs"]["Summary"]} for r in records]
    task = {"task": "qags_xsum", "aspect": "factual consistency"}
    judged = {}
    for decoding in ("batched", "drafted"):
        judge = Judge.from_pretrained(
            trained_judge.adapter, retries=0, max_new_tokens=96, probabilities=True, decoding=decoding
        )
        judged[decoding] = [p.evaluation for p in judge.predict(items, **task)]
        judge.close()
    batched, drafted = judged["batched"], judged["drafted"]
    assert [p.raw_replies for p in drafted] == [p.raw_replies for p in batched]
    read = [(b, d) for b, d in zip(batched, drafted, strict=True) if b.probabilities is not None]
    assert read, [p.raw_replies for p in batched]  # the trained judge writes parseable evaluations
    for b, d in read:
        assert d.probabilities is not None
        assert d.probabilities.p_no_error == pytest.approx(b.probabilities.p_no_error, abs=1e-4)
        assert d.probabilities.expected_score == pytest.approx(b.probabilities.expected_score, abs=1e-2)
        assert [e.confidence for e in d.probabilities.errors] == pytest.approx(
            [e.confidence for e in b.probabilities.errors], abs=1e-4
        )
        for ours, theirs in zip(d.probabilities.errors, b.probabilities.errors, strict=True):
            assert ours.location_log_probs == pytest.approx(theirs.location_log_probs, abs=1e-4)
