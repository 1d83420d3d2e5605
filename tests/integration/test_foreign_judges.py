"""Foreign judges and formats (#17): a judge prompt template given by the user, rendered the
same in training and scoring; lm-evaluation-harness samples and plain text files as input to
`spanjudge score`; and the provenance every results file carries.

Model calls go to the scripted stand-in server (tests/support/standin.py) through the real OpenAI
client, with SmolLM2's real tokenizer and chat template, so the prompt a judge would read is
the exact text compared here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.standin import Reply

from spanjudge.app.cli import main as cli_main
from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.core.run_info import LIBRARIES
from spanjudge.inference.contract import Evaluation
from spanjudge.inference.hf_models import convert_gguf
from spanjudge.inference.judge_conversation import TEMPLATE_FILE, judge_training_texts, request_from_record
from spanjudge.inference.prompts import PromptTemplate
from spanjudge.inference.shipped_models import smollm2_gguf
from spanjudge.training.config import load_train_config

REPO = Path(__file__).resolve().parents[2]
NO_ERROR = "No Error\n\nOverall score: 100"

# The shape of the thesis's Fig. A.18 / OpeNLGauge's released fine-tuning template (our
# transcription of its structure: task line, aspect definition, each input and the output
# under its header, instructions), rendered the way OpeNLGauge's scripts render it.
FIG_A18 = """### Task
Your task is to evaluate a model output for {{ task_name }} task with respect to {{ aspect_name }}. \
{{ extra_task_info }}

