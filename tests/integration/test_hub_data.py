"""Hub dataset ids (`owner/name[:split]`) for `train` and `score`: read from the Hub's cache when
offline, one clear line when not cached, and a local path always wins.

No model hub is reachable. The cached dataset is made the way `datasets.load_dataset` caches a
Hub dataset after one online load: the dataset repo `spanjudge publish --dataset-dir` stages
(the real card and Arrow files) is prepared by the builder its card's `configs` select, under
the cache name of `owner/name`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from support.publish_folders import imported_folder

from spanjudge.app.cli import main
from spanjudge.core import hub_data
from spanjudge.core.catalog import load_catalog
from spanjudge.inference.requests import FieldMapping, read_requests
from spanjudge.publish.dataset import read_dataset_folder
from spanjudge.publish.dataset_card import DatasetCardOptions
from spanjudge.publish.dataset_staging import stage_dataset
from spanjudge.training.config import load_train_config, train_file, validation_file

REPO_ID = "someone/tiny-spans"
SMOKE = Path(__file__).resolve().parents[2] / "configs" / "train" / "smollm2_cpu_smoke.yaml"


def cache_as_downloaded(staged: Path, repo_id: str, cache: Path) -> None:
    """What one online `load_dataset(repo_id)` leaves in the cache: the builder the card selects,
    prepared under `<cache>/<owner>___<name>/default/...` (offline loads look there)."""
    import datasets

    builder = datasets.load_dataset_builder(str(staged), cache_dir=str(cache))
    builder.repo_id, builder.dataset_name = repo_id, repo_id.split("/")[1]
    builder._cache_dir = builder._build_cache_dir()  # the Hub's cache name instead of the folder's
    builder.download_and_prepare()


@pytest.fixture(scope="module")
def published(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hub")
    folder = imported_folder(root)
    staged = root / "staged"
    stage_dataset(read_dataset_folder(folder), staged, DatasetCardOptions(repo_id=REPO_ID))
    cache_as_downloaded(staged, REPO_ID, root / "cache")
    return {"folder": folder, "staged": staged, "cache": root / "cache"}


@pytest.fixture
def cache(published: dict[str, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """datasets' cache holding the published dataset (copied: each test writes records beside it)."""
    import shutil

    import datasets

    copy = tmp_path / "cache"
    shutil.copytree(published["cache"], copy)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", copy)
    hub_data._records_on_disk.cache_clear()
    return copy


@pytest.fixture
def empty_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "empty")
    hub_data._records_on_disk.cache_clear()
    return tmp_path / "empty"


def write_config(path: Path, train: str, out: Path) -> Path:
    config = yaml.safe_load(SMOKE.read_text())
    config["data"] = {**config.get("data", {}), "train": train}
    config["training"] = {**config.get("training", {}), "output_dir": str(out)}
    path.write_text(yaml.safe_dump(config))
    return path


def records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def without_none(record: dict) -> dict:
    """A record without absent fields: Arrow gives every row every column, None where absent."""
    return {key: value for key, value in record.items() if value is not None}


def test_ids_and_paths() -> None:
    assert hub_data.parse_dataset_id("owner/name") == hub_data.HubDatasetId("owner/name")
    assert hub_data.parse_dataset_id("owner/name.v2:test") == hub_data.HubDatasetId("owner/name.v2", "test")
    for path in ("data/items.jsonl", "runs/train.json", "/abs/owner/name", "owner/name/more", "../x", "name"):
        assert hub_data.parse_dataset_id(path) is None, path


