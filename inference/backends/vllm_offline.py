"""vLLM's offline engine in this process: the fastest way to run a whole batch on a GPU.

`LLM(model=spec.model, **spec.options)` loads the model (options are vLLM engine
arguments: `tensor_parallel_size`, `max_model_len`, `gpu_memory_utilization`, `dtype`,
`quantization` ...), and one `LLM.generate` call runs every request, each given as its token ids
(`{"prompt_token_ids": ...}`, the chat template applied by `chat.encode_chat`, so no message's text
becomes a control token: `LLM.chat` would parse control-token spellings in it); vLLM schedules
them itself (continuous batching), so there is no batch size to tune here. `vllm` is an
optional, GPU-only extra and is imported only when this backend is made.

Option `adapter` (ours): a PEFT LoRA adapter served on top of the base model without
merging (`enable_lora`, one `LoRARequest` for every request): the distilled judge. It is a
folder or a Hub id: its config is read with `peft.PeftConfig.from_pretrained` (its rank
sets `max_lora_rank`), and a Hub adapter is fetched with `huggingface_hub.snapshot_download`
so that vLLM gets a local folder, as vLLM's LoRA guide does. With `HF_HUB_OFFLINE=1` only
adapters already in the Hub cache work; another is one line saying so.

Option `reuse_prefix` (ours, default on, as vLLM's own): vLLM's automatic prefix caching
(`enable_prefix_caching`), so the outputs of one input, which the judge sends together, read
their shared prompt prefix once.

Option `grammar` (ours): a GBNF grammar every reply is held to, through vLLM's structured
outputs (`SamplingParams(structured_outputs=StructuredOutputsParams(grammar=...))`: vLLM
>= 0.11; 0.12 removed the older `guided_decoding`); its default backend, xgrammar, reads GBNF.

The judge's probabilities (`probabilities=True`) are read on the same engine, the prompt encoded as
`generate` encodes it: by default from one-token generations at each point an alternative needs, whose
top-K log-probabilities (`max_logprobs`, vLLM's default 20) vLLM computes after the prompt its prefix
cache holds (`VLLMCachedProbabilityReader`, below: tokens outside the top K are bounded, and
counted); with the option `exact_probabilities: true`, from prompt log-probabilities, every alternative
a whole prompt read again (`VLLMProbabilityReader`: exact, and slower on long prompts).
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ..chat import encode_chat, judge_end_ids
from ..contract import Evaluation
from ..probabilities import ChoiceReader, ReplyProbabilities, log_sum_exp
from .adapters import lora_adapter
from .base import Backend, BackendError, CallFailure, CallResult, ChatRequest, Completion, ResultCallback
from .engine import Engine, grammar_option
from .server import short
from .spec import BackendSpec

if TYPE_CHECKING:
    import vllm
    from transformers import PreTrainedTokenizerBase
    from vllm.logprobs import Logprob
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import StructuredOutputsParams

INSTALL_HINT = "vLLM is not installed: pip install 'spanjudge[vllm]' (needs a CUDA GPU)"
STRUCTURED_OUTPUTS_HINT = "option 'grammar' needs vLLM's StructuredOutputsParams (vLLM >= 0.11): pip install -U vllm"


class VLLMBackend(Backend):
    """All requests of a `generate` call in one `LLM.chat` batch."""

    def __init__(self, spec: BackendSpec) -> None:
        try:
            import vllm
        except ModuleNotFoundError as error:
            if error.name != "vllm":
                raise  # vLLM is there but broken: its own error says more than a hint
            raise BackendError(INSTALL_HINT) from None
        self.spec = spec
        self.model_id = spec.model_id
        self._vllm = vllm
        options = dict(spec.options)
        adapter = options.pop("adapter", None)
        # vLLM's own default: its replies already depend on what runs beside them (continuous batching)
        options.setdefault("enable_prefix_caching", options.pop("reuse_prefix", None) is not False)
        self._grammar: str | None = options.pop("grammar", None)
        self._exact_probabilities = bool(options.pop("exact_probabilities", False))
        self._top_logprobs = int(options.get("max_logprobs", 20))  # vLLM's own default and cap
        if self._grammar:
            _structured_outputs(self._grammar)  # fail now, not at the first batch, on an old vLLM
        self._lora: LoRARequest | None = None
        if adapter:
            from vllm.lora.request import LoRARequest

            folder, rank = lora_adapter(str(adapter))
            options.update(enable_lora=True, max_lora_rank=max(rank, options.get("max_lora_rank", 16)))
            self._lora = LoRARequest("judge", 1, folder)
        self._llm: vllm.LLM = vllm.LLM(model=spec.model, **options)
        self._reader: ChoiceReader | None = None  # the probability reader, made on first use

    def generate(self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None) -> list[CallResult]:
        if not requests:
            return []
        prompts = [{"prompt_token_ids": self._prompt_ids(request)} for request in requests]
        sampling = [self._sampling_params(request) for request in requests]
        started = time.perf_counter()
        try:
            outputs = self._llm.generate(prompts, sampling_params=sampling, use_tqdm=False, lora_request=self._lora)
        except Exception as error:  # an engine error fails the batch, not the run
            reason = f"vLLM engine error: {type(error).__name__}: {short(error)}"
            results: list[CallResult] = [CallFailure(reason=reason, kind="crashed", attempts=1) for _ in requests]
        else:
            seconds = time.perf_counter() - started  # one batch: each request reports the batch's wall time
            results = [self._completion(output, seconds) for output in outputs]
        if on_result is not None:
            for index, result in enumerate(results):
                on_result(index, result)
        return results

    def _prompt_ids(self, request: ChatRequest) -> list[int]:
        """The request's chat as token ids; no message's text becomes a control token (`chat.encode_chat`)."""

        return encode_chat(self._llm.get_tokenizer(), [message.model_dump() for message in request.messages])

    def _sampling_params(self, request: ChatRequest) -> vllm.SamplingParams:
        params = request.params
        extra: dict[str, Any] = {}
        if self._grammar:  # a fresh one per request: vLLM annotates it while validating
            extra["structured_outputs"] = _structured_outputs(self._grammar)
        return self._vllm.SamplingParams(
            temperature=params.temperature,
            top_p=params.top_p,
            max_tokens=params.max_tokens,
            seed=params.seed,
            stop=list(params.stop) or None,
            **extra,
        )

    def _completion(self, output: vllm.RequestOutput, seconds: float) -> Completion:
        """A `vllm.RequestOutput` (one sample) as a Completion."""
        sample = output.outputs[0]
        return Completion(
            text=sample.text,
            finish_reason=sample.finish_reason,
            model=self.spec.model,
            prompt_tokens=len(output.prompt_token_ids) if output.prompt_token_ids is not None else None,
            completion_tokens=len(sample.token_ids),
            seconds=seconds,
        )

    def read_probabilities(self, request: ChatRequest, evaluation: Evaluation) -> ReplyProbabilities:
        """The model's `probabilities.ReplyProbabilities` along `evaluation` (a parsed reply) to `request`."""

        tokenizer = self._llm.get_tokenizer()
        if self._reader is None:
            end_ids = judge_end_ids(tokenizer)
            if self._exact_probabilities:
                self._reader = VLLMProbabilityReader(self._llm, tokenizer, end_ids, lora_request=self._lora)
            else:
                self._reader = VLLMCachedProbabilityReader(
                    self._llm, tokenizer, end_ids, lora_request=self._lora, top_logprobs=self._top_logprobs
                )
        return self._reader.read(self._prompt_ids(request), evaluation)

    def close(self) -> None:
        """Drop the engine so its GPU memory can be reused in this process."""
        self._llm = None
        gc.collect()


