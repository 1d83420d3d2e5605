"""A run is what made it: new ids under other settings are refused, an edited prompt template is another run, the
meta-eval judge store follows the template's content, and frozen perturbations of another model are refused.

Model servers are the scripted stand-in of tests/support/standin.py on 127.0.0.1."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.faults import GOOD, Serve, items, one_line, served_score, tiny_adapter
from support.standin import Reply

from spanjudge.core.errors import InputError


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (["--model", "another-judge"], "judge 'stand-in-judge (served as judge)'"),
        (["--aspect", "fluency", "--aspect-definition", "How fluent."], "--aspect 'factual consistency'"),
        (["--max-new-tokens", "200"], "decoding max_new_tokens=96, not 200 as now"),
    ],
    ids=["model", "aspect", "decoding"],
)
def test_new_ids_under_other_settings_are_refused(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], change: list[str], expected: str
) -> None:
    stand_in, url = serve([Reply(text=GOOD)])
    out = tmp_path / "scores.jsonl"
    assert served_score(url, items(tmp_path / "a.jsonl", 2), out) == 0
    before = out.read_text()
    capsys.readouterr()
    assert served_score(url, items(tmp_path / "b.jsonl", 2, first=10), out, *change) == 2  # other ids
    line = one_line(capsys)
    assert f"{out}:1: id 'item-0' was scored with {expected}" in line and "another --out" in line
    assert out.read_text() == before and stand_in.hits == 2


def test_an_edited_prompt_template_is_another_run(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, url = serve([Reply(text=GOOD)])
    template = tmp_path / "judge.jinja"
    template.write_text("Rate {{ aspect_name }}: {{ outputs }}\n")
    out = tmp_path / "scores.jsonl"
    assert served_score(url, items(tmp_path / "a.jsonl", 1), out, "--prompt-template", str(template)) == 0
    template.write_text("Judge {{ aspect_name }} strictly: {{ outputs }}\n")
    capsys.readouterr()
    assert served_score(url, items(tmp_path / "b.jsonl", 1, first=5), out, "--prompt-template", str(template)) == 2
    assert "prompt template" in one_line(capsys)


def test_meta_eval_judge_store_follows_the_template_content(tmp_path: Path) -> None:
    from spanjudge.eval.judging.judge_files import DistilledJudge, model_fingerprint
    from spanjudge.eval.judging.store import store_name

    template = tmp_path / "judge.jinja"
    template.write_text("Rate {{ aspect_name }}:\n{{ outputs | fence }}\n")
    options = {"engine": "openai", "base_url": "http://127.0.0.1:9/v1", "prompt_template": str(template)}
    first = DistilledJudge("stand-in", options)
    template.write_text("Judge {{ aspect_name }} strictly:\n{{ outputs | fence }}\n")  # same name, new text
    second = DistilledJudge("stand-in", options)
    assert store_name(first) != store_name(second)
    first.close()
    second.close()
    adapter = tiny_adapter(tmp_path / "adapter")
    (adapter / "prompt_template.jinja").write_text("one")
    before = model_fingerprint(str(adapter))
    (adapter / "prompt_template.jinja").write_text("two")
    assert model_fingerprint(str(adapter)) != before


def test_frozen_perturbations_of_another_model_are_refused(serve: Serve, tmp_path: Path) -> None:
    from spanjudge.eval.perturb.llm_perturb import LLMPerturber
    from spanjudge.eval.perturb.perturbations import get
    from spanjudge.inference.backends import BackendSpec

    stand_in, url = serve([Reply(text="The dog sat on the mat.")])
    store = tmp_path / "frozen.jsonl"
    perturbation = get("dhp.fictional_entities.minor")
    items = [("a", "The cat sat on the mat.")]

    def spec(model: str) -> BackendSpec:
        return BackendSpec(kind="openai", model=model, endpoints=(url,), backoff_s=0.01, retries=0)

    with LLMPerturber(spec("model-a"), store) as perturber:
        perturber.perturb(perturbation, items, seed=0)
    with LLMPerturber(spec("model-a"), store) as again:  # the same perturber: reused, no call
        again.perturb(perturbation, items, seed=0)
    assert stand_in.hits == 1
    with pytest.raises(InputError, match=r"frozen\.jsonl:1: frozen by another perturber \(model 'openai:model-a'"):
        LLMPerturber(spec("model-b"), store)
    assert stand_in.hits == 1
