"""data_gen pieces on their own: Algorithm 1, sampling, the split, sources and configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.data_gen.aggregate import aggregate, drop_outliers
from spanjudge.data_gen.config import (
    SourceSpec,
    env_endpoint_overrides,
    load_ensemble,
    load_sources,
    parse_endpoint_options,
    resolve_source_path,
)
from spanjudge.data_gen.records import split_by_input, to_hf_row
from spanjudge.data_gen.selection import sample_requests
from spanjudge.data_gen.sources import SourceItem, read_source

REPO = Path(__file__).resolve().parents[2]
CATALOG = load_catalog()


# --- Algorithm 1 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("ratings", "kept", "score"),
    [
        ([5, 5, 5, 5, 1], (True, True, True, True, False), 100),  # one dissenter among equals
        ([4, 5, 4, 5, 3], (True, True, True, True, False), 90),
        ([4, 4, 4, 3, 3], (True,) * 5, 65),  # a one-label spread is never an outlier
        ([5, 5, 1], (True, True, False), 100),
        ([1, 5], (True, True), 50),  # two ratings: neither is an outlier of the other
        ([3], (True,), 50),
        ([4, 4, 5], (True, True, True), 85),  # mean 4.33 -> 83.3 -> 85
    ],
)
def test_algorithm_1(ratings: list[int], kept: tuple[bool, ...], score: int) -> None:
    result = aggregate(ratings)
    assert result.kept == kept
    assert result.score == score and result.score % 5 == 0


def test_outlier_needs_both_conditions() -> None:
    # 3 vs four 4s: 2 sigma of the others is 0, but the difference is only 1 -> kept
    assert drop_outliers([4, 4, 4, 4, 3]) == (True,) * 5
    # 1 vs 4,4,5,5: 1 is 3.5 away, sigma 0.5 -> dropped
    assert drop_outliers([4, 4, 5, 5, 1]) == (True, True, True, True, False)


# --- sampling and split --------------------------------------------------------------


def _items(inputs: int, systems: int) -> list[SourceItem]:
    return [
        SourceItem("d", f"in{i}", f"sys{s}", "summeval", {"Article": f"a{i}"}, f"o{i}-{s}", f"f:{i}")
        for i in range(inputs)
        for s in range(systems)
    ]


def test_sampling_counts_and_determinism() -> None:
    items = _items(10, 6)
    aspects = ["coherence", "consistency", "fluency", "relevance"]
    first = sample_requests(items, aspects, 4, 3, seed=0)
    assert len(first) == 10 * 4 * 3
    # the draws depend on the seed and the items' identity, not on the file order
    assert {r.id for r in first} == {r.id for r in sample_requests(list(reversed(items)), aspects, 4, 3, seed=0)}
    assert {r.id for r in first} != {r.id for r in sample_requests(items, aspects, 4, 3, seed=1)}
    per_input = {}
    for r in first:
        per_input.setdefault(r.item.input_id, set()).add(r.item.system)
    assert all(len(s) == 4 for s in per_input.values())


def test_sampling_with_fewer_systems_and_aspects_than_asked() -> None:
    requests = sample_requests(_items(3, 2), ["fluency"], 4, 3, seed=0)
    assert len(requests) == 3 * 2 * 1


def _record(input_id: str, n: int) -> list[dict]:
    return [{"dataset": "d", "input_id": input_id, "k": k} for k in range(n)]


def test_split_has_no_shared_input_and_about_five_percent() -> None:
    records = [r for i in range(100) for r in _record(f"in{i}", 3)]
    train, validation = split_by_input(records, 0.05, seed=0)
    assert len(train) + len(validation) == len(records)
    assert {r["input_id"] for r in train}.isdisjoint({r["input_id"] for r in validation})
    assert 15 <= len(validation) <= 18  # >= 5 % of 300, whole inputs of 3
    assert split_by_input(records, 0.05, seed=0) == (train, validation)


def test_split_keeps_training_data_when_inputs_are_few() -> None:
    train, validation = split_by_input(_record("only", 5), 0.05, seed=0)
    assert len(train) == 5 and validation == []
    train, validation = split_by_input(_record("a", 2) + _record("b", 2), 0.05, seed=0)
    assert len(train) == 2 and len(validation) == 2


def test_hf_rows_share_one_schema_across_tasks() -> None:
    row = to_hf_row({"inputs": {"Article": "a"}, "outputs": {"Summary": "s"}, "provenance": {"x": 1}, "id": "1"})
    assert row["inputs"] == [{"header": "Article", "text": "a"}] and json.loads(row["provenance"]) == {"x": 1}


# --- sources --------------------------------------------------------------------------


def _spec(**kwargs: object) -> SourceSpec:
    return SourceSpec.model_validate({"name": "s", "task": "summeval", **kwargs})


def test_every_meta_eval_set_reads(shared_data: Path) -> None:
    path = REPO / "configs" / "sources" / "meta_eval_sets.yaml"
    config = load_sources(path)
    sizes = {}
    for spec in config.sources:
        task = CATALOG.task(spec.task)
        report = read_source(spec, resolve_source_path(spec, path, shared_data), task)
        sizes[spec.name] = len(report.items)
        assert all(set(i.inputs) <= set(task.input_headers) and i.output.strip() for i in report.items)
    assert sizes == {
        "summeval": 1600,
        "qags_cnndm": 235,
        "qags_xsum": 239,
        "topical_chat": 360,
        "hanna": 1056,
        # SFRES/SFHOT carry no system: rows repeating an earlier (input, output) are listed as
        # duplicates (38 and 34), the other outputs of an input become sfres-rnnlg#2, #3 ...
        "sfres": 1143,
        "sfhot": 841,
        "wiki_da": 600,
    }


def test_qags_summary_sentences_are_joined(shared_data: Path) -> None:
    spec = _spec(format="qags_mturk", path="x", task="qags_cnndm", system="bottom-up")
    items = read_source(spec, shared_data / "meta_eval/qags/mturk_cnndm.jsonl", CATALOG.task("qags_cnndm")).items
    first = json.loads((shared_data / "meta_eval/qags/mturk_cnndm.jsonl").read_text().splitlines()[0])
    assert items[0].output == " ".join(s["sentence"].strip() for s in first["summary_sentences"])


def test_malformed_line_names_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    good = {"doc_id": "1", "system_id": "A", "source": "article", "system_output": "summary"}
    path.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(InputError, match=r"data.jsonl:2: not valid JSON"):
        read_source(_spec(format="summeval", path=str(path)), path, CATALOG.task("summeval"))


def test_missing_field_names_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps({"doc_id": "1", "system_id": "A", "source": "article"}) + "\n")
    with pytest.raises(InputError, match=r"data.jsonl:1: missing field 'system_output'"):
        read_source(_spec(format="summeval", path=str(path)), path, CATALOG.task("summeval"))


def test_oversized_and_empty_outputs_are_reported_not_silently_dropped(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("id,article,summary\n1,short article,fine\n2,short article,\n3," + "x" * 50 + ",ok\n")
    spec = _spec(
        format="csv",
        path=str(path),
        max_chars=40,
        fields={"input_id": "id", "output": "summary", "inputs": {"Article": "article"}},
    )
    report = read_source(spec, path, CATALOG.task("summeval"))
    assert [i.input_id for i in report.items] == ["1"]
    assert len(report.empty_outputs) == 1 and "data.csv:3" in report.empty_outputs[0]
    assert len(report.oversized) == 1 and "Article has 50 characters" in report.oversized[0]


def test_source_without_a_required_input_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "data.csv"
    path.write_text("id,summary\n1,fine\n")
    spec = _spec(format="csv", path=str(path), fields={"input_id": "id", "output": "summary"})
    with pytest.raises(InputError, match="needs input 'Article'"):
        read_source(spec, path, CATALOG.task("summeval"))


# --- configs --------------------------------------------------------------------------


def test_ensemble_configs_load_and_endpoints_can_be_overridden(tmp_path: Path) -> None:
    thesis = load_ensemble(REPO / "configs" / "ensemble" / "thesis.yaml")
    assert len(thesis.annotators) == 5 and thesis.supervisor.name == "llama3.3"
    assert {a.backend.kind for a in thesis.annotators} == {"ollama"}
    tiny = load_ensemble(REPO / "configs" / "ensemble" / "tiny_local.yaml", {"smollm2": ["http://127.0.0.1:9/v1"]})
    assert tiny.annotators[0].backend.endpoints == ("http://127.0.0.1:9/v1",)
    assert tiny.supervisor.backend.endpoints == ("http://127.0.0.1:8011/v1",)  # another role, untouched


def test_endpoint_options_and_environment() -> None:
    assert parse_endpoint_options(["a=http://x/v1,http://y/v1", "b=http://z/v1"]) == {
        "a": ["http://x/v1", "http://y/v1"],
        "b": ["http://z/v1"],
    }
    with pytest.raises(InputError, match="NAME=URL"):
        parse_endpoint_options(["nourl"])
    env = {"SPANJUDGE_ENDPOINT_QWEN2_5": "http://q:11434", "SPANJUDGE_ENDPOINT_MISTRAL_LARGE": "http://m:1,http://n:1"}
    assert env_endpoint_overrides(["qwen2.5", "mistral-large", "gemma2"], env) == {
        "qwen2.5": ["http://q:11434"],
        "mistral-large": ["http://m:1", "http://n:1"],
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"annotators": []}, "annotators"),
        ({"sampling": {"temperature": -1}}, "sampling.temperature"),
        ({"supervisor": {"name": "s", "backend": {"kind": "ollam", "model": "x"}}}, "supervisor.backend.kind"),
        ({"extra": 1}, "extra"),
    ],
)
def test_bad_ensemble_names_the_field(tmp_path: Path, change: dict, field: str) -> None:
    data = yaml.safe_load((REPO / "configs" / "ensemble" / "tiny_local.yaml").read_text()) | change
    path = tmp_path / "ensemble.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError) as caught:
        load_ensemble(path)
    assert caught.value.field == field and caught.value.path == path


def test_hf_dataset_on_disk_is_a_source(tmp_path: Path) -> None:
    import datasets

    rows = [{"doc": "d1", "sys": "A", "article": "The match ended 2-2.", "summary": "A draw."}]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    fields = {"input_id": "doc", "system": "sys", "output": "summary", "inputs": {"Article": "article"}}
    spec = _spec(format="hf", path=str(tmp_path / "ds"), split="test", fields=fields)
    items = read_source(spec, tmp_path / "ds", CATALOG.task("summeval")).items
    assert [(i.input_id, i.system, i.output) for i in items] == [("d1", "A", "A draw.")]
    with pytest.raises(InputError, match="has no split 'train'"):
        read_source(spec.model_copy(update={"split": "train"}), tmp_path / "ds", CATALOG.task("summeval"))


def test_hub_dataset_offline_is_a_clear_error(tmp_path: Path) -> None:
    spec = _spec(format="hf", path="someone/not-here", fields={"output": "summary", "inputs": {"Article": "a"}})
    with pytest.raises(InputError, match="cannot load dataset 'someone/not-here'"):
        read_source(spec, tmp_path / "someone/not-here", CATALOG.task("summeval"))
