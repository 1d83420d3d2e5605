"""The one `KEY=VALUE` parser (`core/keyvalue.py`) and the commands that use it:
settings typed as YAML, names kept as text, one message for a malformed item, and the
`--endpoint` syntax with its deprecated bare-URL form."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import InputError
from spanjudge.core.keyvalue import endpoint_urls, parse_endpoints, parse_settings, parse_texts
from spanjudge.data_gen.config import parse_endpoint_options
from spanjudge.training.config import parse_override

pytestmark = pytest.mark.timeout(120)


def test_settings_are_typed_as_yaml_scalars() -> None:
    items = ["n=8192", "share=0.8", "lr=1e-3", "small=-2.5E-4", "on=true", "name=fp8", "empty=", "list=[1, a]"]
    assert parse_settings(items, "--x", "n=1") == {
        "n": 8192, "share": 0.8, "lr": 0.001, "small": -0.00025, "on": True, "name": "fp8", "empty": None,
        "list": [1, "a"],
    }  # fmt: skip
    assert parse_settings([" k = v=w "], "--x", "k=1") == {"k": "v=w"}  # only the first "=" splits
    assert parse_override("training.max_steps=5") == ("training.max_steps", 5)
    # YAML reserves '@', but `@smollm2` is a documented model.base: it stays text
    assert parse_override("model.base=@gemma3") == ("model.base", "@gemma3")


def test_texts_stay_text() -> None:
    # a header names a field: 2024 is the field's name, not a number
    assert parse_texts(["Article = 2024 ", "Summary=true"], "--input", "Article=source") == {
        "Article": "2024",
        "Summary": "true",
    }


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: parse_settings(["max_model_len"], "--engine-arg", "max_model_len=8192"),
         "--engine-arg expects KEY=VALUE (e.g. max_model_len=8192), got 'max_model_len'"),
        (lambda: parse_override("=5"), "--set expects KEY=VALUE (e.g. training.max_steps=5), got '=5'"),
        (lambda: parse_texts(["Article="], "--input", '"Article=source"', "HEADER=FIELD"),
         "--input expects HEADER=FIELD (e.g. \"Article=source\"), got 'Article='"),
        (lambda: parse_endpoints(["gemma2"]),
         "--endpoint expects NAME=URL[,URL...] (e.g. gemma2=http://gpu1:11434,http://gpu2:11434), got 'gemma2'"),
        (lambda: parse_settings(["k=[1"], "--set", "a.b=1"), "--set 'k=[1': the value is not valid YAML"),
    ],
)  # fmt: skip
def test_a_malformed_item_is_one_line_naming_the_option_and_the_item(call, message: str) -> None:
    with pytest.raises(InputError) as caught:
        call()
    assert str(caught.value).startswith(message) and len(str(caught.value).splitlines()) == 1


def test_commands_report_a_malformed_item_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cases = [
        (["prompt", "--input", "Article"], "--input expects HEADER=TEXT"),
        (["train", "--config", "configs/train/smollm2_cpu_smoke.yaml", "--set", "max_steps"], "--set expects KEY="),
        (["meta-eval", "--spans", "rotowire", "--judge", "metric:bleu", "--judge-option", "retries",
          "--out", str(tmp_path / "m")], "--judge-option expects KEY=VALUE (e.g. engine=openai), got 'retries'"),
        (["annotate", "--ensemble", "configs/ensemble/tiny_local.yaml", "--sources", "x.yaml", "--out",
          str(tmp_path / "a"), "--endpoint", "smollm2"], "--endpoint expects NAME=URL[,URL...]"),
    ]  # fmt: skip
    for args, expected in cases:
        code = cli_main(args)
        err = capsys.readouterr().err.strip()
        assert code == 2 and expected in err and len(err.splitlines()) == 1, (args, err)


def test_endpoint_options_accumulate_per_name() -> None:
    assert parse_endpoint_options is parse_endpoints  # data_gen's name for the same parser
    assert parse_endpoints(["a=http://x/v1", "a = http://y/v1, ", "b=http://z/v1"]) == {
        "a": ["http://x/v1", "http://y/v1"],
        "b": ["http://z/v1"],
    }


def test_a_single_model_command_takes_name_equals_url_silently() -> None:
    err = io.StringIO()
    assert endpoint_urls(["smollm2=http://a/v1,http://b/v1"], "smollm2", stderr=err) == ("http://a/v1", "http://b/v1")
    assert err.getvalue() == ""
    with pytest.raises(InputError, match="--endpoint names model 'gemma3', but this command's model is 'smollm2'"):
        endpoint_urls(["gemma3=http://a/v1"], "smollm2")


def test_the_deprecated_bare_url_still_works_with_one_warning_line() -> None:
    err = io.StringIO()
    urls = endpoint_urls(["http://a:8011/v1", "https://b/v1?x=1"], "meta-llama/Llama-3.1-70B-Instruct", stderr=err)
    assert urls == ("http://a:8011/v1", "https://b/v1?x=1")
    warning = err.getvalue()
    assert len(warning.splitlines()) == 1 and "deprecated" in warning
    assert "--endpoint meta-llama/Llama-3.1-70B-Instruct=URL" in warning


def test_perturb_points_the_perturber_with_both_endpoint_syntaxes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from spanjudge.eval.perturb.cli import open_perturber

    config = tmp_path / "perturber.yaml"
    config.write_text('backend: {kind: openai, model: tiny, endpoints: ["http://127.0.0.1:9/v1"], retries: 0}\n')
    url = "http://127.0.0.1:8011/v1"
    for items, warned in (([f"tiny={url}"], False), ([url], True)):
        llm, info = open_perturber(config, tmp_path / "frozen.jsonl", items)
        try:
            assert llm.backend.spec.endpoints == (url,) and info["model"] == "tiny"
        finally:
            llm.close()
        assert ("deprecated" in capsys.readouterr().err) is warned
