"""ARCHITECTURE.md's "How to add …" recipes, followed exactly as written on a copy of the package:
each test makes only the edits its recipe names, then uses the new part through the public paths."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from support.layers import stage_package


def _python(staged: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run `code` with the staged copy as the `spanjudge` package (from inside it: `python -c` puts the working
    folder first on sys.path, and the repository's own spanjudge/ would win)."""
    env = {"PYTHONPATH": str(staged), "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True, cwd=staged
    )


TOY_ENGINE = '''
from spanjudge.inference.backends.base import Backend, Completion
from spanjudge.inference.backends.engine import Engine, grammar_option
from spanjudge.inference.contract import Evaluation, render_judge
from spanjudge.inference.probabilities import ReplyProbabilities


class EchoBackend(Backend):
    """Says "No Error" (score 90) to every request, or echoes it upper-cased when asked to."""

    def __init__(self, spec):
        self.model_id = spec.model
        self.echo = spec.options.get("echo", False)
        self.grammar = spec.options.get("grammar")

    def generate(self, requests, on_result=None):
        results = []
        for index, request in enumerate(requests):
            text = request.messages[-1].content.upper() if self.echo else render_judge(Evaluation(errors=[], score=90))
            result = Completion(text=text, model=self.model_id)
            results.append(result)
            if on_result is not None:
                on_result(index, result)
        return results

    def read_probabilities(self, request, evaluation):
        return ReplyProbabilities(p_no_error=0.75, expected_errors=0.25, errors=[], expected_score=88.0,
                                  score_distribution={90: 0.6, 85: 0.4})


ENGINE = Engine("echo", EchoBackend, "a toy: says No Error", (), "nothing to install",
                constrain=grammar_option, judge_options=("reuse_prefix",))
'''

TOY_TOKENIZER = """
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = Tokenizer(models.WordLevel({"[UNK]": 0}, unk_token="[UNK]"))
words.pre_tokenizer = pre_tokenizers.Whitespace()
tokenizer = PreTrainedTokenizerFast(tokenizer_object=words, unk_token="[UNK]", eos_token="[UNK]")
tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
tokenizer.save_pretrained("toy-model")
open("toy-model/config.json", "w").write('{"model_type": "llama", "max_position_embeddings": 8192}')
"""


def test_an_engine_with_probabilities_and_constraints_is_its_module_and_one_registry_line(tmp_path: Path) -> None:
    package = stage_package(tmp_path, configs=True)
    backends = package / "inference" / "backends"
    # 1. the module: a Backend subclass (reading probabilities) and its declaration
    (backends / "echo_engine.py").write_text(TOY_ENGINE)
    # 2. one line in ENGINES
    registry = backends / "registry.py"
    text = registry.read_text()
    assert text.count('    {\n        "openai": ') == 1
    registry.write_text(
        text.replace("    {\n", '    {\n        "echo": "spanjudge.inference.backends.echo_engine:ENGINE",\n', 1)
    )
    result = _python(
        tmp_path,
        TOY_TOKENIZER
        + """
from pathlib import Path
import yaml
from spanjudge.core.configio import load_yaml_model
from spanjudge.inference.backends import BackendSpec, ChatRequest, make_backend
from spanjudge.inference.judge import Judge
from spanjudge.inference.score.stage import ScoreSettings, _check

Path("model.yaml").write_text(yaml.safe_dump({"kind": "echo", "model": "toy", "options": {"echo": True}}))
spec = load_yaml_model(BackendSpec, Path("model.yaml"))       # a YAML model may name the kind
(reply,) = make_backend(spec).generate([ChatRequest.user("hello")])
assert reply.text == "HELLO", reply
_check(ScoreSettings(model="m", out=Path("o.jsonl"), engine="echo", engine_arg=["max_len=8"], probabilities=True))
judge = Judge.from_pretrained("toy-model", engine="echo", probabilities=True, constrained=True)
assert judge.backend.grammar and "No Error" in judge.backend.grammar  # its own constraint: the contract's GBNF
(evaluation,) = judge.score([judge.request("qags_xsum", "factual consistency", {"Article": "a b c"}, "a b")])
assert (evaluation.score, evaluation.errors) == (90, []), evaluation
assert evaluation.probabilities.p_no_error == 0.75, evaluation  # read by the engine's own reader
print("ok")
""",
    )
    assert result.stdout.strip().endswith("ok"), result.stdout + result.stderr


