"""Two engines' readings of one student, compared from the judgments the protocol kept (no model):
bench/gemma_judging_speed.py --kept."""

from __future__ import annotations

import pytest
from support.scripts import load_script

# the agreement-weighted Gemma student (adapter 5861ed37…), read on dev by the protocol (transformers) and on
# llama.cpp in process: the kept files in bench/results/distill_judgments/
TRANSFORMERS, LLAMACPP = "gemma3-vote-agree-cut-s42", "gemma3-vote-agree-cut-llamacpp-s42"


@pytest.fixture(scope="module")
def bench():
    return load_script("bench/gemma_judging_speed.py")


def test_two_engines_reading_the_same_adapter_are_compared_output_by_output(bench) -> None:
    row = bench.kept_row("engines", LLAMACPP, TRANSFORMERS)
    assert isinstance(row, dict), row
    assert (row["engine"], row["outputs"]) == ("llamacpp-in-process", 120)
    assert 0 < row["identical_replies"] <= row["outputs"]
    spread = row["p_no_error"]
    assert spread["median"] is not None and 0 <= spread["median"] <= spread["max"] <= 1
    # a reading against itself: every scored reply identical, every difference 0
    same = bench.kept_row("itself", TRANSFORMERS, TRANSFORMERS)
    kept = bench.archived(bench.KEPT, TRANSFORMERS, "dev")["student+probabilities"]["rows"]
    assert same["identical_replies"] == sum(bool(row.get("probabilities")) for row in kept.values())
    assert row["identical_replies"] < same["identical_replies"] <= same["outputs"] == 120
    assert same["p_no_error"] == {"median": 0, "max": 0}


def test_readings_of_different_adapters_are_refused(bench) -> None:
    refused = bench.kept_row("x", LLAMACPP, "gemma3-vote-cut-s42")
    assert refused == f"{LLAMACPP} and gemma3-vote-cut-s42 read different adapters: their replies are not comparable"
    missing = bench.kept_row("x", "no-such-run", TRANSFORMERS)
    assert missing.startswith("no kept dev reading of no-such-run under ")