def test_train_reads_a_cached_hub_dataset_like_its_local_folder(
    published: dict[str, Path], cache: Path, tmp_path: Path
) -> None:
    staged = published["staged"]
    config = load_train_config(write_config(tmp_path / "c.yaml", REPO_ID, tmp_path / "run"))
    assert str(config.data.train) == REPO_ID  # the run's resolved config keeps the id
    train, validation = train_file(config), validation_file(config)
    assert train.name == "train.jsonl" and train.is_relative_to(cache)
    assert validation is not None and validation == train.with_name("validation.jsonl")
    for got, want in ((train, staged / "train.jsonl"), (validation, staged / "validation.jsonl")):
        assert [without_none(r) for r in records(got)] == [without_none(r) for r in records(want)]
    # one split by name: that split alone, with no validation file found beside it
    config = load_train_config(write_config(tmp_path / "v.yaml", f"{REPO_ID}:validation", tmp_path / "run"))
    assert records(train_file(config))[0]["id"] == records(staged / "validation.jsonl")[0]["id"]
    assert validation_file(config) is None


def test_training_tokenizes_hub_records_as_it_does_local_ones(
    published: dict[str, Path], cache: Path, tmp_path: Path
) -> None:
    from spanjudge.inference.hf_models import convert_gguf, load_tokenizer
    from spanjudge.inference.shipped_models import smollm2_gguf
    from spanjudge.training.data import tokenize_split

    tokenizer = load_tokenizer(str(convert_gguf(smollm2_gguf())))
    config = load_train_config(write_config(tmp_path / "c.yaml", REPO_ID, tmp_path / "run"))
    catalog = load_catalog()
    hub = tokenize_split(train_file(config), tokenizer, catalog, max_length=4096)
    local = tokenize_split(published["staged"] / "train.jsonl", tokenizer, catalog, max_length=4096)
    assert hub.input_ids == local.input_ids and hub.labels == local.labels


def test_score_reads_a_cached_hub_dataset(published: dict[str, Path], cache: Path) -> None:
    catalog = load_catalog()
    mapping = FieldMapping()
    for source, split in ((REPO_ID, "validation"), (f"{REPO_ID}:validation", "test")):
        hub = read_requests(source, catalog, None, None, None, mapping, split=split)
        local = read_requests(str(published["staged"] / "validation.jsonl"), catalog, None, None, None, mapping)
        assert [(r.id, r.task.id, r.aspect.name, r.inputs, r.output, r.extra_task_info) for r in hub] == [
            (r.id, r.task.id, r.aspect.name, r.inputs, r.output, r.extra_task_info) for r in local
        ]


def test_a_local_path_wins_over_an_id(
    published: dict[str, Path], empty_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = tmp_path / "someone" / "tiny-spans"
    local.mkdir(parents=True)
    (local / "train.jsonl").write_text((published["staged"] / "train.jsonl").read_text())
    monkeypatch.chdir(tmp_path)
    config = load_train_config(write_config(tmp_path / "c.yaml", REPO_ID, tmp_path / "run"))
    assert train_file(config) == Path(REPO_ID) / "train.jsonl"  # no Hub load: the cache is empty
    assert not empty_cache.exists()


def test_offline_and_not_cached_is_one_line(
    empty_cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = write_config(tmp_path / "c.yaml", "nobody/nothing", tmp_path / "run")
    commands = {
        "data.train": ["train", "--config", str(config)],
        "--data": ["score", "--model", str(tmp_path / "judge"), "--data", "nobody/nothing:test",
                   "--out", str(tmp_path / "scores.jsonl")],
    }  # fmt: skip
    for option, command in commands.items():
        assert main(command) == 2
        err = capsys.readouterr().err
        assert f"{option} nobody/nothing: no such local file or folder" in err, err
        assert "not in the cache" in err and "HF_HUB_OFFLINE=1" in err
        assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "run").exists() and not (tmp_path / "scores.jsonl").exists()


def test_a_missing_split_names_the_ones_there(cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    command = ["score", "--model", str(tmp_path / "judge"), "--data", REPO_ID, "--out", str(tmp_path / "s.jsonl")]
    assert main(command) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err == (
        f"error: --data {REPO_ID}: no split 'test' (it has: train, validation); name one as {REPO_ID}:SPLIT "
        "or with --split"
    )
