"""The perturbation library (issue #7): rule-based perturbations exactly as the papers state
them, span bookkeeping, the registry, and LLM-made perturbations through the backend layer."""

from __future__ import annotations

import json
import random
import re
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from support.standin import Reply

from spanjudge.core.errors import InputError
from spanjudge.eval.perturb.llm_perturb import LLMPerturber, validate
from spanjudge.eval.perturb.perturbations import (
    ATTACKS,
    DHP_SUMMARIZATION,
    INJECTION_ASPECTS,
    PERTURBATIONS,
    Perturbed,
    Rejected,
    apply_rule,
    changed_spans,
    count_outcomes,
    get,
    split_sentences,
)
from spanjudge.inference.backends import BackendSpec, SamplingParams

pytestmark = pytest.mark.timeout(300)

HAND = (
    "Josh wants to buy a tablet and doesn't know which brand he should choose. According to Brian, other brands "
    "are better than Apple and he can get a Samsung tablet cheaper. Josh will call Brian after work to talk about it."
)


@pytest.fixture(scope="module")
def references(shared_data: Path) -> list[str]:
    """Ten distinct SummEval references (CNN/DM highlights) from the staged data."""
    seen: list[str] = []
    with (shared_data / "meta_eval" / "summeval" / "summeval.jsonl").open(encoding="utf-8") as handle:
        for line in handle:
            reference = json.loads(line)["reference"]
            if reference not in seen:
                seen.append(reference)
            if len(seen) == 10:
                break
    return seen


def _outside(text: str, spans: tuple[tuple[int, int], ...]) -> str:
    """The text with the given spans cut out."""
    out, cursor = [], 0
    for start, end in spans:
        out.append(text[cursor:start])
        cursor = end
    return "".join(out) + text[cursor:]


def _apply(key: str, text: str, seed: int) -> Perturbed:
    outcome = get(key).apply(text, random.Random(seed), seed=seed)
    assert isinstance(outcome, Perturbed), outcome
    assert outcome.text != text
    # the spans are the ground truth: everything outside them is the original, unchanged
    assert _outside(outcome.text, outcome.spans) == _outside(text, outcome.removed)
    return outcome


def _sentences(text: str) -> list[str]:
    return [text[s:e] for s, e in split_sentences(text)]


# -- registry --------------------------------------------------------------------------------


def test_registry_names_and_groups() -> None:
    names = [get(key).name for key in ATTACKS]
    assert names == [
        "Repetition", "Passive Voice", "Inversion", "Improper Connective", "Sentence Exchange",
        "Incorrect Verb Form", "Word Exchange", "Spelling Mistake", "Uncommon Phrase", "Complex Sentence",
        "Abbreviation", "Hypernym", "Sentence Deletion", "Complement", "Continuation", "Different Entity",
        "Conflicting Fact", "Negation",
    ]  # fmt: skip
    rule_based = {get(key).name for key in ATTACKS if get(key).method == "rule"}
    assert rule_based == {"Sentence Exchange", "Word Exchange", "Spelling Mistake", "Sentence Deletion"}
    assert len(DHP_SUMMARIZATION) == 12
    assert {(get(k).name, get(k).degree) for k in DHP_SUMMARIZATION} == {
        (name, degree)
        for name in ("Random Deletions", "Random Typos", "Fictional Named Entities", "Grammatical Errors",
                     "Reordering", "Rewriting and Insertion")
        for degree in ("minor", "major")
    }  # fmt: skip
    for key, perturbation in PERTURBATIONS.items():
        assert perturbation.key == key and perturbation.aspects
        assert (perturbation.method == "rule") == (perturbation.template is None)
    assert len(INJECTION_ASPECTS["summeval"]) == 4 and all(
        len(subs) == 4 for subs in INJECTION_ASPECTS["summeval"].values()
    )
    assert len(INJECTION_ASPECTS["topical_chat"]) == 5


