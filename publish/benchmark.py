"""A span set as a Hub **Benchmark**: the dataset repository `spanjudge publish --benchmark SET` stages.

The Hub lists a model's `.eval_results/` on a benchmark's leaderboard only when the result's `dataset.id` is a
registered Benchmark: a dataset repository with an `eval.yaml` naming its evaluation framework and tasks. The
repository staged here holds exactly:

- `data/test.jsonl`: one row per output of the set: its id, spanjudge's judge prompt for it, the output, the task
  and aspect, and the people's error spans (`integrations.inspect_benchmark` reads it);
- `eval.yaml`: `evaluation_framework: inspect-ai` and the one task (config `default`, split `test`);
- `spanjudge_task.py`: the inspect task itself (the judge's reply scored with MPP). inspect's own `hf/OWNER/NAME`
  builds tasks only from its built-in scorers, so this file is what `inspect eval` runs;
- `README.md`: the dataset card (`configs/cards/benchmark.jinja`), whose `configs` point the Hub's viewer and
  `datasets` at the data file.

A set must carry its outputs' inputs (the prompt needs them): quintd-1 and RotoWire do, a factgenie campaign does not.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any, cast

import yaml

from spanjudge.core.errors import InputError
from spanjudge.core.fileio import atomic_write_text
from spanjudge.core.registry import one_of
from spanjudge.eval.spans.evaluate import load_span_set
from spanjudge.eval.spans.sets import SPAN_SETS, choose_set
from spanjudge.inference.prompts import render_judge_prompt

from .markdown import render

DATA_FILE = "data/test.jsonl"
EVAL_FILE = "eval.yaml"
TASK_FILE = "spanjudge_task.py"
CARD_FILE = "README.md"
TASK_ID = "error_spans"
TEMPLATE = "benchmark.jinja"
TASK_SOURCE = '''"""The benchmark's inspect task (pip install 'spanjudge[inspect]'):

    inspect eval spanjudge_task.py --model hf/YOUR_JUDGE
"""

from pathlib import Path

from inspect_ai import task

from spanjudge.integrations.inspect_benchmark import error_span_task


@task
def {task_id}():
    return error_span_task(Path(__file__).parent / "{data_file}")
'''


@dataclass(frozen=True)
class BenchmarkOptions:
    set_name: str  # a `meta-eval --spans` set with inputs (eval.spans.sets): quintd1, quintd1:dev, rotowire, ...
    repo_id: str
    license: str = "other"
    data_root: Path | None = None
    max_items: int | None = None


def benchmark_rows(options: BenchmarkOptions) -> tuple[list[dict[str, object]], str, str]:
    """The rows of data/test.jsonl, and the set's task and aspect."""
    chosen = choose_set(options.set_name, "--benchmark")
    if not chosen.kind.has_inputs:
        with_inputs = [spelling for name in SPAN_SETS.names() if (kind := SPAN_SETS.load(name)).has_inputs
                       for spelling in kind.spellings()]  # fmt: skip
        raise InputError(
            f"--benchmark {options.set_name}: {chosen.kind.name} holds no inputs, so no judge prompt can be "
            f"written for its outputs; give a span set with inputs ({one_of(with_inputs)})"
        )
    spans = load_span_set(options.set_name, [], options.data_root, options.max_items, snap_words=False)
    task = spans.dataset.task
    aspect = task.aspect(spans.aspect.name)
    rows: list[dict[str, object]] = [
        {
            "id": doc.id,
            "prompt": render_judge_prompt(task, aspect, doc.inputs, doc.output),
            "output": doc.output,
            "task": task.id,
            "aspect": aspect.name,
            "gold_spans": [
                {"start": g.start, "end": g.end, "category": g.category, "text": doc.output[g.start : g.end]}
                for g in doc.gold
            ],
        }
        for doc in spans.docs
    ]
    return rows, task.id, aspect.name


def eval_yaml(name: str, description: str) -> str:
    """The Hub's Benchmark registration: the framework and its one task (config and split of the data)."""
    registration = {
        "name": name,
        "description": description,
        "evaluation_framework": "inspect-ai",
        "tasks": [{"id": TASK_ID, "config": "default", "split": "test"}],
    }
    return str(yaml.safe_dump(registration, sort_keys=False, allow_unicode=True))


def _card(options: BenchmarkOptions, rows: list[dict[str, object]], task: str, aspect: str) -> str:
    metadata = {
        "license": options.license,
        "tags": ["spanjudge", "benchmark", "error-spans", "llm-as-a-judge", "nlg-evaluation"],
        "configs": [{"config_name": "default", "data_files": [{"split": "test", "path": DATA_FILE}]}],
    }
    gold = sum(len(cast(list[Any], r["gold_spans"])) for r in rows)
    return render(
        TEMPLATE,
        metadata=yaml.safe_dump(metadata, sort_keys=False).strip(),
        name=options.repo_id.split("/")[-1],
        repo=options.repo_id,
        folder=options.repo_id.split("/")[-1],
        set_name=options.set_name,
        source=choose_set(options.set_name).kind.summary,
        items=len(rows),
        gold=gold,
        no_error=sum(1 for r in rows if not r["gold_spans"]),
        task=task,
        aspect=aspect,
        task_id=TASK_ID,
        license_unset=options.license == "other",
        spanjudge_version=version("spanjudge"),
    )


def stage_benchmark(options: BenchmarkOptions, out: Path) -> list[str]:
    """Write the benchmark's repository into `out` (a new or empty folder); returns the staged names."""
    rows, task, aspect = benchmark_rows(options)
    if not rows:
        raise InputError(f"--benchmark {options.set_name}: the set has no outputs")
    if out.exists() and any(out.iterdir()):
        raise InputError(f"{out} is not empty: a benchmark is staged into a new or empty folder")
    (out / "data").mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / DATA_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    description = (
        f"Error spans that people marked in {len(rows)} outputs of {options.set_name}, for judges of the aspect "
        f"'{aspect}'; a judge's spans are scored with MPP (partial overlap, partial credit, micro)."
    )
    atomic_write_text(out / EVAL_FILE, eval_yaml(options.repo_id.split("/")[-1], description))
    atomic_write_text(out / TASK_FILE, TASK_SOURCE.format(task_id=TASK_ID, data_file=DATA_FILE))
    atomic_write_text(out / CARD_FILE, _card(options, rows, task, aspect))
    return [CARD_FILE, DATA_FILE, EVAL_FILE, TASK_FILE]
