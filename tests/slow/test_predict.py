"""`from spanjudge import Judge` then `judge.predict(items, task=..., aspect=...)`: plain items in,
typed predictions out (issue #32), with the session's trained smoke judge (conftest's
`trained_judge`) on held-out QAGS-XSum items."""

from __future__ import annotations

import json
import statistics
import types
from pathlib import Path

import pytest
from support.judge_records import qags_xsum_records
from support.training_runs import TrainedRun

import spanjudge
from spanjudge import InputError, Judge, Predictions

TASK, ASPECT = "qags_xsum", "factual consistency"


@pytest.fixture(scope="module")
def judge(trained_judge: TrainedRun) -> Judge:
    return Judge.from_pretrained(trained_judge.adapter, retries=0, max_new_tokens=96, batch_size=8)


def test_the_package_exports_its_public_api_and_nothing_else() -> None:
    assert set(spanjudge.__all__) == {
        "InputError", "Judge", "JudgeOptions", "JudgedEvaluation", "PredictedError", "Prediction", "Predictions",
        "SpanjudgeError", "__version__",
    }  # fmt: skip
    assert all(getattr(spanjudge, name) is not None for name in spanjudge.__all__)
    with pytest.raises(AttributeError, match="no attribute 'judge'"):
        _ = spanjudge.judge  # type: ignore[attr-defined]
    # every other name of the module is private by name (the sub-packages are the implementation)
    public = {n for n, v in vars(spanjudge).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    assert public <= set(spanjudge.__all__), public - set(spanjudge.__all__)


@pytest.mark.slow
def test_predict_judges_plain_items(judge: Judge, shared_data: Path) -> None:
    records = qags_xsum_records(shared_data, 3, offset=20)  # after the 20 the judge trained and validated on
    items = [{"input": r["inputs"]["Article"], "output": r["outputs"]["Summary"]} for r in records]
    items[2] = {"Article": items[2]["input"], "output": items[2]["output"], "id": "by-header"}  # the header itself
    predictions = judge.predict(items, task=TASK, aspect=ASPECT, batch_size=2)

    assert isinstance(predictions, Predictions) and judge.backend.batch_size == 8  # this call's batch size only
    assert [p.id for p in predictions] == ["0", "1", "by-header"]
    scored = [p.score for p in predictions if p.score is not None]
    assert scored, [p.unscored_reason for p in predictions]  # the trained judge writes parseable evaluations
    assert predictions.system_score == pytest.approx(statistics.fmean(scored))
    assert predictions.unscored == sum(p.score is None for p in predictions)
    for item, prediction in zip(items, predictions, strict=True):
        assert (prediction.score is None) == (prediction.unscored_reason is not None)
        for error in prediction.errors:
            assert 1 <= error.severity <= 5 and error.explanation
            if error.start is not None:  # found in the output: the text is the output's own characters
                assert error.text == item["output"][error.start : error.end] and error.text
    as_json = json.loads(predictions.to_json())
    assert as_json["system_score"] == predictions.system_score and len(as_json["items"]) == 3
    assert as_json["items"][0]["errors"] == [vars(e) for e in predictions[0].errors]
    frame = predictions.to_pandas()
    assert list(frame["id"]) == ["0", "1", "by-header"] and list(frame.columns)[:2] == ["id", "score"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("items", "message"),
    [
        ([{"input": "An article."}], "item 0: no 'output'"),
        ([{"output": "A summary."}], "item 0: no 'input' or 'Article'"),
        ([{"input": "An article.", "output": "A summary.", "reference": "Gold."}], "reads no reference"),
        ({"input": "An article.", "output": "A summary."}, "a list of items"),
        (["A summary."], "item 0: a dict"),
    ],
    ids=["no-output", "no-input", "reference-the-task-does-not-read", "one-dict", "a-string"],
)
def test_predict_refuses_bad_items_in_one_line_before_the_model_runs(judge: Judge, items: object, message: str) -> None:
    with pytest.raises(InputError, match=message):
        judge.predict(items, task=TASK, aspect=ASPECT)  # type: ignore[arg-type]