def test_unknown_key_is_an_input_error_listing_valid_keys() -> None:
    with pytest.raises(InputError) as info:
        get("attack.nonsense")
    assert isinstance(info.value, KeyError)
    assert "attack.word_exchange" in str(info.value) and "attack.nonsense" in str(info.value)


def test_llm_perturbation_cannot_be_applied_as_a_rule() -> None:
    with pytest.raises(InputError, match="LLM-made"):
        get("attack.negation").apply(HAND, random.Random(0))


# -- sentence splitting ---------------------------------------------------------------------


def test_split_sentences_keeps_abbreviations_and_tokenized_periods() -> None:
    text = "Mr. Smith met Dr. Jones in the U.S. today. They talked . T. S. Eliot wrote it!\nNew line here"
    assert _sentences(text) == [
        "Mr. Smith met Dr. Jones in the U.S. today.",
        "They talked .",
        "T. S. Eliot wrote it!",
        "New line here",
    ]


# -- DHP rule-based -------------------------------------------------------------------------


@pytest.mark.parametrize(("key", "k"), [("dhp.char_deletion.minor", 10), ("dhp.char_deletion.major", 50)])
def test_char_deletion_removes_exactly_k_alphanumerics(key: str, k: int, references: list[str]) -> None:
    for seed, text in enumerate(references):
        out = _apply(key, text, seed)
        assert len(out.text) == len(text) - k and not out.spans
        removed_chars = "".join(text[s:e] for s, e in out.removed)
        assert len(removed_chars) == k and removed_chars.isalnum()
        # nothing else changed: the non-alphanumerics are all still there, in order
        assert re.sub(r"\w", "", out.text) == re.sub(r"\w", "", text)


def test_char_deletion_rejects_a_text_shorter_than_k() -> None:
    assert isinstance(get("dhp.char_deletion.major").apply("Too short.", random.Random(0)), Rejected)


@pytest.mark.parametrize(("key", "k"), [("dhp.typos.minor", 10), ("dhp.typos.major", 50)])
def test_typos_apply_k_effective_typos_of_the_typo_package(key: str, k: int, references: list[str]) -> None:
    state = random.getstate()
    for seed, text in enumerate(references[:5]):
        out = _apply(key, text, seed)
        kinds = out.provenance["edits"]
        assert isinstance(kinds, list) and len(kinds) == k
        assert set(kinds) <= set(get(key).params["kinds"])  # type: ignore[arg-type]
        assert out.spans or out.removed
    assert random.getstate() == state  # typo.StrErrer reseeds the global module: we restore it


def test_reordering_is_never_the_identity(references: list[str]) -> None:
    text = "One is first. Two comes next. Three follows. Four ends it."
    for seed in range(200):
        minor = _apply("dhp.reordering.minor", text, seed)
        assert sorted(_sentences(minor.text)) == sorted(_sentences(text))
        moved = [a != b for a, b in zip(_sentences(minor.text), _sentences(text), strict=True)]
        assert sum(moved) == 2  # exactly two sentences swapped
        major = _apply("dhp.reordering.major", text, seed)
        assert _sentences(major.text) != _sentences(text)
        assert sorted(_sentences(major.text)) == sorted(_sentences(text))
    two = "Alpha goes. Beta goes."
    assert _apply("dhp.reordering.major", two, 3).text == "Beta goes. Alpha goes."
    assert isinstance(get("dhp.reordering.minor").apply("Only one sentence.", random.Random(0)), Rejected)
    assert isinstance(get("dhp.reordering.major").apply("Same. Same.", random.Random(0)), Rejected)
    for seed, text in enumerate(references):
        if len(set(_sentences(text))) >= 2:
            _apply("dhp.reordering.major", text, seed)


