"""The distilled judge: `Judge.from_pretrained(...)` and `judge.score(requests)`.

    judge = Judge.from_pretrained("runs/train/smollm2_cpu_smoke/adapter")          # base from spanjudge.json
    request = judge.request("qags_xsum", "consistency", {"Article": article}, summary)
    [evaluation] = judge.score([request])
    evaluation.score, [(e.location, e.start, e.end, e.severity) for e in evaluation.errors]

Engines: `transformers` (base + PEFT adapter, or a merged folder; CPU or GPU), `vllm` (the
adapter attached to the base with `enable_lora`, no merge; GPU), `openai` (any
OpenAI-compatible server: vLLM serve with `--lora-modules`, Ollama, llama.cpp). With a local
tokenizer, the `openai` engine renders the chat template here and sends the finished prompt
to the completions API, so every engine reads exactly the text training used.

Decoding is greedy (max 1536 new tokens). A reply that does not parse is retried with
sampling (temperature 0.1, top-p 0.95, new seed, up to 3 times); if none parses the item is
returned unscored, with the replies and the reason, never with an invented score.

Constrained decoding (`constrained=True`, off by default): every reply is held to the output
contract's grammar (`contract.grammar.judge_grammar`: error blocks numbered 1.. in order, at
most 8, severities 1-5, an integer score 0-100, or `No Error`; Location/Explanation lines of at
most 200 characters), so a reply that ends cannot fail to parse. So that it ends before
`max_new_tokens`, fewer error blocks are allowed when the longest 8 would not fit
(`contract.grammar.errors_within`: 1 at 160 tokens, 2 at 320, all 8 from 1,198). llama.cpp reads it as GBNF
(`grammar`), vLLM through its structured outputs, transformers through xgrammar's logits
processor (`pip install 'spanjudge[constrained]'`). Locations are still the model's quotes:
anchoring counts those not found in the output. A reply still cut by `max_new_tokens` (text
of under 3 characters per token) is unparseable and retried as before.

Decisions (`decisions.py`): a rule stored with the judge (its spanjudge.json's `decisions`, fitted on a dev
split) or given as options decides from the judge's probabilities when to say "No Error" and which written
errors to keep; the written errors stay beside (`JudgedEvaluation.written_errors`). `written=True` applies none.

Context policy: when the prompt would not leave `max_new_tokens` of room in the model's
context, the task inputs (the source documents, never the evaluated output) are cut from the
end, longest first, on token boundaries, and the item is flagged with what was cut. If the
output alone does not fit, the item is unscored with that reason.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.catalog import Aspect, Catalog, load_catalog
from spanjudge.core.errors import SpanjudgeError
from spanjudge.core.progress import Advance

from .backends import BackendSpec, make_backend
from .backends.adapters import check_safetensors_adapter
from .backends.base import Backend, CallFailure, CallResult, ChatRequest, Completion, SamplingParams
from .backends.registry import engines_that
from .consensus import consensus
from .contract import Evaluation, ParseFailure, anchor_evaluation, parse_judge
from .contract.json_form import json_reply_to_text
from .decisions import AppliedDecision, DecisionRule, decide_reply, stored_rule
from .judge_conversation import (
    JudgeRequest,
    fit_inputs,
    judge_chat_prompt,
    judge_messages,
)
from .judge_location import adapter_and_model, resolve_prompt_template
from .judge_options import MAX_NEW_TOKENS, JudgeOptions, judge_options
from .judge_setup import JudgeSetup, ProbabilitySource, applied_rule, judge_engine, wire
from .judged import JudgedEvaluation
from .predictions import Predictions, predict
from .probabilities import ReplyProbabilities
from .prompts import PromptTemplate

if TYPE_CHECKING:
    pass

RETRY_SAMPLING = SamplingParams(temperature=0.1, top_p=0.95, max_tokens=MAX_NEW_TOKENS)
# self-consistency's replies: diverse enough to disagree where the judge is unsure (Wang et al. 2023 sample at 0.7)
CONSENSUS_SAMPLING = SamplingParams(temperature=0.7, top_p=0.95, max_tokens=MAX_NEW_TOKENS)


@dataclass
class _Prepared:
    request: JudgeRequest
    prompt: str  # the user turn (chat API) or the finished templated prompt ("prompt" API)
    truncated: str | None


ResultCallback = Callable[[int, "JudgedEvaluation"], None]  # (index of the request, its final result)


class RequestsByName:
    """`request(...)`: a `JudgeRequest` by names from the judge's catalog, sent with its prompt template (a
    `Judge`'s, and the same judge's in worker processes, `judge_workers.JudgeWorkers`)."""

    catalog: Catalog
    prompt_template: PromptTemplate | None  # None: the built-in prompt

    def request(
        self,
        task: str,
        aspect: str,
        inputs: Mapping[str, str],
        output: str,
        *,
        aspect_definition: str | None = None,
        id: str | None = None,
    ) -> JudgeRequest:
        """A request by names from the catalog; an aspect the task lacks needs its definition."""
        task_spec = self.catalog.task(task)
        aspect_spec = Aspect.custom(aspect, aspect_definition) if aspect_definition else task_spec.aspect(aspect)
        return JudgeRequest(
            task=task_spec, aspect=aspect_spec, inputs=dict(inputs), output=output, id=id, template=self.prompt_template
        )


class Judge(RequestsByName):
    """Scores JudgeRequests with a distilled judge behind any backend.

    `Judge(backend, options, catalog, setup)`: the judge's options (`JudgeOptions`: decoding, retries,
    probabilities, samples ...) and how it talks to its engine (`JudgeSetup`); `from_pretrained` works both
    out from a model folder and the engine's declaration."""

    def __init__(
        self,
        backend: Backend,
        options: JudgeOptions | None = None,
        catalog: Catalog | None = None,
        setup: JudgeSetup | None = None,
    ) -> None:
        options, setup = options or JudgeOptions(), setup or JudgeSetup()
        self.backend = backend
        self.options = options
        self.setup = setup
        # replies in the contract's JSON form (a server held to its JSON schema: Ollama) are rendered to
        # the text evaluation before parsing; the raw replies stay as the server sent them
        self._reply_text: Callable[[str], str] = json_reply_to_text if setup.json_replies else str
        # requests go to the backend ordered by prompt, so those sharing a prefix are adjacent (results
        # come back in the caller's order): what lets a server's or engine's prefix cache hit. None is
        # the engine's default (it decides whether it reads the prefix once); only False keeps the order.
        self.reuse_prefix = options.reuse_prefix
        if options.samples < 0:
            raise SpanjudgeError(f"samples must be 0 (none) or more, got {options.samples}")
        self.samples = options.samples
        # where the probabilities come from: the given reader, else the backend (an engine that reads its own)
        self._probability_reader = setup.probability_reader or getattr(backend, "read_probabilities", None)
        if options.probabilities and self._probability_reader is None:
            raise SpanjudgeError(
                f"probabilities are read on the {engines_that('read_probabilities')} engines; "
                f"{type(backend).__name__} does not read them: give probability_reader="
            )
        self.probabilities = options.probabilities
        # the decision rule applied to each reply read with its probabilities (None: the written reply), and
        # why a rule stored with the judge is not applied (an engine that cannot read probabilities)
        self.decisions: DecisionRule | None = setup.decisions
        if self.decisions is not None and not self.probabilities:
            raise SpanjudgeError("a decision rule reads the judge's probabilities: give probabilities=True too")
        self.decisions_skipped = setup.decisions_skipped
        self.decisions_source = setup.decisions_source
        # the judge's own prompt (None: the built-in one); a request that names none is sent with it
        self.prompt_template = setup.prompt_template
        self.tokenizer = setup.tokenizer
        self.send_templated_prompt = setup.templated_prompt
        self.catalog = catalog or load_catalog()
        self.max_context = setup.max_context
        self.max_new_tokens = options.max_new_tokens
        self.retries = options.retries  # fewer on a CPU with a weak judge: each retry costs a whole generation
        self.name = setup.name

    # -- construction -----------------------------------------------------------------------

    @classmethod
    def from_pretrained(
        cls,
        model_or_adapter: str | Path,
        options: JudgeOptions | None = None,
        *,
        catalog: Catalog | None = None,
        probability_reader: ProbabilitySource | None = None,
        **changes: Any,
    ) -> Judge:
        """A judge from an adapter folder (base in its spanjudge.json or adapter_config.json, or given), a merged
        model folder, a hub id, or a served model (`base_url`). `options` (`JudgeOptions`, each option declared
        there) with keyword `changes`; what the engine needs and does is its declaration's (`judge_setup.wire`).
        `probability_reader`: where an engine that cannot read probabilities reads them (a served llama.cpp
        judge: `llamacpp.LlamaCppProbabilities(gguf, tokenizer, lora).read_probabilities`)."""
        return cls.prepare(
            model_or_adapter, options, catalog=catalog, probability_reader=probability_reader, **changes
        ).load()

    @classmethod
    def prepare(
        cls,
        model_or_adapter: str | Path,
        options: JudgeOptions | None = None,
        *,
        catalog: Catalog | None = None,
        probability_reader: ProbabilitySource | None = None,
        **changes: Any,
    ) -> PreparedJudge:
        """`from_pretrained` up to the model: the options checked against the engine, the stored decision
        rule, the prompt template and the tokenizer read; `.load()` loads the model (what a caller that may
        find every judgment already made, such as a re-run of `meta-eval`, puts off until it needs one)."""
        o = judge_options(options, **changes)
        location = str(model_or_adapter)
        stored = stored_rule(Path(location).expanduser())
        rule, skipped = applied_rule(o, stored, probability_reader)
        if rule is not None:
            o = replace(o, probabilities=True)
        declared = judge_engine(o, probability_reader)
        check_safetensors_adapter(Path(location).expanduser())  # a pickled adapter: one line, before anything loads
        template = resolve_prompt_template(location, o.prompt_template)
        adapter, model = adapter_and_model(location, o.base)
        spec, setup = wire(declared, o, location=location, adapter=adapter, model=model)
        setup = replace(
            setup,
            prompt_template=template,
            probability_reader=probability_reader,
            decisions=rule,
            decisions_source="stored" if rule is not None and rule is stored else "given",
            decisions_skipped=skipped,
        )
        return PreparedJudge(spec, o, setup, catalog, cls)

    # -- scoring ---------------------------------------------------------------------------

    def predict(
        self,
        items: Sequence[Mapping[str, Any]],
        *,
        task: str,
        aspect: str,
        aspect_definition: str | None = None,
        batch_size: int | None = None,
    ) -> Predictions:
        """Judge plain items (`{"input": ..., "output": ..., "reference": ...}`, or the task's input
        headers): one `Prediction` per item (score, errors with offsets, unscored_reason) and the
        system score; see `predictions` for how items name their texts. `batch_size`: this call's
        batch size on an in-process engine (default: the judge's)."""
        if batch_size is None:
            return predict(self, items, task=task, aspect=aspect, aspect_definition=aspect_definition)
        chosen = self.backend.batch_size
        if chosen is None or batch_size < 1:
            raise SpanjudgeError(
                f"batch_size={batch_size}: a positive batch size, for an engine that batches in this process "
                "(transformers; a server batches its own requests: see concurrency)"
            )
        self.backend.batch_size = batch_size
        try:
            return predict(self, items, task=task, aspect=aspect, aspect_definition=aspect_definition)
        finally:
            self.backend.batch_size = chosen

    def score(
        self,
        requests: Sequence[JudgeRequest],
        progress: Advance | None = None,
        on_result: ResultCallback | None = None,
    ) -> list[JudgedEvaluation]:
        """One JudgedEvaluation per request, in order; never raises for a model's reply.

        `on_result(index, evaluation)` is called as soon as each request's result is final
        (while others still wait for their batch or their retries), so a caller can write
        every finished result at once and a killed run loses only what was in flight."""
        results: list[JudgedEvaluation | None] = [None] * len(requests)

        def settle(index: int, result: JudgedEvaluation) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        prepared: dict[int, _Prepared] = {}
        for index, request in enumerate(requests):
            outcome = self._prepare(request)
            if isinstance(outcome, JudgedEvaluation):
                settle(index, outcome)
                if progress:
                    progress(1)
            else:
                prepared[index] = outcome
        held: dict[int, JudgedEvaluation] = {}  # scored, waiting for their sampled replies (samples=N)
        final = settle

        def settle_after_samples(index: int, result: JudgedEvaluation) -> None:
            if result.scored:
                held[index] = result
            else:
                final(index, result)

        if self.samples:
            settle = settle_after_samples
        replies: dict[int, list[str]] = {index: [] for index in prepared}
        pending = list(prepared)
        greedy = SamplingParams(temperature=0.0, max_tokens=self.max_new_tokens)
        for attempt in range(1 + self.retries):
            if not pending:
                break
            params = (
                greedy
                if attempt == 0
                else RETRY_SAMPLING.model_copy(update={"seed": attempt, "max_tokens": self.max_new_tokens})
            )
            still_pending = self._attempt(prepared, replies, pending, attempt, params, settle)
            if progress:
                progress(len(pending) - len(still_pending))
            pending = still_pending
        if held:
            self._add_consensus(prepared, held, final)
        return [result for result in results if result is not None]

    def _add_consensus(
        self, prepared: Mapping[int, _Prepared], held: Mapping[int, JudgedEvaluation], settle: ResultCallback
    ) -> None:
        """N sampled replies for every held (scored) result, merged into its `consensus`; each result is settled
        as soon as its N replies are in (a killed run keeps those). A result whose sampled calls did not all
        reach the model is settled as a failed call, so a re-run asks again rather than keep a consensus of
        fewer replies."""
        order = self._in_prefix_order(prepared, sorted(held))
        calls = [
            ChatRequest.user(
                prepared[index].prompt,
                CONSENSUS_SAMPLING.model_copy(update={"seed": k, "max_tokens": self.max_new_tokens}),
            )
            for index in order
            for k in range(1, self.samples + 1)
        ]
        arrived: dict[int, dict[int, CallResult]] = {index: {} for index in order}
        lock = threading.Lock()  # a backend may deliver results from a worker thread

        def handle(position: int, result: CallResult) -> None:
            index, k = order[position // self.samples], position % self.samples
            with lock:
                if k in arrived[index]:
                    return
                arrived[index][k] = result
                if len(arrived[index]) == self.samples:
                    replies = [arrived[index][j] for j in range(self.samples)]
                    settle(index, self._merge_samples(prepared[index], held[index], replies))

        for position, result in enumerate(self.backend.generate(calls, handle)):
            handle(position, result)  # a no-op unless the backend skipped on_result for it

    def _merge_samples(
        self, item: _Prepared, result: JudgedEvaluation, replies: Sequence[CallResult]
    ) -> JudgedEvaluation:
        """`result` with the consensus of its N sampled `replies` (a failed call, if any of them failed)."""
        failure = next((r for r in replies if isinstance(r, CallFailure)), None)
        if failure is not None:
            return _unscored(item, result.raw_replies, result.attempts, call_failure=failure.reason)
        evaluations: list[Evaluation | None] = []
        for reply in replies:
            assert isinstance(reply, Completion)  # failures were settled above
            parsed = parse_judge(self._reply_text(reply.text))
            if isinstance(parsed, ParseFailure):
                evaluations.append(None)  # a reply that marked nothing
            else:
                evaluations.append(anchor_evaluation(parsed, item.request.output))
        return result.model_copy(update={"consensus": consensus(evaluations, self.samples)})

    def _attempt(
        self,
        prepared: Mapping[int, _Prepared],
        replies: Mapping[int, list[str]],
        pending: list[int],
        attempt: int,
        params: SamplingParams,
        settle: ResultCallback,
    ) -> list[int]:
        """One try for every pending request; settles the final ones as they arrive and
        returns those to try again."""
        pending = self._in_prefix_order(prepared, pending)
        calls = [ChatRequest.user(prepared[index].prompt, params) for index in pending]
        again: list[int] = []
        handled: set[int] = set()
        lock = threading.Lock()  # a backend may deliver results from a worker thread

        def handle(position: int, result: CallResult) -> None:
            with lock:
                if position in handled:
                    return
                handled.add(position)
                index = pending[position]
                outcome = self._settle_reply(prepared[index], replies[index], result, attempt)
                if outcome is None:
                    again.append(index)
                else:
                    settle(index, outcome)

        for position, result in enumerate(self.backend.generate(calls, handle)):
            handle(position, result)  # a no-op unless the backend skipped on_result for it
        return sorted(again)

    def _in_prefix_order(self, prepared: Mapping[int, _Prepared], indices: list[int]) -> list[int]:
        """`indices` ordered by their prompts (those sharing a prefix adjacent), or as given without reuse."""
        return indices if self.reuse_prefix is False else sorted(indices, key=lambda index: prepared[index].prompt)

    def _settle_reply(
        self, item: _Prepared, replies: list[str], result: CallResult, attempt: int
    ) -> JudgedEvaluation | None:
        """The final result of one reply, or None when it does not parse and a retry is left."""
        if isinstance(result, CallFailure):
            return _unscored(item, replies, attempt + 1, call_failure=result.reason)
        assert isinstance(result, Completion)
        replies.append(result.text)
        parsed = parse_judge(self._reply_text(result.text))
        if isinstance(parsed, ParseFailure):
            if attempt < self.retries:
                return None
            reason = f"no parseable reply in {attempt + 1} tries (last: {parsed.reason})"
            return _unscored(item, replies, attempt + 1, reason=reason)
        evaluation = anchor_evaluation(parsed, item.request.output)
        judged = JudgedEvaluation(
            errors=evaluation.errors,
            score=evaluation.score,
            id=item.request.id,
            raw_replies=list(replies),
            attempts=attempt + 1,
            truncated=item.truncated,
            probabilities=self._read_probabilities(item, parsed) if self.probabilities else None,
        )
        return self._decided(judged)

    def _decided(self, judged: JudgedEvaluation) -> JudgedEvaluation:
        """`judged` with the decision rule applied (its written errors kept beside), or as it is without one."""
        rule, reading = self.decisions, judged.probabilities
        if rule is None or reading is None:
            return judged
        kept, no_error = decide_reply(reading, rule)
        applied = AppliedDecision(**rule.thresholds(), source=self.decisions_source, kept=kept, no_error=no_error)
        decided = [judged.errors[index] for index in kept]
        return judged.model_copy(update={"errors": decided, "written_errors": judged.errors, "decision": applied})

    def _read_probabilities(self, item: _Prepared, parsed: Evaluation) -> ReplyProbabilities:
        """The judge's probabilities along the written evaluation, read from the same prompt."""
        assert self._probability_reader is not None  # checked when the judge was made
        return self._probability_reader(ChatRequest.user(item.prompt), parsed)

    def _prepare(self, request: JudgeRequest) -> _Prepared | JudgedEvaluation:
        if request.template is None and self.prompt_template is not None:
            request = replace(request, template=self.prompt_template)
        if not request.output.strip():
            return JudgedEvaluation(
                score=None, id=request.id, unscored_reason="the output text is empty: nothing to evaluate"
            )
        fitted, truncated = self._fit_context(request)
        if fitted is None:
            return JudgedEvaluation(score=None, id=request.id, unscored_reason=truncated)
        if self.send_templated_prompt:
            assert self.tokenizer is not None
            return _Prepared(fitted, judge_chat_prompt(self.tokenizer, fitted), truncated)
        return _Prepared(fitted, judge_messages(fitted)[0]["content"], truncated)

    def _fit_context(self, request: JudgeRequest) -> tuple[JudgeRequest | None, str | None]:
        """The request cut to fit the context (inputs only, longest first: `fit_inputs`), and a note of the cut."""
        if self.tokenizer is None or self.max_context is None:
            return request, None
        budget = self.max_context - self.max_new_tokens
        fitted = fit_inputs(self.tokenizer, request, budget)
        if fitted.request is None:
            return None, (
                f"the prompt needs {fitted.needed} tokens but the context leaves {budget} "
                f"({self.max_context} minus {self.max_new_tokens} for the reply) even with the inputs cut"
            )
        return fitted.request, fitted.cut and f"inputs cut to fit the context ({fitted.cut})"

    def close(self) -> None:
        self.backend.close()


def _unscored(
    item: _Prepared, replies: list[str], attempts: int, *, reason: str | None = None, call_failure: str | None = None
) -> JudgedEvaluation:
    return JudgedEvaluation(
        score=None,
        id=item.request.id,
        unscored_reason=reason or f"model call failed: {call_failure}",
        call_failure=call_failure,
        raw_replies=list(replies),
        attempts=attempts,
        truncated=item.truncated,
    )


@dataclass(frozen=True)
class PreparedJudge:
    """A judge whose options, engine and files are checked and read, its model not yet loaded (`Judge.prepare`)."""

    spec: BackendSpec
    options: JudgeOptions
    setup: JudgeSetup
    catalog: Catalog | None = None
    judge_class: type[Judge] = Judge  # what `prepare` was called on

    def load(self) -> Judge:
        return self.judge_class(make_backend(self.spec), self.options, self.catalog, self.setup)