### Aspect Definition
{{ aspect_name }} - {{ aspect_definition }}
{% for key, value in inputs.items() -%}
{% if value %}
### {{ key }}
{{ value }}
{% endif %}
{% endfor %}
{% for key, value in outputs.items() -%}
### {{ key }}
{{ value }}
{% endfor %}
### Instructions
For any error in the output, identify its location, assign a severity level and provide an explanation. \
Report at most 8 errors! Finally, provide an overall score between 0 and 100 for {{ aspect_name }} of the output.
"""

RECORD = {
    "id": "tc-1",
    "task_id": "topical_chat",
    "aspect_name": "groundedness",
    "inputs": {
        "Dialogue history": "A: Do you like jazz?\nB: I do, Miles Davis most of all.",
        "Knowledge": "Kind of Blue",
    },
    "outputs": {"Response": "Miles Davis recorded Kind of Blue in 1959."},
    "extra_task_info": "Dialogue participants are discussing interesting topics, facts and trivia.",
    "evaluation": {"errors": [], "score": 95},
}


@pytest.fixture(scope="module")
def tokenizer_folder() -> Path:
    return convert_gguf(smollm2_gguf())  # SmolLM2's tokenizer and chat template


@pytest.fixture
def template_file(tmp_path: Path) -> Path:
    path = tmp_path / "openlgauge.jinja"
    path.write_text(FIG_A18, encoding="utf-8")
    return path


def _record() -> dict:
    return json.loads(json.dumps(RECORD))


def _score(*args: str) -> int:
    return cli_main(["score", "--engine", "openai", "--served-model", "judge", "--max-new-tokens", "64", *args])


# -- 1. a judge prompt template given by the user --------------------------------------------


def test_user_template_renders_the_figure_a18_shape(template_file: Path) -> None:
    record = _record()
    request = request_from_record(record, load_catalog(), "r:1", PromptTemplate.load(template_file))
    prompt = request.user_prompt()
    assert prompt.startswith(
        f"### Task\nYour task is to evaluate a model output for {request.task.title} task with respect to "
        f"{request.aspect.name}. {RECORD['extra_task_info']}\n\n### Aspect Definition\n"
        f"{request.aspect.name} - {request.aspect.definition}\n"
    )
    assert "\n\n### Dialogue history\nA: Do you like jazz?\nB: I do, Miles Davis most of all.\n\n\n" in prompt
    assert "### Knowledge\nKind of Blue\n\n\n### Response\nMiles Davis recorded Kind of Blue in 1959.\n" in prompt
    assert "```" not in prompt  # texts as the template writes them, not fenced
    assert prompt.endswith("for " + request.aspect.name + " of the output.")  # Jinja's default: no final newline


def test_an_unknown_or_undefined_variable_is_one_error_naming_the_template(tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.jinja"
    unknown.write_text("### Task\n{{ task_name }}\n{{ context }}\n")
    with pytest.raises(InputError) as caught:
        PromptTemplate.load(unknown)
    assert str(caught.value).startswith(f"{unknown}:3: unknown variable 'context'; a judge prompt template can use")
    undefined = tmp_path / "undefined.jinja"
    undefined.write_text("{{ aspect_name }}\n{{ inputs.Article }}\n")
    request = request_from_record(_record(), load_catalog(), "r:1", PromptTemplate.load(undefined))
    with pytest.raises(InputError) as caught:
        request.user_prompt()
    assert str(caught.value) == f"{undefined}:2: 'dict object' has no attribute 'Article' (item tc-1)"
    broken = tmp_path / "broken.jinja"
    broken.write_text("ok\n{% for x in inputs %}\n")
    with pytest.raises(InputError, match=rf"^{broken}:\d+: template syntax error"):
        PromptTemplate.load(broken)


def test_the_template_runs_in_a_sandbox(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.jinja"
    sneaky.write_text("{{ inputs.__class__.__mro__ }}\n")
    request = request_from_record(_record(), load_catalog(), "r:1", PromptTemplate.load(sneaky))
    with pytest.raises(InputError, match=rf"^{sneaky}:1: access to attribute '__class__'"):
        request.user_prompt()


def test_a_bad_training_template_names_the_config_field(tmp_path: Path) -> None:
    records = tmp_path / "train.jsonl"
    records.write_text(json.dumps(_record()) + "\n")
    template = tmp_path / "t.jinja"
    template.write_text("{{ knowledge }}\n")
    config = tmp_path / "train.yaml"
    config.write_text(
        f"model: {{base: '@smollm2'}}\ndata: {{train: {records}, prompt_template: {template}}}\n"
        f"training: {{output_dir: {tmp_path / 'run'}}}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_train_config(config)
    assert "data.prompt_template: " in str(caught.value) and f"{template}:1: unknown variable 'knowledge'" in str(
        caught.value
    )


def test_scoring_sends_exactly_the_training_prompt(serve, tmp_path: Path, tokenizer_folder: Path) -> None:
    """The adapter folder keeps the template it was trained with (named in spanjudge.json);
    `score` picks it up by itself and the judge reads the very prompt training used."""
    record = _record()
    template = PromptTemplate.from_source(FIG_A18, tmp_path / "openlgauge.jinja")
    request = request_from_record(record, load_catalog(), "train.jsonl:1", template)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_folder)
    training_prompt, _ = judge_training_texts(tokenizer, request, Evaluation.model_validate(record["evaluation"]))
    # a judge folder as `spanjudge train` leaves it: tokenizer, the template copy, spanjudge.json naming it
    judge = tmp_path / "judge"
    shutil.copytree(tokenizer_folder, judge, ignore=shutil.ignore_patterns("*.safetensors", "*.gguf"))
    (judge / TEMPLATE_FILE).write_text(FIG_A18, encoding="utf-8")
    (judge / "spanjudge.json").write_text(
        json.dumps({"base_model": str(tokenizer_folder), "prompt_template": TEMPLATE_FILE})
    )
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({k: v for k, v in record.items() if k != "evaluation"}) + "\n")
    stand_in, url = serve([Reply(text=NO_ERROR)])
    out = tmp_path / "scores.jsonl"
    assert _score("--model", str(judge), "--base-url", url, "--data", str(data), "--out", str(out)) == 0
    assert stand_in.bodies[0]["prompt"] == training_prompt
    assert "Your task is to evaluate a model output for" in training_prompt
    # --prompt-template names the same file for a judge that stores none: the same text again
    stand_in2, url2 = serve([Reply(text=NO_ERROR)])
    other = tmp_path / "template.jinja"
    other.write_text(FIG_A18, encoding="utf-8")
    out2 = tmp_path / "scores2.jsonl"
    code = _score("--model", str(tokenizer_folder), "--base-url", url2, "--data", str(data), "--out", str(out2),
                  "--prompt-template", str(other))  # fmt: skip
    assert code == 0 and stand_in2.bodies[0]["prompt"] == training_prompt


def test_a_template_error_stops_score_before_any_model_call(
    serve, tmp_path: Path, tokenizer_folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    template = tmp_path / "t.jinja"
    template.write_text("{{ task_name }}\n{{ inputs['Article'] }}\n")
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({k: v for k, v in _record().items() if k != "evaluation"}) + "\n")
    stand_in, url = serve([Reply(text=NO_ERROR)])
    code = _score("--model", str(tokenizer_folder), "--base-url", url, "--data", str(data),
                  "--out", str(tmp_path / "o.jsonl"), "--prompt-template", str(template))  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and stand_in.hits == 0
    assert f"{template}:2: 'dict object' has no attribute 'Article' (item tc-1)" in " ".join(err.split())


# -- 2. foreign input formats ----------------------------------------------------------------


def _lm_eval_sample(doc_id: int, document: str, generation: str, filter_name: str = "none") -> dict:
    """One line of lm-eval's samples_<task>_<date>.jsonl for a generate_until task."""
    prompt = f"Summarize: {document}"
    return {
        "doc_id": doc_id,
        "doc": {"document": document, "summary": "a reference summary", "id": f"x{doc_id}"},
        "target": "a reference summary",
        "arguments": {"gen_args_0": {"arg_0": prompt, "arg_1": {"until": ["\n\n"], "do_sample": False}}},
        "resps": [[generation + " (raw)"]],
        "filtered_resps": [generation],
        "filter": filter_name,
        "metrics": ["rouge1"],
        "doc_hash": "d",
        "prompt_hash": "p",
        "target_hash": "t",
        "rouge1": 0.4,
    }