def test_word_span_deletion_deletes_k_consecutive_words(references: list[str]) -> None:
    for seed, text in enumerate(references):
        out = _apply("dhp.word_span_deletion.minor", text, seed)
        assert len(out.text.split()) == len(text.split()) - 5 and len(out.removed) == 1
        first = out.provenance["edits"]["first_word"]  # type: ignore[index]
        assert out.text.split() == text.split()[:first] + text.split()[first + 5 :]


def test_ending_replacement_takes_another_item_from_the_pool() -> None:
    endings = [("a", "She smiled."), ("b", "He left town."), ("c", "They won.")]
    results = apply_rule(get("dhp.story.random_ending"), endings, seed=1, pool=[text for _, text in endings])
    for item_id, text in endings:
        out = results[item_id]
        assert isinstance(out, Perturbed) and out.text != text and out.text in {t for _, t in endings}
        assert out.spans == ((0, len(out.text)),) and out.removed == ((0, len(text)),)
    wrong = apply_rule(get("dhp.story.wrong_ending"), endings[:1], seed=1, pool={"a": ["She cried."]})
    assert wrong["a"] == Perturbed("She cried.", ((0, 10),), ((0, 11),), wrong["a"].provenance)  # type: ignore[union-attr]
    assert isinstance(get("dhp.qa.random_answer").apply("x", random.Random(0), pool=["x"]), Rejected)


def test_same_seed_same_output_other_seed_other_output(references: list[str]) -> None:
    for key in ("dhp.char_deletion.minor", "dhp.typos.minor", "attack.spelling_mistake", "attack.word_exchange"):
        items = [(str(i), text) for i, text in enumerate(references)]
        first, again = apply_rule(get(key), items, seed=7), apply_rule(get(key), items, seed=7)
        other = apply_rule(get(key), items, seed=8)
        assert first == again
        assert [first[i] for i, _ in items] != [other[i] for i, _ in items]


# -- 002 rule-based -------------------------------------------------------------------------


def _word_exchange_ok(original: str, perturbed: str) -> None:
    """Check 002's Word Exchange rules sentence by sentence (single-spaced input)."""
    for before, after in zip(_sentences(original), _sentences(perturbed), strict=True):
        a, b = before.split(), after.split()
        assert len(a) == len(b) and sorted(a) == sorted(b)
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(a) <= 5:
            assert not diff
            continue
        # changed positions come in adjacent swapped pairs of pure-lowercase words
        pairs = [diff[i : i + 2] for i in range(0, len(diff), 2)]
        for i, j in pairs:
            assert j == i + 1 and (a[i], a[j]) == (b[j], b[i])
            assert re.fullmatch("[a-z]+", a[i]) and re.fullmatch("[a-z]+", a[j])
        if len(a) < 10:
            assert len(pairs) <= 1 and all(1 <= i <= len(a) - 2 for i, _ in pairs)
        else:
            half = len(a) // 2
            assert len(pairs) <= 2
            assert sum(1 <= i <= half - 2 for i, _ in pairs) <= 1
            assert sum(half <= i <= len(a) - 2 for i, _ in pairs) <= 1
            assert all(1 <= i <= half - 2 or half <= i <= len(a) - 2 for i, _ in pairs)


def test_word_exchange_follows_the_length_rules(references: list[str]) -> None:
    short = "the cat sat on mats."  # 5 tokens: untouched
    assert isinstance(get("attack.word_exchange").apply(short, random.Random(0)), Rejected)
    six = "Then the big dog ran home."
    outs = {_apply("attack.word_exchange", six, seed).text for seed in range(50)}
    # eligible i in [1, 4] with both words pure lowercase: (1,2) (2,3) (3,4); "home." is not pure
    assert outs == {"Then big the dog ran home.", "Then the dog big ran home.", "Then the big ran dog home."}
    for seed, text in enumerate([HAND, *references]):
        out = _apply("attack.word_exchange", text, seed)
        _word_exchange_ok(text, out.text)
    long = "Then the big dog and the small cat ran far away home."  # 12 tokens: one swap per half
    for seed in range(30):
        out = _apply("attack.word_exchange", long, seed)
        assert len(out.provenance["edits"]) == 2  # type: ignore[arg-type]
        _word_exchange_ok(long, out.text)


