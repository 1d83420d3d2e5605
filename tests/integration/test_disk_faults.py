"""A read-only or full disk is one line, and the run resumes once there is room.

A full disk and a read-only folder are real tmpfs mounts, skipped with the reason where this machine cannot
mount one."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from support.faults import GOOD, Serve, items, one_line, served_score, tiny_adapter
from support.standin import Reply

from spanjudge.app.cli import main as cli_main
from spanjudge.core.errors import SpanjudgeError


@pytest.fixture
def mount_tmpfs(tmp_path: Path) -> Iterator[Callable[..., Path]]:
    """mount_tmpfs(size, read_only) -> a fresh tmpfs folder (unmounted at the end); skips with the
    reason where this machine cannot mount one (not root, no mount namespace)."""
    mounted: list[Path] = []

    def mount(size: str = "1m", read_only: bool = False) -> Path:
        point = tmp_path / f"mnt{len(mounted)}"
        point.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip() or done.returncode}")
        mounted.append(point)
        return point

    yield mount
    for point in mounted:
        subprocess.run(["umount", "-l", str(point)], check=False)


def test_a_read_only_out_is_one_line(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], mount_tmpfs: Callable[..., Path]
) -> None:
    _, url = serve([Reply(text=GOOD)])
    read_only = mount_tmpfs(read_only=True)
    assert served_score(url, items(tmp_path / "items.jsonl", 1), read_only / "scores.jsonl") == 2
    line = one_line(capsys)
    assert f"cannot write {read_only}" in line and "Read-only file system" in line and "re-run" in line


def test_read_only_outs_of_import_and_publish_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], mount_tmpfs: Callable[..., Path]
) -> None:
    from support.quintd_files import GOOD as SPANS
    from support.quintd_files import quintd_config, write_quintd

    read_only = mount_tmpfs(read_only=True)
    root = write_quintd(tmp_path / "data", SPANS)
    config = tmp_path / "import.yaml"
    config.write_text(yaml.safe_dump(quintd_config(root).model_dump(mode="json")))
    code = cli_main(["import", "--config", str(config), "--out", str(read_only / "teacher"), "--allow-overlap"])
    line = one_line(capsys)
    assert code == 2 and f"cannot write {read_only}" in line and "Read-only file system" in line, line
    run = tmp_path / "run"
    tiny_adapter(run / "adapter")
    code = cli_main(["publish", "--repo-id", "someone/judge", "--model", str(run), "--dry-run", str(read_only / "s")])
    line = one_line(capsys)
    assert code == 2 and f"cannot write {read_only}" in line and "Read-only file system" in line, line


def test_a_full_disk_is_one_line_and_resumes(
    serve: Serve, tmp_path: Path, capsys: pytest.CaptureFixture[str], mount_tmpfs: Callable[..., Path]
) -> None:
    _, url = serve([Reply(text=GOOD)])
    disk = mount_tmpfs(size="64k")
    filler = disk / "filler"
    descriptor = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:  # fill the disk, leaving no block for the results (bounded: 64 KB fill in 16 writes)
        for _ in range(1000):
            os.write(descriptor, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(descriptor)
    out = disk / "scores.jsonl"
    data = items(tmp_path / "items.jsonl", 3)
    assert served_score(url, data, out) == 2
    line = one_line(capsys)
    assert "No space left on device" in line and "free some space" in line and "re-run" in line
    filler.unlink()
    assert served_score(url, data, out) == 0  # nothing half-written is in the way
    assert len(out.read_text().splitlines()) == 3


def test_a_full_disk_under_the_call_cache_is_one_line(tmp_path: Path, mount_tmpfs: Callable[..., Path]) -> None:
    from spanjudge.inference.backends import LLMCache
    from spanjudge.inference.backends.base import Completion

    disk = mount_tmpfs(size="256k")
    cache = LLMCache(disk / "cache.sqlite")
    try:
        with pytest.raises(
            SpanjudgeError, match=r"cannot write the call cache .*cache\.sqlite: database or disk is full"
        ):
            for number in range(10_000):  # bounded: 256 KB fill long before
                cache.put(f"key-{number}", "m", Completion(text="x" * 2000, model="m"))
    finally:
        cache.close()