def test_lm_eval_samples_are_scored(serve, tmp_path: Path, tokenizer_folder: Path) -> None:
    samples = tmp_path / "samples_xsum_2026-01-01T00-00-00.jsonl"
    rows = [
        _lm_eval_sample(0, "The cat sat on the mat.", "A cat sat."),
        _lm_eval_sample(1, "Rain in May.", "It rained."),
    ]
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    stand_in, url = serve([Reply(text=NO_ERROR)])
    out = tmp_path / "scores.jsonl"
    code = _score("--model", str(tokenizer_folder), "--base-url", url, "--data", str(samples), "--out", str(out),
                  "--data-format", "lm-eval", "--task", "qags_xsum", "--aspect", "factual consistency",
                  "--input", "Article=doc.document")  # fmt: skip
    assert code == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["output"]) for r in results] == [("0", "A cat sat."), ("1", "It rained.")]
    # sent in prompt order (prefix reuse), so the article is in one of the prompts, not the first
    assert any("The cat sat on the mat." in body["prompt"] for body in stand_in.bodies)
    # the raw generation instead of the filtered one; one document under two filters keeps two ids
    two = tmp_path / "two_filters.jsonl"
    two.write_text("".join(json.dumps(_lm_eval_sample(0, "Doc.", "Out.", f)) + "\n" for f in ("strict", "flex")))
    out2 = tmp_path / "scores2.jsonl"
    code = _score("--model", str(tokenizer_folder), "--base-url", url, "--data", str(two), "--out", str(out2),
                  "--data-format", "lm-eval", "--task", "qags_xsum", "--aspect", "factual consistency",
                  "--input", "Article=doc.document", "--output-field", "resps")  # fmt: skip
    assert code == 0
    results = [json.loads(line) for line in out2.read_text().splitlines()]
    assert [(r["id"], r["output"]) for r in results] == [("0/strict", "Out. (raw)"), ("0/flex", "Out. (raw)")]