def test_a_human_correlation_set_is_yaml_only(tmp_path: Path) -> None:
    package = stage_package(tmp_path, configs=True)
    configs = package / "configs"
    data = tmp_path / "data"
    (data / "toy").mkdir(parents=True)
    rows = ["id,system,source,output,fluency"]
    for i in range(12):  # human fluency tracks how much of the source the output keeps
        words = ["the", "cat", "sat", "on", "the", "mat", "by", "the", "door", "today"]
        rows.append(f"s{i},sys,{' '.join(words)},{' '.join(words[: 2 + i % 8])},{2 + i % 8}")
    (data / "toy" / "toy.csv").write_text("\n".join(rows) + "\n")
    # 1. a task: wiki_da's simplification task already fits, so no task file
    # 2. one source in configs/sources/meta_eval_sets.yaml
    with (configs / "sources" / "meta_eval_sets.yaml").open("a") as sources:
        sources.write(
            "  - {name: toy, format: csv, path: $DATA/toy/toy.csv, task: wiki_da,\n"
            "     fields: {input_id: id, system: system, output: output, inputs: {Source text: source}}}\n"
        )
    # 3. one datasets: entry in a suite
    (configs / "eval" / "toy.yaml").write_text(
        "name: toy\nsources: sources/meta_eval_sets.yaml\nreference_tables: null\n"
        "datasets:\n  - name: toy\n    level: global\n    coefficients: [pearson]\n"
        "    references: {input: Source text}\n    aspects:\n      - {name: fluency, human: fluency}\n"
    )
    result = _python(
        tmp_path,
        f"""
        import json, sys
        from spanjudge.app.cli import main
        code = main(["meta-eval", "--suite", "{configs / "eval" / "toy.yaml"}", "--judge", "metric:chrf",
                     "--data-dir", "{data}", "--out", "{tmp_path / "out"}", "--no-plots", "--resamples", "0"])
        results = json.loads(open("{tmp_path / "out" / "results.json"}").read())
        (cell,) = [c for c in results["cells"] if c["dataset"] == "toy"]
        print(code, cell["coefficient"], cell["scored"], cell["value"])
        """,
    )
    code, coefficient, scored, value = result.stdout.split()[-4:]
    assert (code, coefficient, scored) == ("0", "pearson", "12"), result.stdout + result.stderr
    assert float(value) > 0.9  # chrF against the source grows with the words kept, as the humans' fluency does


TOY_KIND = '''"""A toy benchmark: SummEval references with k characters deleted; the mean drop of a judge's score."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..analysis import paired_scores
from ..build import BuildRequest, Built, build_perturbed_sets, reference_sources, select_aspects, select_keys
from ..perturbations import keys_of
from ..kind import BenchmarkKind, no_plots


def build(request: BuildRequest) -> Built:
    task, sources = reference_sources(request.dataset, request.data_root, request.n, request.seed)
    keys = select_keys(request.perturbations, keys_of("toy"))
    aspects = select_aspects(request.aspects, ("fluency",))
    return Built(task, build_perturbed_sets(sources, keys, aspects, request.seed, request.llm, request.progress))


def analyse(benchmark, scored, options) -> dict[str, Any]:
    drops = {}
    for key in benchmark.perturbations:
        original, perturbed, _ = paired_scores(benchmark, scored.scores, key, "fluency")
        drops[key] = sum(o - p for o, p in zip(original, perturbed)) / len(original) if original else None
    return {"drops": drops}


def report(result: Mapping[str, Any], benchmark) -> list[str]:
    return [f"- {key}: mean drop {drop}" for key, drop in result["drops"].items()]


KIND = BenchmarkKind(
    name="toy",
    summary="a toy: k deleted characters, the judge's mean score drop",
    sources=("summeval",),
    build=build,
    analyse=analyse,
    report=report,
    plots=no_plots,
    undefined_why="a drop needs a scored pair",
    aggregation="mean of the samples",
    headline=lambda result: ("mean drop", next(iter(result["drops"].values()), None)),
)
'''


