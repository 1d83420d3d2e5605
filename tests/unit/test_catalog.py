"""The task/aspect catalog: the built-in content and the errors a bad file gets."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from spanjudge.core.catalog import Aspect, load_catalog, validate_inputs
from spanjudge.core.errors import ConfigError, InputError

MINIMAL = {
    "category": "custom",
    "title": "Custom",
    "aspects": {
        "clarity": {"definition": "How clear it is.", "lowest": "is unclear", "highest": "is clear"},
        "brevity": {
            "definition": "How short it is.",
            "lowest": "rambles",
            "highest": "is short",
            "do_not_consider": ["clarity"],
        },
    },
    "tasks": {
        "headline_writing": {
            "title": "headline writing",
            "description": "The model was asked to write a headline.",
            "inputs": [{"header": "Article"}],
            "output": "Headline",
            "aspects": {"clarity": {}, "brevity": {"definition": "Short for a headline."}},
        }
    },
}


def test_thesis_catalog_has_13_training_subtasks_in_5_categories() -> None:
    catalog = load_catalog()
    training = catalog.training_tasks()
    assert len(training) == 13
    assert {t.category for t in training} == {
        "summarization",
        "data_to_text",
        "dialogue",
        "story",
        "question_answering",
    }
    for task in catalog.tasks.values():
        assert task.aspects, task.id
        for aspect in task.aspects.values():
            assert aspect.definition and aspect.lowest and aspect.highest
            assert aspect.name not in aspect.do_not_consider


@pytest.mark.parametrize(
    ("task_id", "aspects"),
    [
        ("summeval", {"coherence", "consistency", "fluency", "relevance"}),
        ("qags_cnndm", {"factual consistency"}),
        ("qags_xsum", {"factual consistency"}),
        ("topical_chat", {"coherence", "engagingness", "groundedness", "naturalness", "understandability"}),
        ("hanna", {"relevance", "coherence", "empathy", "surprise", "engagement", "complexity"}),
        ("sfres", {"informativeness", "naturalness"}),
        ("sfhot", {"informativeness", "naturalness"}),
        ("wiki_da", {"fluency", "meaning preservation", "simplicity"}),
    ],
)
def test_meta_evaluation_tasks_and_aspects(task_id: str, aspects: set[str]) -> None:
    task = load_catalog().task(task_id)
    assert task.role == "meta_eval"
    assert aspects <= set(task.aspects)


def test_unseen_task_and_aspect_are_marked() -> None:
    catalog = load_catalog()
    assert not catalog.task("wiki_da").seen_in_training
    groundedness = catalog.task("topical_chat").aspect("groundedness")
    assert "fact" in groundedness.definition
    assert all("groundedness" not in t.aspects for t in catalog.training_tasks())


def test_task_level_override_changes_only_that_task() -> None:
    catalog = load_catalog()
    logical = catalog.task("logical_nlg").aspect("correctness").definition
    generic = catalog.task("attribute_value_to_text").aspect("correctness").definition
    assert "logically" in logical and logical != generic


def _write(tmp_path: Path, data: object, name: str = "custom.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data) if not isinstance(data, str) else data)
    return path


def test_user_catalog_adds_a_task_without_code(tmp_path: Path) -> None:
    catalog = load_catalog([_write(tmp_path, MINIMAL)])
    task = catalog.task("headline_writing")
    assert task.aspect("brevity").definition == "Short for a headline."
    assert task.aspect("brevity").do_not_consider == ("clarity",)
    assert "news_summarization" in catalog.tasks  # the built-in catalog is still there


def _broken(change: dict) -> dict:
    data = yaml.safe_load(yaml.safe_dump(MINIMAL))
    for dotted, value in change.items():
        *parents, last = dotted.split(".")
        node = data
        for key in parents:
            node = node[key]
        if value is None:
            del node[last]
        else:
            node[last] = value
    return data


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"tasks.headline_writing.inputz": []}, "tasks.headline_writing.inputz", "unknown key"),
        ({"tasks.headline_writing.output": None}, "tasks.headline_writing.output", "required key is missing"),
        ({"aspects.clarity.definition": ""}, "aspects.clarity.definition", "at least 1 character"),
        (
            {"tasks.headline_writing.role": "train"},
            "tasks.headline_writing.role",
            "'training' or 'meta_eval'",
        ),
        (
            {"tasks.headline_writing.aspects.clarty": {}},
            "tasks.headline_writing.aspects.clarty",
            "unknown aspect 'clarty'",
        ),
        (
            {"aspects.brevity.do_not_consider": ["brevity"]},
            "aspects.brevity.do_not_consider[0]",
            "ignore itself",
        ),
        (
            {"aspects.brevity.do_not_consider": ["speed"]},
            "aspects.brevity.do_not_consider[0]",
            "unknown aspect",
        ),
        ({"tasks.headline_writing.inputs": "Article"}, "tasks.headline_writing.inputs", "tuple"),
        ({"category": "Custom Tasks"}, "category", "pattern"),
    ],
)
def test_bad_catalog_names_file_and_field(tmp_path: Path, change: dict, field: str, message: str) -> None:
    path = _write(tmp_path, _broken(change))
    with pytest.raises(ConfigError) as caught:
        load_catalog([path], builtin=False)
    error = caught.value
    assert error.path == path and error.field == field
    assert message in error.message
    assert "\n" not in str(error) and str(path.name) in str(error)


def test_invalid_yaml_reports_the_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "category: x\ntasks: [unclosed\n")
    with pytest.raises(ConfigError, match=r"line \d+: invalid YAML"):
        load_catalog([path], builtin=False)


def test_duplicate_task_id_names_both_files(tmp_path: Path) -> None:
    first = _write(tmp_path, MINIMAL, "a.yaml")
    _write(tmp_path, MINIMAL, "b.yaml")
    with pytest.raises(ConfigError, match=f"already defined in {first}"):
        load_catalog([tmp_path], builtin=False)


def test_unknown_task_and_aspect_suggest_close_names() -> None:
    catalog = load_catalog()
    with pytest.raises(InputError, match="did you mean 'summeval'"):
        catalog.task("sumeval")
    with pytest.raises(InputError, match="did you mean 'fluency'"):
        catalog.task("summeval").aspect("fluncy")


def test_inputs_are_checked_against_the_task_headers() -> None:
    task = load_catalog().task("knowledge_grounded_dialogue")
    assert list(validate_inputs(task, {"Knowledge": "k", "Dialogue history": "d"})) == [
        "Dialogue history",
        "Knowledge",
    ]
    with pytest.raises(InputError, match="needs the input 'Knowledge'"):
        validate_inputs(task, {"Dialogue history": "d"})
    with pytest.raises(InputError, match="has no input 'Article'"):
        validate_inputs(task, {"Dialogue history": "d", "Knowledge": "k", "Article": "a"})


def test_custom_aspect_has_usable_label_descriptions() -> None:
    aspect = Aspect.custom("politeness", "How polite the response is.")
    assert "politeness" in aspect.lowest and "politeness" in aspect.highest
