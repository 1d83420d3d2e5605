"""The base-vs-trained comparison rows of the demo report: what each step puts under
`compare` in its details (a measure, the untrained base's value, the trained judge's)."""

from __future__ import annotations

from typing import Any


def parse_row(what: str, base: dict[str, Any] | None, trained: dict[str, Any]) -> dict[str, Any]:
    def rate(counts: dict[str, Any] | None) -> str | None:
        return None if counts is None else f"{counts['scored']}/{counts['outputs']}"

    return {"what": what, "measure": "parsed (scored / asked)", "base": rate(base), "trained": rate(trained)}


def meta_eval_rows(result: Any, coverage: dict[str, Any], trained: str, base: str) -> list[dict[str, Any]]:
    """Items scored per set, then each correlation of the `trained` judge beside the `base` one."""
    compare = [
        parse_row(f"{name} (meta-eval items)", coverage.get(base, {}).get(name), coverage[trained][name])
        for name in result.datasets
    ]
    cells = {(c.judge, c.dataset, c.aspect, c.level, c.coefficient): c for c in result.cells}
    for (judge, dataset, aspect, level, coefficient), cell in cells.items():
        if judge != trained or not cell.items:
            continue
        base_cell = cells.get((base, dataset, aspect, level, coefficient))
        compare.append(
            {
                "what": f"{dataset} {aspect}",
                "measure": f"{coefficient} ({level}) with human scores",
                "base": cell_value(base_cell),
                "trained": cell_value(cell),
            }
        )
    return compare


def dataset_coverage(result: Any, judge: str) -> dict[str, dict[str, int]]:
    """Scored and asked items per dataset for one judge (one cell per aspect, so items count once)."""
    cells = {(c.dataset, c.aspect): c for c in result.cells if c.judge == judge}
    return {
        name: {
            "scored": sum(c.scored for (dataset, _), c in cells.items() if dataset == name),
            "outputs": sum(c.items for (dataset, _), c in cells.items() if dataset == name),
        }
        for name in result.datasets
    }


def cell_value(cell: Any) -> str | None:
    if cell is None:
        return None
    if cell.value is None:
        why = "nothing scored" if not cell.scored else "undefined: too few scored items or constant scores"
        return f"– ({cell.scored}/{cell.items} scored; {why})"
    return f"{cell.value:+.3f} [{cell.low:+.2f}, {cell.high:+.2f}]" if cell.low is not None else f"{cell.value:+.3f}"


def number(value: float | None) -> str:
    return "– (no scored pair)" if value is None else f"{value:.3f}"


def as_counts(row: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if row is None else {"scored": row["scored"], "outputs": row["n_outputs"]}


def metric(row: dict[str, Any], key: str) -> str:
    value = row.get(key)
    if value is None:
        return f"– ({row.get(f'{key}_reason') or 'nothing scored'})"
    return f"{value:.3f}"