def _structured_outputs(grammar: str) -> StructuredOutputsParams:
    """vLLM's `StructuredOutputsParams` holding replies to `grammar`."""
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:  # older vLLM had GuidedDecodingParams instead (removed in 0.12)
        raise BackendError(STRUCTURED_OUTPUTS_HINT) from None
    return StructuredOutputsParams(grammar=grammar)


class VLLMProbabilityReader(ChoiceReader):
    """Reads `ReplyProbabilities` with vLLM's offline engine (`vllm.LLM`), through its prompt log-probabilities:
    each alternative is one prompt of token ids (prompt + reply up to where it parts + the alternative, and,
    where the choice ends the reply, one of the turn's end tokens after it), sent with
    `SamplingParams(max_tokens=1, prompt_logprobs=0)`, which returns the log-probability of every prompt token
    under the model (the raw logits: no sampler touches them). All of an evaluation's alternatives go in one
    `LLM.generate` call, which vLLM batches itself. `lora_request`: the judge's adapter, as generation has it.

    Not run against vLLM here: vLLM needs a CUDA GPU and could not be installed on the machines this was
    written on (tested on a stand-in with `LLM.generate`'s interface, against the brute-force computation)."""

    def __init__(
        self,
        llm: vllm.LLM,
        tokenizer: PreTrainedTokenizerBase,
        end_ids: Collection[int],
        max_errors: int = 8,
        lora_request: LoRARequest | None = None,
    ) -> None:
        super().__init__(tokenizer, end_ids, max_errors)
        self.llm = llm
        self.lora_request = lora_request

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        from vllm import SamplingParams

        # (choice, alternative, the prompt's tokens, its first scored position): with several end tokens, one
        # prompt per end token; their probabilities add up (log-sum-exp) to the alternative's
        prompts: list[tuple[int, int, list[int], int]] = []
        # a branch whose one tail is the written token (a location's, `probabilities.ChoiceReader.read`) is read
        # from one prompt of the whole written reply, whose prompt log-probabilities hold every written token's
        written = [
            i for i, ((start, tails), end) in enumerate(zip(branches, ends, strict=True))
            if not end and tails == [[reply[start]]]
        ]  # fmt: skip
        whole = [*prompt_ids, *reply]
        if written:
            prompts.append((-1, 0, whole, len(prompt_ids)))
        for index, ((start, tails), end) in enumerate(zip(branches, ends, strict=True)):
            if index in written:
                continue
            before = [*prompt_ids, *reply[:start]]
            for alternative, tail in enumerate(tails):
                for end_id in self.end_ids if end else [None]:
                    ids = [*before, *tail, *([] if end_id is None else [end_id])]
                    prompts.append((index, alternative, ids, len(before)))
        outputs = self.llm.generate(
            [{"prompt_token_ids": ids} for _, _, ids, _ in prompts],
            SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0),
            use_tqdm=False,
            lora_request=self.lora_request,
        )
        parts: list[list[list[float]]] = [[[] for _ in tails] for _, tails in branches]
        for (index, alternative, ids, first), output in zip(prompts, outputs, strict=True):
            logprobs = output.prompt_logprobs  # one entry per prompt token, None for the first
            if index < 0:  # the whole written reply
                for i in written:
                    at = len(prompt_ids) + branches[i][0]
                    parts[i][0].append(_logprob(logprobs[at], whole[at]))
                continue
            parts[index][alternative].append(sum(_logprob(logprobs[j], ids[j]) for j in range(first, len(ids))))
        return [[log_sum_exp(values) for values in choice] for choice in parts]