def test_a_loglikelihood_sample_is_one_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    samples = tmp_path / "samples_hellaswag.jsonl"
    sample = {"doc_id": 0, "doc": {"ctx": "c"}, "arguments": [["c", " a"]], "resps": [[["-1.5", "False"]]],
              "filtered_resps": [["-1.5", "False"]], "filter": "none"}  # fmt: skip
    samples.write_text(json.dumps(sample) + "\n")
    code = _score("--model", "unused", "--data", str(samples), "--out", str(tmp_path / "o.jsonl"),
                  "--data-format", "lm-eval", "--task", "qags_xsum", "--aspect", "factual consistency")  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and f"{samples}:1: the sample holds no generated text" in err and "generate_until" in err


def test_plain_text_files_are_scored_line_by_line(serve, tmp_path: Path, tokenizer_folder: Path) -> None:
    src, hyp = tmp_path / "src.txt", tmp_path / "hyp.txt"
    src.write_text("The cat sat on the mat.\nRain fell in May.\n")
    hyp.write_text("A cat sat.\r\nIt rained in May.")  # CRLF, and no final newline
    stand_in, url = serve([Reply(text=NO_ERROR)])
    out = tmp_path / "scores.jsonl"
    code = _score("--model", str(tokenizer_folder), "--base-url", url, "--src", str(src), "--hyp", str(hyp),
                  "--out", str(out), "--task", "qags_xsum", "--aspect", "factual consistency")  # fmt: skip
    assert code == 0
    results = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["output"]) for r in results] == [("1", "A cat sat."), ("2", "It rained in May.")]
    # sent in prompt order (prefix reuse), so the article is in one of the prompts, not the first
    assert any("The cat sat on the mat." in body["prompt"] for body in stand_in.bodies)


