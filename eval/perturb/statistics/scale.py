"""Scale helpers: a 0-100 score on the 1-5 scale, and equal-width bins."""

from __future__ import annotations

from dataclasses import dataclass


def to_likert(score_0_100: float) -> float:
    """Map a 0–100 judge score linearly onto 1–5 (s' = 1 + 4·s/100) for Likert deltas."""
    return 1.0 + 4.0 * float(score_0_100) / 100.0


@dataclass(frozen=True)
class EqualWidthBinner:
    """Cut [low, high] into len(classes) equal-width bins mapped to ordinal classes in order.

    Bins are half-open on the right, [edge_i, edge_i+1), except the last, which is closed so
    that `high` itself lands in the top class: for 0–100 into 1..5, 20 → 2, 100 → 5. Scores
    outside [low, high] are an error, not clipped, so a scale mix-up shows (only float round-off
    within 1e-9 of the range is snapped to it).
    """

    low: float
    high: float
    classes: tuple[int, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "classes", tuple(self.classes))
        if not self.high > self.low:
            raise ValueError(f"binner needs low < high, got [{self.low}, {self.high}]")
        if not self.classes:
            raise ValueError("binner needs at least one class")

    @property
    def edges(self) -> list[float]:
        """The len(classes) + 1 bin edges, low first."""
        width = (self.high - self.low) / len(self.classes)
        return [self.low + i * width for i in range(len(self.classes))] + [self.high]

    def __call__(self, score: float) -> int:
        # a metric's float round-off (BLEU of an unchanged text: 100.00000000000004) is no scale mix-up
        slack = 1e-9 * (self.high - self.low)
        if self.low - slack <= score <= self.high + slack:
            score = min(max(score, self.low), self.high)
        if not self.low <= score <= self.high:
            raise ValueError(f"score {score} is outside the binner's range [{self.low}, {self.high}]")
        width = (self.high - self.low) / len(self.classes)
        index = min(int((score - self.low) // width), len(self.classes) - 1)
        return self.classes[index]

    def describe(self) -> str:
        """One line for reports, e.g. 'equal-width bins on [0, 100]: [0, 20)→1 … [80, 100]→5'."""
        edges = self.edges
        parts = [
            f"[{_fmt(edges[i])}, {_fmt(edges[i + 1])}{']' if i == len(self.classes) - 1 else ')'}→{c}"
            for i, c in enumerate(self.classes)
        ]
        return f"equal-width bins on [{_fmt(self.low)}, {_fmt(self.high)}]: " + ", ".join(parts)


def _fmt(x: float) -> str:
    return f"{x:g}"
