"""Where each step of the demo writes (`DemoLayout`), under one output folder."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class DemoLayout:
    """Where each step of the demo writes, under one output folder."""

    out: Path

    @property
    def annotate(self) -> Path:
        return self.out / "annotate"

    @property
    def teacher(self) -> Path:
        return self.out / "teacher"

    @property
    def train_data(self) -> Path:
        return self.out / "train_data"

    @property
    def train(self) -> Path:
        return self.out / "train"

    @property
    def adapter(self) -> Path:
        return self.train / "adapter"

    @property
    def held_out(self) -> Path:
        return self.out / "score" / "held_out.jsonl"

    @property
    def scores(self) -> Path:
        return self.out / "score" / "scores.jsonl"

    @property
    def base_scores(self) -> Path:
        return self.out / "score" / "base_scores.jsonl"

    @property
    def spans(self) -> Path:
        return self.out / "spans"

    @property
    def meta_eval(self) -> Path:
        return self.out / "meta_eval"

    @property
    def perturbation(self) -> Path:
        return self.out / "perturbation"

    @property
    def publish(self) -> Path:
        return self.out / "publish"

    @property
    def card_rows(self) -> Path:
        return self.out / "publish_eval_rows.json"

    @property
    def logs(self) -> Path:
        return self.out / "logs"

    @property
    def report(self) -> Path:
        return self.out / "report.html"

    @property
    def run_file(self) -> Path:
        return self.out / "demo_run.json"

    @property
    def runs_log(self) -> Path:
        return self.out / "demo_runs.jsonl"
