"""Progress that shows in logs too: rich bars on a terminal; elsewhere (a batch job, `nohup`,
`2> log`) rich draws nothing until the end, so a plain line per task is printed instead, every
`LINE_FRACTION` of its total or every `LINE_SECONDS` seconds (whichever comes first), and
when it completes. Every long command builds its bars here, so they all log alike."""

from __future__ import annotations

import time
from typing import Any

from rich.console import Console
from rich.progress import Progress, ProgressColumn, TaskID

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
