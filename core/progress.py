"""One progress protocol for every stage, and its display.

The protocol (plain callables: a stage needs no rich, and a test passes a function):
- `Tracker`: `tracker(label, total, done=N, **counts)` opens one progress row ("summeval/
  coherence", "gemma3", "score") of `total` items, `done` of them already done (resumed), and
  returns the row's `Advance`;
- `Advance`: `advance(n, **counts)` says n more items are done; `counts` add to the row's other
  tallies (annotate's `cached=1, failed=0`), which must be opened with the row.

The display: `tracker_bars(...)` (a `RichTracker`) shows the rows as rich bars on a terminal;
elsewhere (a batch job, `nohup`, `2> log`) rich draws nothing until the end, so a plain line per
row is printed instead (`LoggedProgress`), every `LINE_FRACTION` of its total or every
`LINE_SECONDS` seconds (whichever comes first), and when it completes. Every long command builds
its display here, so they all log alike.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

from rich.console import Console
from rich.progress import Progress, ProgressColumn, TaskID


class Advance(Protocol):
    """n more items of one progress row are done (a plain `def advance(n)` is one)."""

    def __call__(self, n: int, /, **counts: int) -> None: ...


class Tracker(Protocol):
    """Opens a progress row of `total` items (`done` already done) and returns its Advance."""

    def __call__(self, label: str, total: int, *, done: int = 0, **counts: int) -> Advance: ...


LINE_FRACTION = 0.05  # a line per 5 % of a task ...
LINE_SECONDS = 30.0  # ... or per 30 s with something done, whichever comes first


class LoggedProgress(Progress):
    """A `Progress` that draws no bars and prints `label: done/total (...)` lines."""

    def __init__(
        self, *columns: str | ProgressColumn, console: Console, seconds: float = LINE_SECONDS, **options: Any
    ) -> None:
        options.pop("disable", None)
        super().__init__(*columns, console=console, disable=True, **options)
        self.seconds = seconds
        self._logged: dict[TaskID, tuple[float, float]] = {}  # task -> (time, completed) at its last line

    def add_task(self, description: str, *args: Any, **kwargs: Any) -> TaskID:
        task_id = super().add_task(description, *args, **kwargs)
        self._logged[task_id] = (time.monotonic(), self._tasks[task_id].completed)
        return task_id

    def update(self, task_id: TaskID, *args: Any, **kwargs: Any) -> None:
        super().update(task_id, *args, **kwargs)
        self._maybe_log(task_id)

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        super().advance(task_id, advance)
        self._maybe_log(task_id)

    def _maybe_log(self, task_id: TaskID) -> None:
        task = self._tasks[task_id]
        now = time.monotonic()
        at, done_then = self._logged.get(task_id, (now, 0.0))
        done, total = task.completed, task.total
        if done <= done_then:
            return
        finished = total is not None and done >= total
        step = max(1.0, (total or 0) * LINE_FRACTION)
        if not (finished or done - done_then >= step or now - at >= self.seconds):
            return
        self._logged[task_id] = (now, done)
        extra = "".join(f", {key} {value}" for key, value in task.fields.items())
        shown_total = "?" if total is None else f"{total:g}"
        self.console.print(
            f"{task.description.strip()}: {done:g}/{shown_total} ({task.elapsed or 0:.0f} s{extra})",
            markup=False,
            highlight=False,
            soft_wrap=True,  # one greppable line, whatever the log's width
        )


def progress_bars(*columns: str | ProgressColumn, console: Console, **options: Any) -> Progress:
    """rich bars on a terminal, log lines elsewhere (see the module docstring)."""
    if console.is_terminal:
        return Progress(*columns, console=console, **options)
    return LoggedProgress(*columns, console=console, **options)


class RichTracker:
    """The `Tracker` of a rich `Progress`: one task per row; counts are task fields."""

    def __init__(self, bars: Progress) -> None:
        self.bars = bars

    def __call__(self, label: str, total: int, *, done: int = 0, **counts: int) -> Advance:
        tallies: dict[str, Any] = dict(counts)  # rich's task fields
        task = self.bars.add_task(label, total=total, completed=done, **tallies)
        lock = threading.Lock()  # rows advance from backends' worker threads

        def advance(n: int, /, **more: int) -> None:
            with lock:
                for name, value in more.items():
                    tallies[name] = tallies.get(name, 0) + value
                self.bars.update(task, advance=n, **tallies)

        return advance


@contextlib.contextmanager
def tracker_bars(*columns: str | ProgressColumn, console: Console, **options: Any) -> Iterator[RichTracker]:
    """A Tracker drawing `progress_bars` (bars on a terminal, log lines elsewhere) for the block."""
    with progress_bars(*columns, console=console, **options) as bars:
        yield RichTracker(bars)


@contextlib.contextmanager
def labelled_bars(width: int = 34, console: Console | None = None) -> Iterator[RichTracker]:
    """`tracker_bars` with the usual columns (label, bar, done/total, time), on standard error by
    default; the bars vanish when done (log lines stay)."""
    from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

    columns = (TextColumn(f"{{task.description:<{width}}}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with tracker_bars(*columns, console=console or Console(stderr=True), transient=True) as tracker:
        yield tracker
