"""Counting replies that write an error twice (`bench/repeated_errors.py`), on replies rendered in the judge format:
a repeat is the same location and explanation again, a cut reply counts what it wrote, and the committed report is
what the committed dev judgments give."""

from __future__ import annotations

import gzip
import json

from support.scripts import REPO, load_script

from spanjudge.inference.contract import ErrorAnnotation, Evaluation
from spanjudge.inference.contract.render import render_judge


def reply(*errors: tuple[str, str]) -> str:
    annotations = [ErrorAnnotation(location=loc, explanation=why, severity=3) for loc, why in errors]
    return render_judge(Evaluation(errors=annotations, score=40))


def test_a_block_written_again_is_a_repeat_and_a_shared_location_alone_is_not() -> None:
    bench = load_script("bench/repeated_errors.py")
    assert bench.repeats(reply(("3 goals", "Two goals were scored."), ("3 goals", "Two goals were scored.")))
    assert not bench.repeats(reply(("3 goals", "Two goals were scored."), ("3 goals", "It was a draw.")))
    assert not bench.repeats(reply())  # "No Error"
    looping = reply(*[("a trend", "The data fluctuates.")] * 2)
    assert bench.repeats(looping[: looping.rindex("Severity")])  # cut after the second explanation: a repeat
    assert not bench.repeats(looping[: looping.rindex("fluctuates")])  # cut inside it: not yet


def test_the_committed_report_is_what_the_committed_dev_judgments_give() -> None:
    bench = load_script("bench/repeated_errors.py")
    committed = json.loads((REPO / "bench/results/repeated_errors.json").read_text())
    kept = sorted(p for p in bench.JUDGMENTS.iterdir() if (p / bench.KEPT).is_file())
    assert [r["label"] for r in committed["rows"]] == [p.name for p in kept]
    first = kept[0]
    rows = json.loads(gzip.decompress((first / bench.KEPT).read_bytes()))["rows"]
    assert bench.run_row(first.name, rows) == committed["rows"][0]
