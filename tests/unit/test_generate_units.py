"""`spanjudge generate` without real models: post-processing of real-looking replies, the
prompt templates shipped in configs/generate/, config mistakes that must stop a run with
one line, and the run itself against scripted stand-in servers (an empty reply, a server
answering 500) - failure paths a real model cannot be made to show on demand."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.standin import Reply

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.data_gen.config import load_sources
from spanjudge.data_gen.generate import GenerateSummary, plan_jobs, run_generate
from spanjudge.data_gen.generate_config import PostProcess, load_generate_config
from spanjudge.data_gen.generate_post import postprocess
from spanjudge.data_gen.generate_prompts import load_templates, next_speaker, render_prompt
from spanjudge.data_gen.source_run import SourceRun

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]
SYSTEMS = REPO / "configs" / "generate" / "systems"
RULES = PostProcess()
DIALOGUE_STRIP = (r"(?:participant\s+|speaker\s+)?[AB]\s*:\s*",)


# ---------------------------------------------------------------------------------------
# Post-processing


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("Sure! Here is a short summary of the article:\n\nThe council approved the budget.",
         "The council approved the budget."),
        ("Certainly, here's a one-sentence summary: The council approved the budget.",
         "The council approved the budget."),
        ("Here is the summary.\nThe council approved the budget.", "The council approved the budget."),
        ("Sure thing!\n\nSummary: The council approved the budget.", "The council approved the budget."),
        ("**Summary:**\nThe council approved the budget.", "The council approved the budget."),
        ("```\nThe council approved the budget.\n```", "The council approved the budget."),
        ("Sure! Here's my summary:\n'''\nThe council approved the budget.\n'''", "The council approved the budget."),
        ("The council approved the budget.\n\nI hope this helps! Let me know if you need anything else.",
         "The council approved the budget."),
        ("\n\n  The council approved the budget.  \n", "The council approved the budget."),
    ],
    ids=["sure-here-is", "same-line", "here-is-dot", "stacked-label", "bold-label", "fence", "opener-and-fence",
         "closer", "whitespace"],
)  # fmt: skip
def test_chat_wrappers_are_removed(raw: str, expected: str) -> None:
    result = postprocess(raw, RULES, output_header="Summary")
    assert result.text == expected and result.rejected is None
    if raw.strip() != expected:
        assert result.steps  # what was removed is reported


@pytest.mark.parametrize(
    "text",
    [
        "Okay, so the man went back to the store the next morning.",
        "Sure enough, the rain came before noon.",
        "Here is where the story begins: a lighthouse on a rock.",
        "Great Britain won 27 gold medals in 2016.",
        "The summary of the meeting: nothing was decided.",
        "'Tis the season, said the old man, and it's cold.",
    ],
)
def test_ordinary_openings_are_left_alone(text: str) -> None:
    result = postprocess(text, RULES, output_header="Story")
    assert (result.text, result.steps, result.rejected) == (text, (), None)


def test_stop_sequences_cut_at_the_earliest_and_raw_survives_elsewhere() -> None:
    raw = "Paris.\nQuestion: What is the capital of Italy?\nAnswer: Rome."
    result = postprocess(raw, RULES, output_header="Answer", stops=("\nAnswer:", "\nQuestion:"))
    assert result.text == "Paris."
    assert result.steps == ("cut at '\\nQuestion:' (char 6)",)
    config_stop = postprocess("one two three", RULES.model_copy(update={"stop": (" three",)}), output_header="Text")
    assert config_stop.text == "one two"


def test_dialogue_speaker_tag_is_stripped_before_cutting_at_the_line_break() -> None:
    raw = "Sure! Here's a response:\nB: i love that movie , have you seen the sequel ?\nA: no"
    result = postprocess(raw, RULES, output_header="Response", stops=("\n",), strip=DIALOGUE_STRIP)
    assert result.text == "i love that movie , have you seen the sequel ?"
    quoted = postprocess('"I do, every summer."', RULES, output_header="Response", stops=("\n",))
    assert quoted.text == "I do, every summer."


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("", "empty reply"),
        ("   \n\n ", "empty reply"),
        ("Sure! Here is the summary:", "empty after post-processing"),
        ("```\n\n```", "empty after post-processing"),
        ("...", "empty after post-processing"),
    ],
)
def test_empty_outputs_are_rejected_with_a_reason(raw: str, reason: str) -> None:
    assert postprocess(raw, RULES, output_header="Summary").rejected == reason


def test_min_chars_and_switching_preamble_stripping_off() -> None:
    assert postprocess("ok", RULES.model_copy(update={"min_chars": 3}), output_header="Answer").rejected
    raw = "Sure! Here is a summary:\nThe budget passed."
    kept = postprocess(raw, RULES.model_copy(update={"strip_preamble": False}), output_header="Summary")
    assert kept.text == raw


# ---------------------------------------------------------------------------------------
# Templates


def test_next_speaker_alternates() -> None:
    assert next_speaker("A: hi\nB: hello\n") == "A"
    assert next_speaker("A: hi\nB: hello\nA: how are you?") == "B"
    assert next_speaker("just some text") == "B"


def test_every_shipped_template_renders_for_its_tasks_in_both_styles() -> None:
    catalog = load_catalog()
    config = load_generate_config(SYSTEMS / "tiny_local.yaml")
    templates = load_templates(config, SYSTEMS / "tiny_local.yaml")
    families = {t.path.stem for t in templates.by_name.values()}
    assert {"summarization", "data_to_text", "dialogue", "story", "question_answering"} <= families
    training = {t.id for t in catalog.training_tasks()}
    assert training <= set(templates.defaults), f"no template for {training - set(templates.defaults)}"
    for template in templates.by_name.values():
        for task_id in template.spec.tasks:
            task = catalog.task(task_id)
            inputs = {h: f"<{h} text>\n" for h in task.input_headers}
            chat = render_prompt(template, task, inputs, "chat")
            completion = render_prompt(template, task, inputs, "completion")
            for header in task.input_headers:
                assert f"<{header} text>" in chat and f"<{header} text>" in completion
            assert "{{" not in chat + completion and chat != completion


def test_story_and_narrative_qa_get_their_thesis_variants(tmp_path: Path) -> None:
    rows = [
        {"prompt": "A dragon opens a bakery.", "summary": "A girl finds a map.", "question": "What does she find?"},
    ]
    data = tmp_path / "inputs.jsonl"
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": [
        {"name": "wp", "format": "jsonl", "path": str(data), "task": "story_generation",
         "fields": {"inputs": {"Writing prompt": "prompt"}}},
        {"name": "nqa", "format": "jsonl", "path": str(data), "task": "narrative_qa",
         "fields": {"inputs": {"Story summary": "summary", "Question": "question"}}},
    ]}))  # fmt: skip
    config_path = SYSTEMS / "tiny_local.yaml"
    summary = GenerateSummary(tmp_path)
    jobs = plan_jobs(
        load_generate_config(config_path), config_path, load_sources(sources), sources, load_catalog(), None, summary
    )
    names = {(j.item.dataset, j.system_name, j.template.name) for j in jobs}
    assert names == {
        ("wp", "smollm2-135m-long", "story_long"), ("wp", "smollm2-135m-short", "story_short"),
        ("wp", "gemma3-270m-long", "story_long"), ("wp", "gemma3-270m-short", "story_short"),
        ("nqa", "smollm2-135m-free", "narrative_qa"), ("nqa", "smollm2-135m-concise", "narrative_qa_concise"),
        ("nqa", "gemma3-270m", "narrative_qa"),  # the concise prompt is for chat models (thesis Fig. A.13)
    }  # fmt: skip
    gemma_qa = next(j for j in jobs if j.system_name == "gemma3-270m")
    assert gemma_qa.style == "completion" and gemma_qa.request.messages[-1].content.endswith("Answer:")  # Fig. A.14
    chat_qa = next(j for j in jobs if j.system_name == "smollm2-135m-concise")
    assert chat_qa.style == "chat" and "very short" in chat_qa.request.messages[-1].content


def test_shipped_systems_configs_load_and_cover_the_thesis_tables() -> None:
    thesis = load_generate_config(SYSTEMS / "thesis.yaml")
    names = {s.name for s in thesis.systems}
    assert {"gpt-4o", "claude-3.5-sonnet", "nous-hermes2-mixtral", "gemma2-2b", "qwen2.5-0.5b", "gpt-neo-125m",
            "dialogpt-small", "vicuna-7b", "tulu3-8b", "dolphin-llama3-8b", "solar-10.7b"} <= names  # fmt: skip
    neo = next(s for s in thesis.systems if s.name == "gpt-neo-125m")
    assert neo.style == "completion"
    tiny = load_generate_config(SYSTEMS / "tiny_local.yaml")
    assert [s.style for s in tiny.systems] == ["chat", "completion"]


# ---------------------------------------------------------------------------------------
# Config mistakes: one line naming the file and the field, before any model call


def _systems_yaml(tmp_path: Path, **system: Any) -> Path:
    entry = {"name": "m", "backend": {"kind": "openai", "model": "m", "endpoints": ["http://127.0.0.1:9/v1"]}}
    path = tmp_path / "systems.yaml"
    path.write_text(yaml.safe_dump({"name": "t", "systems": [{**entry, **system}]}))
    return path


def _plan(tmp_path: Path, systems: Path, shared_data: Path, task: str = "summeval") -> None:
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": [
        {"name": "s", "format": "summeval", "path": "$DATA/meta_eval/summeval/summeval.jsonl", "task": "summeval",
         "limit_inputs": 1} if task == "summeval" else
        {"name": "s", "format": "csv", "path": "$DATA/meta_eval/wiki_da/simplicity_DA.csv", "task": "wiki_da",
         "limit_inputs": 1, "fields": {"input_id": "sent_id", "inputs": {"Source text": "orig_sent"}}}
    ]}))  # fmt: skip
    plan_jobs(
        load_generate_config(systems),
        systems,
        load_sources(sources),
        sources,
        load_catalog(),
        shared_data,
        GenerateSummary(tmp_path),
    )


@pytest.mark.parametrize(
    ("system", "message"),
    [
        ({"sampling": {"temprature": 0.3}}, "systems[0].sampling.temprature: unknown key"),
        ({"sampling": {"max_tokens": 0}}, "systems[0].sampling.max_tokens: Input should be greater than or equal to 1"),
        ({"prompt_style": "plain"}, "systems[0].prompt_style: Input should be 'auto', 'chat' or 'completion'"),
        ({"postprocess": {"preamble_patterns": ["(unclosed"]}}, "not a valid regular expression: '(unclosed'"),
        ({"backend": {"kind": "openai", "model": "m", "api": "completions"}, "system_message": "Be brief."},
         "system_message is for chat-style systems only"),
    ],
    ids=["typo", "max-tokens", "style", "regex", "system-message"],
)  # fmt: skip
def test_bad_systems_config_is_one_error_naming_the_field(tmp_path: Path, system: dict, message: str) -> None:
    with pytest.raises(ConfigError) as error:
        load_generate_config(_systems_yaml(tmp_path, **system))
    assert "systems.yaml" in str(error.value) and message in str(error.value)
    assert "\n" not in str(error.value)


def test_repeated_system_names_and_unknown_endpoint_names(tmp_path: Path) -> None:
    path = _systems_yaml(tmp_path)
    data = yaml.safe_load(path.read_text())
    data["systems"] *= 2
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="system names repeat: m"):
        load_generate_config(path)
    with pytest.raises(InputError, match="endpoint override for unknown system 'x'; systems: m"):
        load_generate_config(_systems_yaml(tmp_path), {"x": ["http://127.0.0.1:1/v1"]})


def test_unknown_template_for_a_task(tmp_path: Path, shared_data: Path) -> None:
    path = _systems_yaml(tmp_path, templates={"summeval": ["news_summry"]})
    with pytest.raises(ConfigError, match=r"systems\[0\]\.templates\.summeval: unknown template 'news_summry'"):
        _plan(tmp_path, path, shared_data)


def test_template_with_a_placeholder_the_task_lacks(tmp_path: Path, shared_data: Path) -> None:
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump({"family": "summarization", "templates": {
        "news_summary": {"tasks": ["summeval"], "chat": "Summarize:\n{{ articel }}"}}}))  # fmt: skip
    path = _systems_yaml(tmp_path)
    data = yaml.safe_load(path.read_text()) | {"template_files": ["mine.yaml"]}
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as error:
        _plan(tmp_path, path, shared_data)
    assert str(error.value).endswith(
        "mine.yaml: templates.news_summary: uses {{ articel }} but task 'summeval' has inputs: article"
    )


def test_template_syntax_error_and_task_without_template(tmp_path: Path, shared_data: Path) -> None:
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({"family": "x", "templates": {
        "news_summary": {"tasks": ["summeval"], "chat": "Summarize {{ article }"}}}))  # fmt: skip
    path = _systems_yaml(tmp_path)
    path.write_text(yaml.safe_dump(yaml.safe_load(path.read_text()) | {"template_files": ["broken.yaml"]}))
    with pytest.raises(ConfigError, match=r"broken.yaml: templates.news_summary: line 1: unexpected '}'"):
        _plan(tmp_path, path, shared_data)
    # a template of the same name replaces the built-in one, which leaves wiki_da without any
    (tmp_path / "broken.yaml").write_text(yaml.safe_dump({"family": "x", "templates": {
        "simplify": {"tasks": [], "chat": "Simplify: {{ source_text }}"}}}))  # fmt: skip
    with pytest.raises(ConfigError, match=r"systems\[0\]: no template for task 'wiki_da'"):
        _plan(tmp_path, path, shared_data, task="wiki_da")


def test_cli_config_error_exits_2_with_one_line_and_writes_nothing(tmp_path: Path) -> None:
    systems = _systems_yaml(tmp_path, sampling={"temprature": 0.3})
    out = tmp_path / "out"
    result = subprocess.run(
        [str(Path(sys.executable).with_name("spanjudge")), "generate", "--systems", str(systems),
         "--sources", str(REPO / "configs" / "generate" / "sources_tiny.yaml"), "--out", str(out)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "systems[0].sampling.temprature: unknown key" in lines[0]
    assert not out.exists()


# ---------------------------------------------------------------------------------------
# The run against scripted servers


def _prompt(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"] if "messages" in body else body["prompt"]


def _stand_in_run(tmp_path: Path, urls: dict[str, str], shared_data: Path) -> GenerateSummary:
    systems = {
        "name": "stand-ins",
        "sampling": {"max_tokens": 16},
        "systems": [
            {"name": "chatty", "backend": {"kind": "openai", "model": "chatty", "endpoints": [urls["chatty"]],
                                           "retries": 1, "backoff_s": 0.01, "timeout_s": 5}},
            {"name": "base", "backend": {"kind": "openai", "model": "base", "api": "completions",
                                         "endpoints": [urls["base"]], "retries": 1, "backoff_s": 0.01,
                                         "timeout_s": 5}},
        ],
    }  # fmt: skip
    sources = {
        "sources": [
            {"name": "summeval", "format": "summeval", "path": "$DATA/meta_eval/summeval/summeval.jsonl",
             "task": "summeval", "limit_inputs": 3},
        ]
    }  # fmt: skip
    systems_path, sources_path = tmp_path / "systems.yaml", tmp_path / "sources.yaml"
    systems_path.write_text(yaml.safe_dump(systems))
    sources_path.write_text(yaml.safe_dump(sources))
    run = SourceRun(load_sources(sources_path), sources_path, tmp_path / "out", load_catalog(), shared_data)
    return run_generate(load_generate_config(systems_path), systems_path, run)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_stand_in_run_strips_rejects_and_resumes(serve, tmp_path: Path, shared_data: Path) -> None:
    def chatty(body: dict[str, Any]) -> Reply:
        first_word = _prompt(body).split("'''\n", 1)[1].split()[0]
        if first_word.startswith("Paul"):  # the first article: the model says nothing useful
            return Reply(text="Sure! Here is a short summary of the article:")
        return Reply(text=f"Sure! Here is a short summary of the article:\n\n{first_word} is in the news.")

    chat, chat_url = serve(chatty)
    broken, broken_url = serve([Reply(status=500)])
    first = _stand_in_run(tmp_path, {"chatty": chat_url, "base": broken_url}, shared_data)
    assert (first.jobs, first.outputs, first.rejected, first.incomplete) == (6, 2, 1, 3)
    assert first.rejected_reasons == {"empty after post-processing": 1}
    assert broken.hits == 3 * 2  # every call tried and retried once, then left incomplete
    out = tmp_path / "out"
    rows = _lines(out / "outputs" / "summeval.jsonl")
    assert [r["system"] for r in rows] == ["chatty", "chatty"]
    for row in rows:
        assert row["output"].endswith(" is in the news.") and row["raw_output"].startswith("Sure! Here is")
        provenance = row["provenance"]
        assert provenance["model_id"] == "openai:chatty" and provenance["template"] == "news_summary"
        assert provenance["prompt_style"] == "chat" and len(provenance["prompt_hash"]) == 16
        assert provenance["params"]["max_tokens"] == 16 and provenance["postprocess"]
        assert set(row["inputs"]) == {"Article"}
    (rejected,) = _lines(out / "rejected.jsonl")
    assert rejected["reject_reason"] == "empty after post-processing" and rejected["raw_output"]
    assert all(r["system"] == "base" and "server" in r["reason"] for r in _lines(out / "incomplete.jsonl"))

    # the base model's server is back: only its calls are made, with completion-style prompts
    base, base_url = serve([Reply(text="\nThe article is about football.\n\nArticle: next one")])
    again = _stand_in_run(tmp_path, {"chatty": chat_url, "base": base_url}, shared_data)
    assert (again.outputs, again.rejected, again.incomplete) == (5, 1, 0)
    assert again.model_calls == {"chatty": 0, "base": 3} and chat.hits == 3
    assert all(p.endswith("Summary of the article in a few sentences:\n\n") for p in map(_prompt, base.bodies))
    rows = _lines(out / "outputs" / "summeval.jsonl")
    assert len({r["id"] for r in rows}) == len(rows) == 5
    assert {r["output"] for r in rows if r["system"] == "base"} == {"The article is about football."}
    generated = load_sources(out / "sources.yaml")
    assert generated.sources[0].format == "jsonl" and generated.sources[0].path == "outputs/summeval.jsonl"


def test_variant_names_that_collide_with_another_system(tmp_path: Path) -> None:
    data = tmp_path / "prompts.jsonl"
    data.write_text(json.dumps({"prompt": "A dragon opens a bakery."}) + "\n")
    sources = tmp_path / "sources.yaml"
    sources.write_text(yaml.safe_dump({"sources": [{"name": "wp", "format": "jsonl", "path": str(data),
        "task": "story_generation", "fields": {"inputs": {"Writing prompt": "prompt"}}}]}))  # fmt: skip
    path = _systems_yaml(tmp_path)
    config = yaml.safe_load(path.read_text())
    one_story = {"story_generation": ["story_short"]}  # a single template: no variant suffix
    config["systems"] = [config["systems"][0], dict(config["systems"][0], name="m-long", templates=one_story)]
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(ConfigError, match=r"systems\[1\]: output system name 'm-long' for task 'story_generation'"):
        config_, sources_ = load_generate_config(path), load_sources(sources)
        plan_jobs(config_, path, sources_, sources, load_catalog(), None, GenerateSummary(tmp_path))