def _one_edit(word: str, new: str) -> bool:
    """Whether `new` is `word` with one of 002's edits: repeat, delete at ≥1, adjacent swap."""
    repeats = {word[:i] + word[i] + word[i:] for i in range(len(word))}
    deletes = {word[:i] + word[i + 1 :] for i in range(1, len(word))}
    swaps = {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)}
    return new in repeats | deletes | swaps


def test_spelling_mistake_edits_at_most_three_eligible_tokens_per_sentence(references: list[str]) -> None:
    for seed, text in enumerate([HAND, *references]):
        out = _apply("attack.spelling_mistake", text, seed)
        for before, after in zip(_sentences(text), _sentences(out.text), strict=True):
            a, b = before.split(), after.split()
            changed = [i for i in range(len(a)) if a[i] != b[i]]
            assert len(changed) <= 3
            for i in changed:
                assert re.fullmatch("[a-z]{4,}", a[i]) and _one_edit(a[i], b[i])
            eligible = sum(bool(re.fullmatch("[a-z]{4,}", w)) for w in a)
            assert len([e for e in out.provenance["edits"] if e["sentence"] == _sentences(text).index(before)]) == min(  # type: ignore[union-attr, index]
                3, eligible
            )
    assert isinstance(get("attack.spelling_mistake").apply("A cat. The dog!", random.Random(0)), Rejected)


def test_sentence_deletion_drops_exactly_the_last_sentence(references: list[str]) -> None:
    for seed, text in enumerate([HAND, *references]):
        out = _apply("attack.sentence_deletion", text, seed)
        assert _sentences(out.text) == _sentences(text)[:-1]
        assert out.removed == ((len(out.text), len(text)),)
    assert isinstance(get("attack.sentence_deletion").apply("Just one.", random.Random(0)), Rejected)


def test_sentence_exchange_is_a_non_identity_permutation() -> None:
    for seed in range(100):
        out = _apply("attack.sentence_exchange", HAND, seed)
        assert _sentences(out.text) != _sentences(HAND) and sorted(_sentences(out.text)) == sorted(_sentences(HAND))


def test_count_outcomes_groups_rejections_by_reason() -> None:
    results = apply_rule(get("attack.sentence_deletion"), [("a", HAND), ("b", "One."), ("c", "Two.")], seed=0)
    made, rejected = count_outcomes(results.values())
    assert made == 1 and rejected == {"fewer than 2 sentences (1 found)": 2}


# -- changed_spans --------------------------------------------------------------------------


def test_changed_spans_on_hand_examples() -> None:
    assert changed_spans("The cat sat.", "The dog sat.") == (((4, 7),), ((4, 7),))
    assert changed_spans("He will call.", "He will not call.") == (((8, 12),), ())
    assert changed_spans("A b c. D e.", "A b c.") == ((), ((6, 11),))
    assert changed_spans("same", "same") == ((), ())
    original, rewritten = "Josh buys a tablet today.", "Josh purchases a device today."
    spans, removed = changed_spans(original, rewritten)
    assert [rewritten[s:e] for s, e in spans] == ["purchases", "device"]
    assert [original[s:e] for s, e in removed] == ["buys", "tablet"]
    assert _outside(rewritten, spans) == _outside(original, removed)