@pytest.mark.parametrize(
    ("files", "message"),
    [
        (
            {"src": "a\nb\n", "hyp": "a\n"},
            "{hyp}: 1 lines, but {src} has 2; --hyp and --src must hold one item per line",
        ),
        ({"src": "a\n", "hyp": "a\n", "ref": "r\nq\n", "--input": "Article=ref"}, "{ref}: 2 lines, but {src} has 1"),
        ({"src": "a\n", "hyp": "a\n", "ref": "r\n"}, "--ref {ref}: no input of task 'qags_xsum' reads it"),
        ({"hyp": "a\n"}, "plain text input needs --src and --hyp (one item per line); --src is missing"),
    ],
)
def test_plain_text_mistakes_are_one_line(
    tmp_path: Path, files: dict[str, str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    paths = {key: tmp_path / f"{key}.txt" for key in ("src", "hyp", "ref")}
    args = []
    for key, text in files.items():
        if key.startswith("--"):  # an option, not a file
            args += [key, text]
            continue
        paths[key].write_text(text)
        args += [f"--{key}", str(paths[key])]
    code = _score("--model", "unused", "--out", str(tmp_path / "o.jsonl"), "--task", "qags_xsum",
                  "--aspect", "factual consistency", *args)  # fmt: skip
    err = " ".join(capsys.readouterr().err.split())
    assert code == 2 and message.format(**{k: str(p) for k, p in paths.items()}) in err, err


# -- 3. provenance of results files ----------------------------------------------------------


def _head() -> str | None:
    done = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=False)
    return done.stdout.strip() if done.returncode == 0 else None


def _check_run_info(info: dict, command: str) -> None:
    from importlib.metadata import version

    assert info["command"] == command
    assert info["spanjudge_version"] == version("spanjudge")
    assert info["git_hash"] == _head()  # a checkout here: its commit (None where there is no git)
    assert set(info["libraries"]) == set(LIBRARIES) and info["libraries"]["torch"] == version("torch")
    assert "seed" in info and info["created"]


def test_score_writes_its_provenance_beside_the_results(serve, tmp_path: Path, tokenizer_folder: Path) -> None:
    src, hyp = tmp_path / "src.txt", tmp_path / "hyp.txt"
    src.write_text("The cat sat on the mat.\n")
    hyp.write_text("A cat sat.\n")
    _stand_in, url = serve([Reply(text=NO_ERROR)])
    out = tmp_path / "scores.jsonl"
    code = _score("--model", str(tokenizer_folder), "--base-url", url, "--src", str(src), "--hyp", str(hyp),
                  "--out", str(out), "--task", "qags_xsum", "--aspect", "factual consistency")  # fmt: skip
    assert code == 0
    info = json.loads((tmp_path / "scores.run.json").read_text())
    _check_run_info(info, "score")
    options = info["options"]
    assert options["model"] == str(tokenizer_folder) and options["hyp"] == str(hyp) and options["retries"] == 3
    assert options["max_new_tokens"] == 64 and options["engine"] == "openai" and options["prompt_template"] is None
    assert info["seed"] is None  # greedy decoding; nothing drawn at random on the first try


def test_meta_eval_results_carry_their_provenance(tmp_path: Path) -> None:
    out = tmp_path / "run"
    env = {**os.environ, "COLUMNS": "200"}
    done = subprocess.run(
        [str(Path(sys.executable).with_name("spanjudge")), "meta-eval",
         "--suite", str(REPO / "configs/eval/thesis.yaml"), "--dataset", "summeval", "--max-items", "16",
         "--judge", "metric:bleu", "--resamples", "0", "--no-plots", "--out", str(out)],
        capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    info = json.loads((out / "results.json").read_text())["run"]
    _check_run_info(info, "meta-eval")
    assert info["options"]["judges"] == ["metric:bleu"] and info["options"]["max_items"] == 16
    assert info["seed"] == info["options"]["suite"]["bootstrap"]["seed"]


@pytest.mark.slow
def test_train_stores_its_template_and_score_reads_it(serve, tmp_path: Path, shared_data: Path) -> None:
    """A real (one-step, CPU) training run with data.prompt_template: the adapter folder holds a
    copy named in spanjudge.json, and scoring the adapter sends the training prompt."""
    from support.judge_records import write_qags_records
    from support.training_runs import ENV, smoke_args

    records = write_qags_records(tmp_path / "annotate", shared_data, train=4, validation=0)
    (records / "validation.jsonl").unlink()
    template = tmp_path / "mine.jinja"
    template.write_text(FIG_A18, encoding="utf-8")
    sets = ["--set", "training.max_steps=1", "--set", f"data.prompt_template={template}"]
    args = smoke_args(records, tmp_path / "run", *sets)
    done = subprocess.run([sys.executable, *args], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    adapter = tmp_path / "run" / "adapter"
    meta = json.loads((adapter / "spanjudge.json").read_text())
    assert meta["prompt_template"] == TEMPLATE_FILE and (adapter / TEMPLATE_FILE).read_text() == FIG_A18
    assert meta["judge_prompt_sha256"] == PromptTemplate.load(template).sha256
    record = json.loads((records / "train.jsonl").read_text().splitlines()[0])
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(adapter)
    request = request_from_record(record, load_catalog(), "train.jsonl:1", PromptTemplate.load(template))
    training_prompt, _ = judge_training_texts(tokenizer, request, Evaluation.model_validate(record["evaluation"]))
    data = tmp_path / "items.jsonl"
    data.write_text(json.dumps({k: v for k, v in record.items() if k != "evaluation"}) + "\n")
    stand_in, url = serve([Reply(text=NO_ERROR)])
    out = tmp_path / "scores.jsonl"
    assert _score("--model", str(adapter), "--base-url", url, "--data", str(data), "--out", str(out)) == 0
    assert stand_in.bodies[0]["prompt"] == training_prompt
    info = json.loads(out.with_suffix(".run.json").read_text())
    assert info["options"]["prompt_template"]["sha256"] == meta["judge_prompt_sha256"]