class VLLMCachedProbabilityReader(ChoiceReader):
    """Reads `ReplyProbabilities` with vLLM's offline engine without reading the prompt again for each
    alternative: one generation request per point where an alternative needs its next token's probability
    (prompt + reply up to where the alternatives part + the alternative's tokens so far), each asking for
    the `top_logprobs` most likely next tokens (`SamplingParams(max_tokens=1, logprobs=K)`). Those requests
    share the judge's prompt and reply, which vLLM's prefix cache holds (`enable_prefix_caching`, on by
    default), so each computes only its last few tokens; `prompt_logprobs` would turn the cache off for
    them (vLLM PR #13949).

    **The approximation.** vLLM returns the top K log-probabilities of each next token (the raw logits'
    log-softmax, before any sampler: exact for those K). A token outside them has at most the smaller of
    the K-th probability and the mass the K leave (1 − Σ top K), and that bound is what it is given; it is
    counted in `approximated`. A trained judge puts nearly all the mass of its decisions on a few tokens,
    so only improbable alternatives are bounded, and a choice's distribution moves by at most the mass
    outside the top K (tested against the exact transformers reader on the trained smoke judge). Ask for
    more with the engine's `max_logprobs` (vLLM's default and the cap on K: 20).

    Not run against vLLM here (it needs a CUDA GPU): tested on a stand-in with `LLM.generate`'s interface
    that answers from a transformers model."""

    def __init__(
        self,
        llm: vllm.LLM,
        tokenizer: PreTrainedTokenizerBase,
        end_ids: Collection[int],
        max_errors: int = 8,
        lora_request: LoRARequest | None = None,
        top_logprobs: int = 20,
    ) -> None:
        super().__init__(tokenizer, end_ids, max_errors)
        self.llm = llm
        self.lora_request = lora_request
        self.top_logprobs = top_logprobs
        self.requests = 0  # requests sent, over this reader's life
        self.approximated = 0  # log-probabilities bounded because they were outside the top K

    def _choice_log_probs(
        self, prompt_ids: Sequence[int], reply: Sequence[int], branches: list[tuple[int, list[list[int]]]],
        ends: list[bool],
    ) -> list[list[float]]:  # fmt: skip
        from vllm import SamplingParams

        # every point an alternative needs the next token's distribution at, once
        points: dict[tuple[int, ...], None] = {}
        for (start, tails), end in zip(branches, ends, strict=True):
            before = (*prompt_ids, *reply[:start])
            for tail in tails:
                for j in range(len(tail) + (1 if end else 0)):
                    point = (*before, *tail[:j])
                    points[point] = None
        order = list(points)
        outputs = self.llm.generate(
            [{"prompt_token_ids": list(ids)} for ids in order],
            SamplingParams(max_tokens=1, temperature=0.0, logprobs=self.top_logprobs),
            use_tqdm=False,
            lora_request=self.lora_request,
        )
        self.requests += len(order)
        top = {ids: _top_logprobs(output) for ids, output in zip(order, outputs, strict=True)}
        out: list[list[float]] = []
        for (start, tails), end in zip(branches, ends, strict=True):
            before = (*prompt_ids, *reply[:start])
            totals = []
            for tail in tails:
                total = sum(self._log_p(top[tuple([*before, *tail[:j]])], tail[j]) for j in range(len(tail)))
                if end:
                    last = top[tuple([*before, *tail])]
                    total += log_sum_exp([self._log_p(last, end_id) for end_id in self.end_ids])
                totals.append(total)
            out.append(totals)
        return out

    def _log_p(self, top: dict[int, float], token: int) -> float:
        """`token`'s log-probability from one point's top K, or its bound when it is not among them."""
        if token in top:
            return top[token]
        self.approximated += 1
        return _outside_top_bound(top)


def _top_logprobs(output: vllm.RequestOutput) -> dict[int, float]:
    """{token: log-probability} of a one-token generation's top K (vLLM: `outputs[0].logprobs[0]`)."""
    top = output.outputs[0].logprobs[0]
    return {int(token): float(getattr(value, "logprob", value)) for token, value in top.items()}


def _outside_top_bound(top: dict[int, float]) -> float:
    """The most log-probability a token outside these top K can have: min(the K-th's, log of what they leave)."""
    kth = min(top.values())
    left = 1.0 - sum(math.exp(value) for value in top.values())
    return min(kth, math.log(left)) if left > 0 else kth


def _logprob(position: Mapping[int, Logprob | float], token: int) -> float:
    """The log-probability vLLM reports for `token` at one prompt position (a `Logprob`, or a bare float)."""
    value = position[token]
    return float(getattr(value, "logprob", value))


ENGINE = Engine(
    name="vllm",
    backend=VLLMBackend,
    summary="vLLM's offline batch engine in this process (GPU)",
    packages=("vllm",),
    install="pip install 'spanjudge[vllm]' (needs a CUDA GPU)",
    extra="vllm",
    judge_options=("reuse_prefix",),
    constrain=grammar_option,
)
