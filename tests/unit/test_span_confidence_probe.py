"""A linear probe on a student's states (`bench/span_confidence_probe.py`): where each error block's states are
read in the reply, and a probe fitted on one fold of tables that ranks the other."""

from __future__ import annotations

import numpy as np
from support.scripts import load_script

from spanjudge.inference.chat import encode_text
from spanjudge.inference.contract import ErrorAnnotation, Evaluation, render_judge


def test_each_block_is_read_at_its_location_tokens_and_at_its_severity() -> None:
    from transformers import AutoTokenizer

    from spanjudge.inference.hf_models import convert_gguf
    from spanjudge.inference.shipped_models import smollm2_gguf

    bench = load_script("bench/span_confidence_probe.py")
    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(smollm2_gguf()))
    evaluation = Evaluation(
        errors=[
            ErrorAnnotation(location="scored 4 goals", explanation="The data says 3.", severity=3),
            ErrorAnnotation(location="in overtime", explanation="It ended in normal time.", severity=5),
        ],
        score=2,
    )
    text = render_judge(evaluation)
    reply = encode_text(tokenizer, text)
    places = bench.block_places(tokenizer, text, evaluation, reply)
    assert [tokenizer.decode([reply[p] for p in location]).strip() for location, _ in places] == [
        "scored 4 goals",
        "in overtime",
    ]
    assert [tokenizer.decode(reply[: end + 1]).rstrip().endswith(f"Severity: {s}") for (_, end), s in
            zip(places, (3, 5), strict=True)] == [True, True]  # fmt: skip


def test_a_probe_fitted_on_one_fold_ranks_the_other() -> None:
    bench = load_script("bench/span_confidence_probe.py")
    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 40))
    fold = np.arange(200) % 2
    y = (x[:, 3] + 0.3 * rng.normal(size=200) > 0).astype(float)  # one direction holds the label
    scores = bench.held_out(x, y, fold, inner=(np.arange(200) // 2) % 2)
    ranked = np.mean([a > b for a in scores[y == 1] for b in scores[y == 0]])
    assert ranked > 0.85
    shuffled = bench.held_out(x, rng.permutation(y), fold)  # a label no state holds: no ranking carries over
    assert abs(np.mean([a > b for a in shuffled[y == 1] for b in shuffled[y == 0]]) - 0.5) < 0.15
