"""PNG plots of a meta-evaluation run (matplotlib, Agg backend: no display needed):
judge vs human scatter per aspect, and correlation bars with interval whiskers beside the
published rows."""

from __future__ import annotations

from pathlib import Path

from spanjudge.eval.correlation.reference import ReferenceIndex
from spanjudge.eval.correlation.runner import AVERAGE, MetaEvalResult
from spanjudge.eval.judging.store import judge_slug

# published rows drawn beside measured ones (when the table has them)
PUBLISHED_ROWS = ("Ensemble", "Llama-FT", "Llama 3.1 8B")


def _pyplot():  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scatter_plots(result: MetaEvalResult, out: Path) -> list[Path]:
    plt = _pyplot()
    written = []
    for judge in result.judges:
        for name, info in result.datasets.items():
            aspects = info["aspects"]
            fig, axes = plt.subplots(1, len(aspects), figsize=(3.2 * len(aspects), 3.2), squeeze=False)
            for ax, aspect in zip(axes[0], aspects, strict=True):
                data = result.scatter.get((judge, name, aspect))
                if data and data.judge:
                    ax.scatter(data.human, data.judge, s=8, alpha=0.5)
                ax.set_title(aspect, fontsize=9)
                ax.set_xlabel("human", fontsize=8)
                ax.set_ylabel("judge", fontsize=8)
            fig.suptitle(f"{info['title']} — {judge}", fontsize=10)
            fig.tight_layout()
            path = out / f"scatter_{name}_{judge_slug(judge)}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written


def bar_plots(result: MetaEvalResult, references: ReferenceIndex | None, out: Path) -> list[Path]:
    plt = _pyplot()
    index = {(c.judge, c.dataset, c.aspect, c.coefficient): c for c in result.cells}
    written = []
    for name, info in result.datasets.items():
        aspects = list(info["aspects"]) + ([AVERAGE] if len(info["aspects"]) > 1 else [])
        for coefficient in info["coefficients"]:
            series: list[tuple[str, list[float], list[tuple[float, float]] | None]] = []
            for judge in result.judges:
                values, errors = [], []
                for aspect in aspects:
                    cell = index.get((judge, name, aspect, coefficient))
                    value = cell.value if cell is not None and cell.value is not None else float("nan")
                    values.append(value)
                    low = cell.low if cell is not None and cell.low is not None else value
                    high = cell.high if cell is not None and cell.high is not None else value
                    errors.append((max(value - low, 0.0), max(high - value, 0.0)))
                series.append((judge, values, errors))
            if references is not None:
                for row in PUBLISHED_ROWS:
                    values = []
                    for aspect in aspects:
                        found = [p.value for p in references.lookup(name, aspect, coefficient) if p.row == row]
                        values.append(found[0] if found else float("nan"))
                    if any(v == v for v in values):
                        series.append((f"{row} (published)", values, None))
            width = 0.8 / max(len(series), 1)
            fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(aspects) + 2), 3.6))
            for position, (label, values, bars) in enumerate(series):
                xs = [i + (position - (len(series) - 1) / 2) * width for i in range(len(aspects))]
                yerr = None if bars is None else [[e[0] for e in bars], [e[1] for e in bars]]
                ax.bar(
                    xs, values, width, label=label, yerr=yerr, capsize=2,
                    hatch="//" if bars is None else None, alpha=0.6 if bars is None else 0.9,
                )  # fmt: skip
            ax.set_xticks(range(len(aspects)))
            ax.set_xticklabels(aspects, rotation=20, fontsize=8)
            ax.axhline(0, color="black", linewidth=0.5)
            ax.set_ylabel(coefficient)
            ax.set_title(f"{info['title']} ({info['level']} level)", fontsize=10)
            ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
            fig.tight_layout()
            path = out / f"bars_{name}_{coefficient}.png"
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written