def test_validate_cleans_conservatively_and_rejects_with_reasons() -> None:
    original = "The cat sat on the mat."
    assert (
        validate("Here is the revised text:\n```\nThe dog sat on the mat.\n```", original) == "The dog sat on the mat."
    )
    assert validate('"The dog sat on the mat."', original) == "The dog sat on the mat."
    assert isinstance(validate("  The cat  sat on the mat. ", original), Rejected)
    assert validate("I'm sorry, but I cannot help with that.", original).reason.startswith("refusal")  # type: ignore[union-attr]
    assert validate("```\n\n```", original).reason.startswith("empty")  # type: ignore[union-attr]
    assert validate("Dog.", original).reason.startswith("length")  # type: ignore[union-attr]
    quoted = "I'm sorry, said the cat on the mat."  # a refusal phrase the original has is no refusal
    assert validate("I'm sorry, said the dog on the mat.", quoted) == "I'm sorry, said the dog on the mat."


# -- LLM path with the stand-in server ------------------------------------------------------
# The stand-in (tests/support/standin.py) is a scripted OpenAI-compatible server: these paths need
# replies we control (a refusal, an empty or unchanged reply), which no real model gives on demand.


def _spec(url: str, model: str = "stand-in") -> BackendSpec:
    return BackendSpec(kind="openai", model=model, endpoints=(url,), backoff_s=0.01, retries=0)


def test_llm_perturbation_is_validated_frozen_and_reused(serve, tmp_path: Path) -> None:
    items = [("ok", "The cat sat on the mat."), ("same", "A bird flew."), ("empty", "It rained."), ("no", "Sun.")]
    replies = {
        "ok": Reply(text="Revised text:\nThe dog sat on the mat."),
        "same": Reply(text="A bird flew."),
        "empty": Reply(text="Revised text:\n   "),  # no text after the header (an empty reply is a server fault)
        "no": Reply(text="I'm sorry, I can't do that."),
    }

    def reply(body: dict) -> Reply:
        prompt = body["messages"][-1]["content"]
        return next(r for key, r in replies.items() if dict(items)[key] in prompt)

    stand_in, url = serve(reply)
    store = tmp_path / "frozen.jsonl"
    perturbation = get("dhp.fictional_entities.minor")
    seen: list[tuple[int, int]] = []

    def track(label: str, total: int, *, done: int = 0) -> Callable[[int], None]:
        """A progress Tracker that records (done, total) after each step."""
        count = [done]

        def advance(n: int) -> None:
            count[0] += n
            seen.append((count[0], total))

        return advance

    with LLMPerturber(_spec(url), store) as perturber:
        results = perturber.perturb(perturbation, items, seed=3, progress=track)
    ok = results["ok"]
    assert isinstance(ok, Perturbed) and ok.text == "The dog sat on the mat."
    assert ok.spans == ((4, 7),) and ok.removed == ((4, 7),)
    assert ok.provenance["model"] == "openai:stand-in" and ok.provenance["template"] == perturbation.template
    assert len(str(ok.provenance["prompt_sha256"])) == 64 and isinstance(ok.provenance["seed"], int)
    reasons = {key: r.reason.split(":")[0] for key, r in results.items() if isinstance(r, Rejected)}
    assert reasons == {"same": "unchanged", "empty": "empty", "no": "refusal"}
    assert perturber.summary.made == 1 and sum(perturber.summary.rejected.values()) == 3
    assert seen[-1] == (4, 4) and stand_in.hits == 4
    # the prompt carries the text fenced, and each item has its own derived seed
    seeds = {body["seed"] for body in stand_in.bodies}
    assert len(seeds) == 4 and "```\nThe cat sat on the mat.\n```" in stand_in.bodies[0]["messages"][-1]["content"]
    assert len(store.read_text().splitlines()) == 4

    with LLMPerturber(_spec(url), store) as again:  # a re-run: all frozen, no model call
        rerun = again.perturb(perturbation, items, seed=3)
    assert stand_in.hits == 4 and rerun == results
    assert again.summary.reused == 4 and again.summary.made == 0


