"""Judges whose evaluations come from a file, or from the distilled judge run in this process.

Scores file (JSONL, one evaluation per line), e.g. `spanjudge score` output:

    {"id": "summeval-17", "aspect": "coherence", "evaluation": {"errors": [...], "score": 65}, ...}

- `id`: the meta-eval item id (`<dataset>-<row>`, as in `meta-eval --export-requests`), or
  `<item id>@<aspect>`; the aspect is the judge aspect of the suite (e.g. interestingness).
- `aspect` (optional): used when the id carries none; a line with no aspect at all applies to
  every aspect of that item.
- the score: `evaluation.score`, else a top-level `score`, 0-100; null means unscored (the
  line's `unscored_reason`, if any, is kept). Items missing from the file are reported as missing.
- `output` (optional; `spanjudge score` writes it): the text that was judged. When given, it must be
  the item's output: a line judged on another text (another campaign whose ids happen to match) is
  refused with its id, since its score and its spans' offsets are about that other text.

A file that cannot mean what it says is refused with its file and line: a second line for the
same (id, aspect) (which one counts would be a guess), a score outside 0-100, a file with no
evaluation at all. An aspect that no set of the suite asks for is only warned about: the file
may serve several suites.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from spanjudge.core.digests import file_sha256, folder_fingerprint, sha256_of
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.core.jsonl import iter_jsonl
from spanjudge.core.keyvalue import yaml_value
from spanjudge.core.progress import Advance
from spanjudge.eval.judging.datasets import MetaDataset, MetaItem
from spanjudge.eval.judging.judgment import Judgment
from spanjudge.eval.judging.suite import AspectSpec
from spanjudge.inference.judge_conversation import JudgeRequest
from spanjudge.inference.probabilities import SPAN_KEPT_AT
from spanjudge.inference.prompts import template_sha256

if TYPE_CHECKING:
    from spanjudge.eval.judging.judges import JudgeContext
    from spanjudge.inference.contract import Evaluation
    from spanjudge.inference.judge import Judge, PreparedJudge
    from spanjudge.inference.judged import JudgedEvaluation


def _score_of(row: Mapping[str, Any], where: str) -> float | None:
    evaluation = row.get("evaluation")
    value = evaluation.get("score") if isinstance(evaluation, Mapping) else row.get("score")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InputError(f"{where}: score must be a number or null, got {value!r}")
    if not 0 <= value <= 100:  # also NaN and Infinity, which json.loads accepts
        raise InputError(f"{where}: score {value!r} is outside 0-100")
    return float(value)


def _file_spans(evaluation: object) -> dict[str, Any] | None:
    """Anchored spans of a scores-file evaluation (as `spanjudge score` writes them), if any."""
    errors = evaluation.get("errors") if isinstance(evaluation, Mapping) else None
    if not isinstance(errors, list):
        return None
    spans = [
        [e["start"], e["end"]]
        for e in errors
        if isinstance(e, Mapping) and isinstance(e.get("start"), int) and isinstance(e.get("end"), int)
    ]
    return {"errors": len(errors), "spans": spans}


def _file_detail(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """`_file_spans` of a scores-file line, with what `probability_detail` keeps where the line was scored with
    the judge's probabilities (`score --probabilities`: P(no error), the expected count, each written error's
    confidence; the written errors are `written_errors` where a decision rule decided)."""
    detail = _file_spans(row.get("evaluation"))
    read = row.get("probabilities")
    if detail is None or not isinstance(read, Mapping):
        return detail
    written = row.get("written_errors", row["evaluation"]["errors"])
    blocks = [e.get("confidence") for e in written if isinstance(e, Mapping)]
    numbers = [read.get("p_no_error"), read.get("expected_errors"), *blocks]
    if len(blocks) != len(written) or any(isinstance(v, bool) or not isinstance(v, int | float) for v in numbers):
        return detail
    reach, cumulative = 1.0, []
    for confidence in blocks:  # each block's confidence is given those before it: the product writes them all
        reach *= float(cast(float, confidence))  # a number: checked above
        cumulative.append(reach)
    anchored = [isinstance(e.get("start"), int) and isinstance(e.get("end"), int) for e in written]
    return detail | {
        "written_errors": len(written),
        "written_spans": [[e["start"], e["end"]] for e, kept in zip(written, anchored, strict=True) if kept],
        "span_confidence": [p for p, kept in zip(cumulative, anchored, strict=True) if kept],
        "p_no_error": float(read["p_no_error"]),
        "expected_errors": float(read["expected_errors"]),
    }


ScoreKey = tuple[str, str | None]  # item id, aspect (None: every aspect of the item)


@dataclass
class ScoresFile:
    judgments: dict[ScoreKey, Judgment] = field(default_factory=dict)
    lines: dict[ScoreKey, str] = field(default_factory=dict)  # key -> "file:line", for messages
    outputs: dict[ScoreKey, str] = field(default_factory=dict)  # key -> the judged text, where the line gives it
    aspects: dict[str, str] = field(default_factory=dict)  # aspect -> "file:line" of its first line


def load_scores_file(path: Path) -> ScoresFile:
    if not path.is_file():
        raise InputError(f"scores file not found: {path}")
    scores = ScoresFile()
    found = scores.judgments
    for where, row in iter_jsonl(path):
        if row.get("id") is None:
            raise InputError(f"{where}: each line needs an 'id' (the meta-eval item id)")
        item_id, sep, aspect = str(row["id"]).partition("@")
        key = (item_id, aspect if sep else (str(row["aspect"]) if row.get("aspect") else None))
        if key in found:
            aspect_text = f" aspect '{key[1]}'" if key[1] else ""
            raise InputError(
                f"{where}: id '{item_id}'{aspect_text} is already scored at {scores.lines[key]}; "
                "keep one line per item and aspect"
            )
        score = _score_of(row, where)
        reason = None if score is not None else str(row.get("unscored_reason") or "unscored in the scores file")
        found[key] = Judgment(score, reason, _file_detail(row))
        scores.lines[key] = where
        output = row.get("output")
        if output is not None:
            if not isinstance(output, str):
                raise InputError(f"{where}: 'output' must be the judged text, got {type(output).__name__}")
            scores.outputs[key] = output
        if key[1] is not None:
            scores.aspects.setdefault(key[1], where)
    if not found:
        raise InputError(f"{path}: the scores file holds no evaluation (it is empty)")
    return scores


def _first_difference(judged: str, expected: str) -> str:
    """Where two texts first differ, quoted briefly."""
    at = next(
        (i for i, (a, b) in enumerate(zip(judged, expected, strict=False)) if a != b), min(len(judged), len(expected))
    )
    return f"they part at character {at}: {judged[at : at + 30]!r} vs {expected[at : at + 30]!r}"


# weights, configs, and the templates that shape the prompt (the judge's own and the chat template)
_MODEL_FILES = (".safetensors", ".bin", ".gguf", ".pt", ".json", ".jinja")


def model_fingerprint(location: str) -> str:
    """What identifies the weights behind a distilled: location, for naming its judgment store.

    A folder (an adapter with its spanjudge.json, or a model) or a file is named by its resolved
    path and its files' contents (size and modification time for files too big to read on every
    run), so a retrained adapter in the same folder, or another adapter in a folder of the same
    name, gets its own store. Anything else (a Hub id, an alias such as @smollm2) names itself."""
    return folder_fingerprint(location, lambda p: p.suffix in _MODEL_FILES) or location


def error_spans(evaluation: Evaluation) -> list[list[int]]:
    """The anchored error spans of an evaluation ([start, end] character offsets), for span metrics."""
    return _anchored(evaluation.errors)


def _anchored(errors: Iterable[Any]) -> list[list[int]]:
    return [[e.start, e.end] for e in errors if e.start is not None and e.end is not None]


def probability_detail(evaluation: JudgedEvaluation) -> dict[str, Any]:
    """What a judgment read with its probabilities keeps for calibration and for fitting decisions
    (`eval.spans.calibration`, `eval.spans.decision_fit`): the written reply's anchored spans with each one's
    confidence, its number of errors, P(no error) and the expected number of errors."""
    reading = evaluation.probabilities
    assert reading is not None
    written = evaluation.reply_errors
    confidences = reading.written()
    return {
        "written_errors": len(written),
        "written_spans": _anchored(written),
        "span_confidence": [p for e, p in zip(written, confidences, strict=True) if e.start is not None],
        "p_no_error": reading.p_no_error,
        "expected_errors": reading.expected_errors,
    }


def _expected_detail(evaluation: JudgedEvaluation) -> dict[str, Any]:
    """The span metrics' view of an evaluation read with its probabilities: the spans it writes with
    probability at least SPAN_KEPT_AT along its reply, and its expected number of errors (what the
    count correlation uses), as bench/distill_quintd.py's `+expected` rows read them."""

    reading = evaluation.probabilities
    if reading is None:
        raise ValueError("an evaluation read without its probabilities has no expected detail")
    kept = [e for e, p in zip(evaluation.reply_errors, reading.written(), strict=True) if p >= SPAN_KEPT_AT]
    return {"errors": len(kept), "spans": _anchored(kept), "expected_errors": reading.expected_errors}


