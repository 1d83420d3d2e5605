"""One judge in several processes: `JudgeWorkers(Judge.prepare(...), workers=2).score(requests)`.

Why: a small judge writing one reply (or one input's replies) at a time on a CPU, as the drafted engine does, is
bound by the per-operation cost of each decoding step more than by arithmetic, so two processes of one thread
judge more a second than one process of two threads: 1.44× on quintd-1 dev's 120 outputs on a 2-core host, the
same replies (`bench/judging_workers.py`, `bench/results/judging_workers.md`). Each worker loads the prepared
judge once, with the machine's cores shared out as threads (`torch.set_num_threads`), and judges whole groups of
requests: the outputs of one input go to one worker together, so that its engine reads their shared prompt once;
the groups with the most text go first, so that the last to finish are short.

What a caller sees is a `Judge`'s: `name`, `catalog`, `request(...)`, `score(requests, progress, on_result)`
(results in the requests' order, each handed to `on_result` as it arrives) and `close()`. A worker's judgments
are the same judge's: the same replies, its probabilities within the rounding of another thread count. A worker
whose judging raises stops the scoring with the error's own line; one that dies (killed, a native crash) with one
line naming its exit signal and the end of its log. Results already handed to `on_result` are the caller's to
keep, so a re-run judges only the rest. A scoring stopped early (a failure, or the caller interrupted) stops every
worker at once: a worker left to finish the queued groups would judge for no one.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import queue
import shutil
import tempfile
import traceback
from collections.abc import Sequence
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from spanjudge.core.catalog import Catalog, load_catalog
from spanjudge.core.cpus import cpu_threads
from spanjudge.core.crash import describe_exit, log_tail
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.progress import Advance

from .judge import PreparedJudge, RequestsByName, ResultCallback
from .judge_conversation import JudgeRequest

if TYPE_CHECKING:
    from .judged import JudgedEvaluation

_POLL_SECONDS = 0.5  # how often the parent looks at its workers while it waits for a result


class JudgeWorkers(RequestsByName):
    """A prepared judge loaded in `workers` processes of `threads` threads each (default: the cores shared out,
    `core.cpus.cpu_threads`), scored like one `Judge` (see the module). Each worker's output goes to `worker-K.log`
    in `log_dir` (default: a temporary folder, removed by a clean `close()`, kept for good once a worker failed)."""

    def __init__(
        self, prepared: PreparedJudge, workers: int, threads: int | None = None, log_dir: Path | None = None
    ) -> None:
        if workers < 1:
            raise SpanjudgeError(f"workers must be 1 or more, got {workers}")
        self.prepared = prepared
        self.workers = workers
        self.threads = threads or max(1, cpu_threads() // workers)
        self.name = prepared.setup.name
        self.catalog: Catalog = prepared.catalog or load_catalog()
        self.prompt_template = prepared.setup.prompt_template
        # a temporary log folder is removed by a clean close(), kept where a worker failed: its log is named
        self._scratch = log_dir is None
        self.log_dir = log_dir if log_dir is not None else Path(tempfile.mkdtemp(prefix="spanjudge-workers-"))
        self._context = multiprocessing.get_context("spawn")  # never fork a process that may hold torch's threads
        self._tasks: multiprocessing.Queue[Any] = self._context.Queue()
        self._results: multiprocessing.Queue[Any] = self._context.Queue()
        self._processes: list[BaseProcess] = []
        self._busy = False  # a scoring is under way: its workers hold groups that no one will collect if it stops

    def log_path(self, worker: int) -> Path:
        return self.log_dir / f"worker-{worker}.log"

    def start(self) -> JudgeWorkers:
        """Starts the workers and waits until each has loaded the judge (`score` starts them if not yet): a judge
        that cannot load fails here, once, before any request is sent."""
        if self._processes:
            return self
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for worker in range(self.workers):
            process = self._context.Process(
                target=_serve,
                args=(self.prepared, self.threads, self.log_path(worker), worker, self._tasks, self._results),
                name=f"spanjudge-judge-worker-{worker}",
                daemon=True,
            )
            process.start()
            self._processes.append(process)
        ready = 0
        while ready < self.workers:
            ready += self._next() is None
        return self

    def _next(self) -> tuple[int, JudgedEvaluation] | None:
        """The next message of a worker: a result (its request's index and evaluation), or None where a worker
        says it has loaded the judge. Raises SpanjudgeError for a worker that failed or ended."""
        while True:
            try:
                kind, worker, payload = self._results.get(timeout=_POLL_SECONDS)
            except queue.Empty:
                ended = self._ended()
                if ended is None:
                    continue
                try:  # what an ending worker said last (its failure) may still be on the way
                    kind, worker, payload = self._results.get(timeout=_POLL_SECONDS)
                except queue.Empty:
                    self._crashed(ended)
            if kind == "failed":
                self.close(keep_logs=True)
                raise SpanjudgeError(f"judging worker {worker}: {payload}; its log: {self.log_path(worker)}")
            return payload if kind == "result" else None

    def score(
        self,
        requests: Sequence[JudgeRequest],
        progress: Advance | None = None,
        on_result: ResultCallback | None = None,
    ) -> list[JudgedEvaluation]:
        """One JudgedEvaluation per request, in order, as `Judge.score` returns them; `on_result(index, result)`
        as each arrives. Raises SpanjudgeError if a worker cannot load the judge or dies."""
        if not requests:
            return []
        self.start()
        self._busy = True
        for group in longest_first(input_groups(requests), requests):
            self._tasks.put([(index, requests[index]) for index in group])
        results: dict[int, JudgedEvaluation] = {}
        while len(results) < len(requests):
            message = self._next()
            if message is None:
                continue
            index, result = message
            results[index] = result
            if on_result is not None:
                on_result(index, result)
            if progress is not None:
                progress(1)
        self._busy = False  # every group judged: the workers wait for the next scoring
        return [results[index] for index in range(len(requests))]

    def _ended(self) -> int | None:
        """The first worker that has ended, if one has."""
        return next((w for w, process in enumerate(self._processes) if process.exitcode is not None), None)

    def _crashed(self, worker: int) -> NoReturn:
        """Raises for a worker that ended while results were awaited: its end said as a crash, with its log's last
        lines."""
        process, log = self._processes[worker], self.log_path(worker)
        code = process.exitcode or 0
        self.close(keep_logs=True)
        raise SpanjudgeError(
            f"judging worker {worker} (pid {process.pid}) {'crashed' if code < 0 else 'stopped'}: "
            f"{describe_exit(code)}; its log ({log}) ends: {log_tail(log)}; run the same command again: "
            "the judgments already kept are resumed"
        )

    def close(self, keep_logs: bool = False) -> None:
        """Stops the workers, then removes a temporary log folder; `keep_logs` (a worker failed): keeps it. Idle
        workers end when told; a scoring that stopped early (a failure, or the caller interrupted: its groups are
        still queued or held) has them stopped at once (SIGTERM, then SIGKILL)."""
        processes, self._processes = self._processes, []
        at_once, self._busy = self._busy or keep_logs, False
        for process in processes:
            if process.exitcode is None:
                if at_once:
                    process.terminate()
                else:
                    self._tasks.put(None)
        for process in processes:
            process.join(timeout=5 if at_once else 30)
            if process.exitcode is None:
                process.kill()
                process.join()
        if at_once:  # what the stopped scoring left queued is no one's: this process must not wait at its exit to
            # hand it over, nor a later scoring read it
            self._tasks.cancel_join_thread()
            self._tasks, self._results = self._context.Queue(), self._context.Queue()
        if self._scratch:  # a failure's logs are named in its message: a later close() (a caller's) keeps them
            if not keep_logs:
                shutil.rmtree(self.log_dir, ignore_errors=True)
            self._scratch = False

    def __enter__(self) -> JudgeWorkers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def input_groups(requests: Sequence[JudgeRequest]) -> list[list[int]]:
    """The requests' indices grouped by their inputs, in the order each input first appears: the outputs of one
    input share their prompt up to the output, which one engine reads once."""
    groups: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for index, request in enumerate(requests):
        groups.setdefault(tuple(sorted(request.inputs.items())), []).append(index)
    return list(groups.values())


def longest_first(groups: list[list[int]], requests: Sequence[JudgeRequest]) -> list[list[int]]:
    """The groups, the most text first: the workers take the long groups while all are busy and share the short
    ones at the end, so that none is left judging a long group alone (longest-processing-time-first)."""

    def text(group: list[int]) -> int:
        inputs = sum(len(value) for value in requests[group[0]].inputs.values())
        return inputs + sum(len(requests[index].output) for index in group)

    return sorted(groups, key=text, reverse=True)


def _serve(
    prepared: PreparedJudge,
    threads: int,
    log: Path,
    worker: int,
    tasks: multiprocessing.Queue[Any],
    results: multiprocessing.Queue[Any],
) -> None:
    """A worker: its output to `log` (native code's too), the judge loaded with `threads` threads, then each group
    of (index, request) judged until a None arrives."""
    with log.open("ab") as handle:
        os.dup2(handle.fileno(), 1)
        os.dup2(handle.fileno(), 2)
    with contextlib.suppress(ImportError):  # an engine in this process computes with torch's threads
        import torch

        torch.set_num_threads(threads)
    try:
        judge = prepared.load()
    except Exception as error:  # said to the parent, which stops the scoring with it; the traceback to the log
        traceback.print_exc()
        results.put(("failed", worker, f"the judge did not load: {error}"))
        return
    results.put(("ready", worker, None))
    try:
        while (group := tasks.get()) is not None:
            indices = [index for index, _ in group]

            def send(position: int, result: JudgedEvaluation, indices: list[int] = indices) -> None:
                results.put(("result", worker, (indices[position], result)))

            judge.score([request for _, request in group], on_result=send)
    except SpanjudgeError as error:  # a mistake the judge names (its text is the message); the parent says it
        results.put(("failed", worker, str(error)))
    except Exception as error:  # a bug: the traceback to the log, its line to the parent
        traceback.print_exc()
        results.put(("failed", worker, f"{type(error).__name__}: {error}"))
    finally:
        judge.close()
