"""The eight human-judgment sets in one shape, read from ../shared/data with the annotation
stage's source readers; QAGS scores rebuilt from the raw worker votes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from spanjudge.core.errors import ConfigError, InputError
from spanjudge.eval.judging.datasets import load_suite_dataset, open_suite
from spanjudge.eval.judging.qags import summary_score
from spanjudge.eval.judging.suite import load_suite

REPO = Path(__file__).resolve().parents[2]
SUITE = REPO / "configs" / "eval" / "thesis.yaml"

SIZES = {
    # name: (items, inputs, systems)
    "qags_cnndm": (235, 235, 1),
    "qags_xsum": (239, 239, 1),
    "summeval": (1600, 100, 16),
    "topical_chat": (360, 60, 6),
    "sfres": (1181, 580, 1),
    "sfhot": (875, 398, 1),
    "hanna": (1056, 96, 11),
    "wiki_da": (600, 302, 6),
}


@pytest.fixture(scope="module")
def suite_data(shared_data: Path):
    return open_suite(load_suite(SUITE), SUITE, shared_data)


@pytest.mark.parametrize("name", list(SIZES))
def test_every_set_loads_whole_with_human_scores(suite_data, name: str) -> None:
    dataset = load_suite_dataset(suite_data, name)
    items = dataset.items
    shape = (len(items), len({i.input_id for i in items}), len({i.system for i in items}))
    assert shape == SIZES[name]
    assert len({i.id for i in items}) == len(items)
    aspects = [a.name for a in dataset.spec.aspects]
    assert all(set(i.human) == set(aspects) for i in items), "every item has every human score"
    assert all(i.output.strip() and set(i.inputs) == set(dataset.task.input_headers) for i in items)


def test_human_scores_match_the_source_files(suite_data, shared_data: Path) -> None:
    summeval = load_suite_dataset(suite_data, "summeval")
    first = summeval.items[0]  # MANIFEST: dm-test-8764fb.../M11: coh 1.333, con 1.0, flu 3.0, rel 1.667
    assert first.system == "M11"
    assert first.human == pytest.approx({"coherence": 4 / 3, "consistency": 1.0, "fluency": 3.0, "relevance": 5 / 3})
    topical = load_suite_dataset(suite_data, "topical_chat")
    raw = json.loads((shared_data / "meta_eval/topical_chat/unieval_topical_chat.json").read_text())
    # USR "Interesting" is the engagingness field; the judge is asked about interestingness
    assert [i.human["interestingness"] for i in topical.items] == pytest.approx(
        [r["scores"]["engagingness"] for r in raw], abs=1e-6
    )
    wiki = load_suite_dataset(suite_data, "wiki_da")
    assert wiki.items[0].human == pytest.approx(
        {"fluency": 77.4, "meaning preservation": 77.33333333, "simplicity": 71.33333333}
    )


def _squash(text: str) -> str:
    return "".join(text.split()).lower()


@pytest.mark.parametrize("subset", ["cnndm", "xsum"])
def test_qags_majority_vote_matches_the_aggregated_copies(suite_data, shared_data: Path, subset: str) -> None:
    items = load_suite_dataset(suite_data, f"qags_{subset}").items
    ours = [i.human["factual consistency"] for i in items]
    # UniEval's copy is in the raw file's order
    unieval = json.loads((shared_data / f"meta_eval/qags/unieval_qags_{subset}.json").read_text())
    assert ours == pytest.approx([r["scores"]["consistency"] for r in unieval], abs=1e-9)
    # OpeNLGauge's copy is in another order: pair by summary text
    openlgauge = {
        _squash(r["outputs"]["Summary"]): r["score"]["factual consistency"]
        for r in json.loads((shared_data / "meta_eval/qags/openlgauge_qags.json").read_text())
        if r["id"].startswith(f"{subset}-")
    }
    assert len(openlgauge) == len(items)
    assert ours == pytest.approx([openlgauge[_squash(i.output)] for i in items], abs=1e-9)
    assert 0.0 < sum(ours) / len(ours) < 1.0 and len(set(ours)) >= 2


def test_qags_vote_by_hand() -> None:
    yes, no = {"response": "yes"}, {"response": "no"}
    sentences = [{"responses": [yes, yes, no]}, {"responses": [no, no, yes]}, {"responses": [yes, yes, yes]}]
    assert summary_score(sentences, "here") == pytest.approx(2 / 3)
    with pytest.raises(InputError, match="tied vote"):
        summary_score([{"responses": [yes, no]}], "here")
    with pytest.raises(InputError, match="yes"):
        summary_score([{"responses": [yes, {"response": "maybe"}, no]}], "here")


def test_references_come_from_the_configured_place(suite_data) -> None:
    hanna = load_suite_dataset(suite_data, "hanna")
    human_story = {i.input_id: i.output for i in hanna.items if i.system == "Human"}
    assert all(i.references == (human_story[i.input_id],) for i in hanna.items)
    sfres = load_suite_dataset(suite_data, "sfres")
    assert sfres.items[0].references == ("Please confirm that you do not care what area the restaurant is located .",)
    assert all(i.references for i in load_suite_dataset(suite_data, "summeval").items)
    # QAGS: the article is the reference (G-Eval's ROUGE rows); Wiki-DA: the source sentence
    assert all(i.references == (i.inputs["Article"],) for i in load_suite_dataset(suite_data, "qags_xsum").items)
    assert all(i.references == (i.inputs["Source text"],) for i in load_suite_dataset(suite_data, "wiki_da").items)
    assert all(len(i.references) == 11 for i in load_suite_dataset(suite_data, "summeval").items)


def test_max_items_samples_whole_inputs_with_a_seed(suite_data) -> None:
    # SummEval is correlated per input (article, 16 systems): the first 40 rows of the file would
    # be 2.5 articles, one of them cut. A sample keeps every system of each sampled input.
    whole = load_suite_dataset(suite_data, "summeval")
    systems = {}
    for item in whole.items:
        systems.setdefault(item.input_id, set()).add(item.system)
    sample = load_suite_dataset(suite_data, "summeval", max_items=40)
    inputs = {i.input_id for i in sample.items}
    assert len(sample.items) == 32 and len(inputs) == 2  # two whole articles fit in 40 items
    for input_id in inputs:
        assert {i.system for i in sample.items if i.input_id == input_id} == systems[input_id]
    # seeded: the same sample again, another seed another one; not simply the file's head
    assert [i.id for i in load_suite_dataset(suite_data, "summeval", max_items=40).items] == [
        i.id for i in sample.items
    ]
    assert inputs != {i.input_id for i in load_suite_dataset(suite_data, "summeval", max_items=40, seed=1).items}
    assert inputs != {i.input_id for i in whole.items[:32]}
    # fewer items than one input: still one whole input, never a cut one
    assert len(load_suite_dataset(suite_data, "summeval", max_items=5).items) == 16
    # one system per input (QAGS): N items are N inputs
    assert len(load_suite_dataset(suite_data, "qags_xsum", max_items=7).items) == 7


def test_a_set_not_in_the_sources_is_a_config_error(tmp_path: Path, shared_data: Path) -> None:
    text = SUITE.read_text().replace("- name: hanna\n", "- name: hannah\n")
    bad = tmp_path / "suite.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=r"datasets\[6\]\.name.*'hannah' is not a source"):
        open_suite(load_suite(bad), bad, shared_data)