class ScoresFileJudge:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.name = f"scores:{path.name}"
        self._file = load_scores_file(path)
        self._scores = self._file.judgments
        # the store is keyed by the file's content: another file, or this one edited, is judged afresh
        self.store_key = f"scores:{path.resolve()}|{sha256_of(path)}"

    def warnings(self, known_aspects: Iterable[str]) -> list[str]:
        """Aspects of the file that no set of the suite asks for: their lines are never used."""
        known = sorted(set(known_aspects))
        return [
            f"{where}: aspect '{aspect}' is not an aspect of this suite ({', '.join(known)}); its lines are not used"
            for aspect, where in self._file.aspects.items()
            if aspect not in known
        ]

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        results = {}
        for item in items:
            key: ScoreKey = (item.id, aspect.judge_aspect)
            if key not in self._scores:
                key = (item.id, None)
            found = self._scores.get(key)
            judged = self._file.outputs.get(key)
            if found is not None and judged is not None and judged != item.output:
                raise InputError(
                    f"{self._file.lines[key]}: id '{item.id}' was judged on another text than {dataset.name}'s "
                    f"output of that id ({_first_difference(judged, item.output)}); its score and spans are "
                    "not about this output: score this data set's outputs (meta-eval --export-requests)"
                )
            results[item.id] = found or Judgment(None, f"missing from {self.path.name}")
            if progress:
                progress(1)
        return results

    def close(self) -> None:
        pass