def test_frozen_store_drops_a_torn_last_line_and_names_a_damaged_one(serve, tmp_path: Path) -> None:
    stand_in, url = serve([Reply(text="The dog sat on the mat.")])
    store = tmp_path / "frozen.jsonl"
    perturbation = get("attack.different_entity")
    items = [("a", "The cat sat on the mat."), ("b", "The cat sat on a mat.")]
    with LLMPerturber(_spec(url), store) as perturber:
        perturber.perturb(perturbation, items, seed=0)
    lines = store.read_text().splitlines()
    store.write_text(lines[0] + "\n" + lines[1][: len(lines[1]) // 2])  # killed mid-write
    with LLMPerturber(_spec(url), store) as perturber:
        results = perturber.perturb(perturbation, items, seed=0)
    assert stand_in.hits == 3 and perturber.summary.reused == 1 and perturber.summary.made == 1
    assert all(isinstance(r, Perturbed) for r in results.values())
    assert [json.loads(line)["item_id"] for line in store.read_text().splitlines()] == ["a", "b"]

    store.write_text("{not json\n" + store.read_text())
    with pytest.raises(InputError, match=r"frozen\.jsonl:1"):
        LLMPerturber(_spec(url), store)


def test_failed_calls_are_not_frozen_and_all_failed_is_an_error(serve, tmp_path: Path) -> None:
    _, url = serve([Reply(status=500)])
    store = tmp_path / "frozen.jsonl"
    with LLMPerturber(_spec(url), store) as perturber, pytest.raises(Exception, match="stand-in") as info:
        perturber.perturb(get("attack.negation"), [("a", "He will call.")], seed=0)
    assert "all 1 calls" in str(info.value)
    assert not store.exists() or store.read_text() == ""


def test_error_injection_prompt_names_sub_aspects(serve, tmp_path: Path) -> None:
    stand_in, url = serve([Reply(text="The cat sat on teh mat.")])
    injection = get("dual.summeval.fluency").variant("n2", n=2)
    with LLMPerturber(_spec(url), tmp_path / "f.jsonl") as perturber:
        result = perturber.perturb(injection, [("a", "The cat sat on the mat.")], seed=0)["a"]
    prompt = stand_in.bodies[0]["messages"][-1]["content"]
    names = {sub.name for sub in INJECTION_ASPECTS["summeval"]["fluency"]}
    assert "exactly 2 separate" in prompt and "Error 2: fluency / " in prompt
    assert sum(name in prompt for name in names) >= 1
    assert isinstance(result, Perturbed) and result.provenance["key"] == "dual.summeval.fluency@n2"


# -- the real tiny model --------------------------------------------------------------------


@pytest.mark.slow
def test_real_smollm2_makes_or_rejects_with_reasons(smollm2_server, tmp_path: Path) -> None:
    """SmolLM2-135M through llama.cpp: each outcome is a validated, frozen text with spans
    or a rejection with a reason (a 135M model often fails validation; we count, not hope)."""
    spec = BackendSpec(kind="openai", model="smollm2", endpoints=(smollm2_server.base_url,), timeout_s=120)
    items = [
        ("a", "Andros Townsend came on in the 83rd minute. Tottenham drew with Burnley."),
        ("b", "The council will vote on the new park on Monday. Residents support the plan."),
    ]
    started = time.monotonic()
    with LLMPerturber(spec, tmp_path / "f.jsonl", sampling=SamplingParams(temperature=0.7, max_tokens=120)) as p:
        for key in ("dhp.fictional_entities.minor", "attack.negation", "dhp.grammatical_errors.minor"):
            for item_id, outcome in p.perturb(get(key), items, seed=0).items():
                if isinstance(outcome, Perturbed):
                    assert outcome.provenance["model"] == "openai:smollm2"
                    assert outcome.spans or outcome.removed
                    assert _outside(outcome.text, outcome.spans) == _outside(dict(items)[item_id], outcome.removed)
                else:
                    assert outcome.reason
    assert p.summary.made + sum(p.summary.rejected.values()) == 6
    print(f"smollm2 perturbations: {p.summary} in {time.monotonic() - started:.1f}s")