def test_a_perturbation_benchmark_is_its_kind_module_its_name_and_table_rows(tmp_path: Path, shared_data: Path) -> None:
    package = stage_package(tmp_path, configs=True)
    perturb = package / "eval" / "perturb"
    # 1. the kind's module, ending in KIND = BenchmarkKind(...)
    (perturb / "kinds" / "toy.py").write_text(TOY_KIND)
    # 2. one line in registry.BENCHMARKS
    registry = perturb / "registry.py"
    text, opening = registry.read_text(), '    {\n        "dhp": '
    assert text.count(opening) == 1
    registry.write_text(
        text.replace(opening, '    {\n        "toy": "spanjudge.eval.perturb.kinds.toy:KIND",\n        "dhp": ')
    )
    # its new perturbations: rows of `perturbations:` in configs/perturb/perturbations.yaml
    tables = package / "configs" / "perturb" / "perturbations.yaml"
    row = "  - {key: toy.deletion, name: Toy Deletion, benchmark: toy, level: character, aspects: summarization,\n"
    row += "     rule: char_deletion, params: {k: 30}}\n"
    assert tables.read_text().rstrip().endswith("perturbations: []")
    tables.write_text(tables.read_text().rstrip().removesuffix("[]") + "\n" + row)
    out = tmp_path / "toy_benchmark"
    result = _python(
        tmp_path,
        f"""
        import json
        from spanjudge.app.cli import main
        assert main(["perturb", "--benchmark", "toy", "--source", "summeval", "--n", "4", "--out", "{out}",
                     "--data-dir", "{shared_data}"]) == 0
        assert main(["meta-eval", "--benchmark", "{out}", "--judge", "metric:chrf", "--out", "{tmp_path / "eval"}",
                     "--no-plots"]) == 0
        (folder,) = [p for p in __import__("pathlib").Path("{tmp_path / "eval"}").iterdir() if p.is_dir()
                     and (p / "results.json").is_file()]
        print(json.loads((folder / "results.json").read_text())["metrics"]["drops"]["toy.deletion"])
        """,
    )
    drop = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert drop and float(drop) > 0, result.stdout + result.stderr  # chrF against the original falls


TOY_SPAN_SET = '''"""A toy span set: two outputs of a table, one with a wrong year marked."""

from .documents import GoldSpan, SpanDocument
from .sets import SpanSetKind

OUTPUTS = {"t1": ("Team A won 3-1 in 1999.", [(18, 22)]), "t2": ("Team B lost.", [])}


def load(argument, root, limit):
    docs = [SpanDocument(key, "toy", "quintd1", {"Data": "Team A 3, Team B 1 (1998)"}, text,
                         tuple(GoldSpan(start, end, "Incorrect") for start, end in spans))
            for key, (text, spans) in OUTPUTS.items()]
    return docs[:limit], None


SPAN_SET = SpanSetKind("toy", "a toy: two outputs of one table", load)
'''


def test_an_error_span_set_is_its_module_and_one_registry_line(tmp_path: Path) -> None:
    package = stage_package(tmp_path, configs=True)
    spans = package / "eval" / "spans"
    # 1. the set's module, ending in SPAN_SET = SpanSetKind(...)
    (spans / "toy.py").write_text(TOY_SPAN_SET)
    # 2. one line in sets.SPAN_SETS
    registry = spans / "sets.py"
    text, opening = registry.read_text(), '    {\n        "rotowire": '
    assert text.count(opening) == 1
    registry.write_text(
        text.replace(opening, '    {\n        "toy": "spanjudge.eval.spans.toy:SPAN_SET",\n        "rotowire": ')
    )
    scores = tmp_path / "scores.jsonl"  # a judge that marked the year and the score
    errors = [
        {"location": text, "start": start, "end": start + len(text), "severity": 2, "explanation": "", "anchor": None}
        for text, start in (("1999", 18), ("3-1", 11))
    ]
    rows = [
        {"id": "t1", "task": "quintd1", "aspect": "accuracy", "output": "Team A won 3-1 in 1999.",
         "evaluation": {"score": 40, "errors": errors}},
        {"id": "t2", "task": "quintd1", "aspect": "accuracy", "output": "Team B lost.",
         "evaluation": {"score": 100, "errors": []}},
    ]  # fmt: skip
    scores.write_text("".join(json.dumps(row) + "\n" for row in rows))
    out = tmp_path / "eval"
    result = _python(
        tmp_path,
        f"""
        import json
        from spanjudge.app.cli import main
        assert main(["meta-eval", "--spans", "toy", "--judge", "scores:{scores}", "--out", "{out}"]) == 0
        overlap = json.loads(open("{out / "spans.json"}").read())["scores:scores.jsonl"]["overlap"]
        print(overlap["tp"], overlap["fp"], overlap["fn"])
        print(main(["meta-eval", "--spans", "toy:dev", "--judge", "scores:{scores}", "--out", "{out}"]))
        print(main(["meta-eval", "--spans", "nope", "--judge", "scores:{scores}", "--out", "{out}"]))
        """,
    )
    lines = result.stdout.strip().splitlines()
    assert lines[-3:] == ["1 1 0", "2", "2"], result.stdout + result.stderr
    assert "--spans 'toy:dev': toy is named toy" in result.stderr
    assert "--spans must be one of toy, rotowire, quintd1, " in result.stderr  # the new set is listed first