ENGINE_ARG = "engine_arg."  # --judge-option engine_arg.max_model_len=8192: an engine argument


def _judge_options(options: Mapping[str, str]) -> dict[str, Any]:
    """Judge.from_pretrained keyword arguments, typed as YAML as every setting is (retries=0 an
    int, constrained=true a bool); `engine_arg.KEY` options go to its engine_options."""

    found: dict[str, Any] = {}
    engine: dict[str, Any] = {}
    for key, raw in options.items():
        value = yaml_value(raw, "--judge-option", f"{key}={raw}")
        if key.startswith(ENGINE_ARG):
            engine[key.removeprefix(ENGINE_ARG)] = value
        else:
            found[key] = value
    if engine:
        found["engine_options"] = engine
    return found


SCORE_KINDS = ("written", "expected", "consensus")  # --judge-option score=...: the score a judge is correlated by


class DistilledJudge:
    """`spanjudge.inference.judge.Judge.from_pretrained(location, **options)`.

    `score=expected` (a judge option of its own) correlates the judge's expected score (its
    probabilities over the contract's 0-100 values, read along each written evaluation; the
    transformers engine) instead of the written one; `score=consensus` (with `samples=N`) the
    score of its N sampled replies merged; the judge's name says which."""

    def __init__(self, location: str, options: Mapping[str, str]) -> None:
        try:
            module = importlib.import_module("spanjudge.inference.judge")
        except ModuleNotFoundError as exc:
            if exc.name and exc.name.startswith("spanjudge"):
                raise SpanjudgeError(
                    "the distilled judge (spanjudge.inference.judge) is not available in this install; "
                    "score with `spanjudge score` elsewhere and pass --judge scores:FILE"
                ) from None
            raise
        self.score_kind = options.get("score", "written")
        if self.score_kind not in SCORE_KINDS:
            raise InputError(f"--judge-option score={self.score_kind}: must be written, expected or consensus")
        if self.score_kind == "consensus" and not options.get("samples"):
            raise InputError("--judge-option score=consensus merges sampled replies: give --judge-option samples=N too")
        self.name = f"distilled:{Path(location).name or location}"
        if self.score_kind != "written":
            self.name += f" ({self.score_kind} score)"
        judge_options = {k: v for k, v in options.items() if k != "score"}
        if self.score_kind == "expected":
            judge_options["probabilities"] = "true"
        # checked and read now, loaded when an item needs judging: a re-run that finds every judgment stored
        # (a report written again, another judge added beside) never loads the model
        self._prepared: PreparedJudge = module.Judge.prepare(location, **_judge_options(judge_options))
        self._loaded: Judge | None = None
        self.location = location
        setup = self._prepared.setup
        # the decision rule it applies (None: its written replies), for the held-out check of --spans
        self.decisions = setup.decisions
        if setup.decisions_skipped:  # a stored rule its engine cannot apply: said, as `score` says it
            print(f"note: {self.name}: {setup.decisions_skipped}", file=sys.stderr)
        # options (engine, sampling ...) change the judgments too, and so does the prompt template's
        # content (an edited --judge-option prompt_template=FILE keeps its name); see model_fingerprint
        settings = ",".join(f"{k}={v}" for k, v in sorted(options.items()))
        template = template_sha256(setup.prompt_template)
        files = ",".join(  # files an engine option names (llama.cpp's gguf= and lora=) by their content
            f"{k}={file_sha256(Path(v).expanduser())}"
            for k, v in sorted(options.items())
            if k.startswith(ENGINE_ARG) and Path(v).expanduser().is_file()
        )
        self.store_key = f"distilled:{model_fingerprint(location)}|{settings}|template={template}"
        if files:
            self.store_key += f"|files={files}"

    def judge(
        self, dataset: MetaDataset, aspect: AspectSpec, items: Sequence[MetaItem], progress: Advance | None = None
    ) -> dict[str, Judgment]:
        # the dataset's own Task, not a catalog lookup: benchmarks carry tasks of their own
        task_aspect = dataset.task.aspect(aspect.judge_aspect)
        requests = [
            JudgeRequest(task=dataset.task, aspect=task_aspect, inputs=item.inputs, output=item.output, id=item.id)
            for item in items
        ]
        results: dict[str, Judgment] = {}
        for evaluation, item in zip(self._judge.score(requests, progress=progress), items, strict=True):
            if getattr(evaluation, "call_failure", None):
                continue  # the model was unreachable: not stored, tried again next run
            score = evaluation.score
            detail = {"errors": len(evaluation.errors), "spans": error_spans(evaluation)}
            if evaluation.probabilities is not None:
                detail |= probability_detail(evaluation)
            if self.score_kind == "expected" and evaluation.probabilities is not None:
                score = evaluation.probabilities.expected_score
                detail |= _expected_detail(evaluation)
            elif self.score_kind == "consensus" and evaluation.consensus is not None:
                score = evaluation.consensus.score
            results[item.id] = Judgment(
                None if score is None else float(score), getattr(evaluation, "unscored_reason", None), detail
            )
        return results

    @property
    def _judge(self) -> Judge:
        """The judge, its model loaded on first use."""
        if self._loaded is None:
            self._loaded = self._prepared.load()
        return self._loaded

    def close(self) -> None:
        close = getattr(self._loaded, "close", None)
        if close:
            close()


def scores_judge(value: str, context: JudgeContext) -> ScoresFileJudge:
    """`scores:<file.jsonl>`."""
    return ScoresFileJudge(Path(value))


def distilled_judge(value: str, context: JudgeContext) -> DistilledJudge:
    """`distilled:<model or adapter>`, with the `--judge-option`s."""
    return DistilledJudge(value, dict(context.options))
