"""`spanjudge compare`: systems scored on the same items, compared with significance (`compare.py`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import typer

from spanjudge.core.options import option, settings_command

compare = typer.Typer(add_completion=False, pretty_exceptions_enable=False)


@dataclass(frozen=True, kw_only=True)
class CompareSettings:
    """`spanjudge compare`'s options, each declared once (`core.options`)."""

    results: list[Path] = option(
        help="Results JSONL of each system (`spanjudge score --out`), repeatable: two or more, same item ids.",
        flag="--results",
    )
    name: list[str] | None = option(None, help="A name per --results, in order (default: each file's stem).")
    out: Path | None = option(
        None, help="Write the comparison as JSON here, the table beside it with .md and a plot with .png."
    )
    resamples: int = option(1000, help="Bootstrap and permutation resamples.", min=100)
    alpha: float = option(0.05, help="Significance level (between 0 and 1): a winner is named only below it.")
    seed: int = option(0, help="Seed of the resamples.")
    errors_only: bool = option(
        False,
        help="Compare the error profile alone, for results without scores (e.g. human span annotations: score "
        "null and no unscored_reason); rows a judge failed to score are still left out.",
    )
    allow_mixed: bool = option(
        False,
        help="Compare results judged on different tasks or aspects, or by different judges (decoding, prompt "
        "template): refused otherwise, since their scores are not comparable; the table says what differs.",
    )


def compare_command(s: CompareSettings) -> None:
    """Compare systems scored on the same items: each system's mean score and its errors per output (all,
    and severity ≥ 4) with confidence intervals, and for every pair a paired bootstrap, a paired
    permutation test and a paired t-test, naming the better system only where the difference is
    significant."""
    from spanjudge.core.errors import InputError
    from spanjudge.core.fileio import atomic_write_json, atomic_write_text, check_overwritable
    from spanjudge.eval.compare import compare_systems, is_our_comparison, is_our_plot, is_our_table, markdown, plot
    from spanjudge.inference.score.rows import read_results

    if s.out is not None and s.out.suffix != ".json":  # the table and the plot go beside it: never over it
        raise InputError(
            f"--out {s.out}: the comparison is JSON (e.g. {s.out.with_suffix('.json')}); its .md and .png go beside it"
        )
    outputs = {
        ".json": ("comparison", is_our_comparison),
        ".md": ("table", is_our_table),
        ".png": ("plot", is_our_plot),
    }
    if s.out is not None:
        for suffix, (kind, ours) in outputs.items():
            check_overwritable(s.out.with_suffix(suffix), f"comparison {kind}", ours, "--out", inputs=s.results)
    names = s.name or [path.stem for path in s.results]
    if len(names) != len(s.results):
        raise InputError(f"{len(names)} --name for {len(s.results)} --results: give one name per results file")
    if len(set(names)) != len(names):
        raise InputError(f"system names repeat: {', '.join(names)}; name them with --name")
    for path in s.results:
        if not path.is_file():
            raise InputError(f"results file not found: {path}")
    systems = {name: read_results(path) for name, path in zip(names, s.results, strict=True)}
    result = compare_systems(
        systems, resamples=s.resamples, alpha=s.alpha, seed=s.seed, errors_only=s.errors_only,
        allow_mixed=s.allow_mixed,
    )  # fmt: skip
    table = markdown(result)
    typer.echo(table, nl=False)
    if s.out is not None:
        atomic_write_json(s.out, {**result.as_dict(), "results": [str(p) for p in s.results]})
        atomic_write_text(s.out.with_suffix(".md"), table)
        plot(result, s.out.with_suffix(".png"))
        typer.echo(json.dumps({"written": [str(s.out.with_suffix(suffix)) for suffix in (".json", ".md", ".png")]}))


settings_command(compare, CompareSettings, compare_command)
