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
cache holds (`probabilities.VLLMCachedProbabilityReader`: tokens outside the top K are bounded, and
counted); with the option `exact_probabilities: true`, from prompt log-probabilities, every alternative
a whole prompt read again (`probabilities.VLLMProbabilityReader`: exact, and slower on long prompts).
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any

from ..chat import encode_chat, judge_end_ids
from ..probabilities import VLLMCachedProbabilityReader, VLLMProbabilityReader
from .adapters import lora_adapter
from .base import Backend, BackendError, CallFailure, CallResult, ChatRequest, Completion, ResultCallback
from .engine import Engine, grammar_option
from .server import short
from .spec import BackendSpec

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
        self._lora: Any = None
        if adapter:
            from vllm.lora.request import LoRARequest

            folder, rank = lora_adapter(str(adapter))
            options.update(enable_lora=True, max_lora_rank=max(rank, options.get("max_lora_rank", 16)))
            self._lora = LoRARequest("judge", 1, folder)
        self._llm: Any = vllm.LLM(model=spec.model, **options)
        self._reader: Any = None  # the probability reader, made on first use

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
            results: list[CallResult] = [CallFailure(reason=reason, kind="other", attempts=1) for _ in requests]
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

    def _sampling_params(self, request: ChatRequest) -> Any:
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

    def _completion(self, output: Any, seconds: float) -> Completion:
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

    def read_probabilities(self, request: ChatRequest, evaluation: Any) -> Any:
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


def _structured_outputs(grammar: str) -> Any:
    """vLLM's `StructuredOutputsParams` holding replies to `grammar`."""
    try:
        from vllm.sampling_params import StructuredOutputsParams
    except ImportError:  # older vLLM had GuidedDecodingParams instead (removed in 0.12)
        raise BackendError(STRUCTURED_OUTPUTS_HINT) from None
    return StructuredOutputsParams(grammar=grammar)


ENGINE = Engine(
    name="vllm",
    backend=VLLMBackend,
    summary="vLLM's offline batch engine in this process (GPU)",
    packages=("vllm",),
    install="pip install 'spanjudge[vllm]' (needs a CUDA GPU)",
    extra="vllm",
    judge_options=("reuse_prefix",),
    read_probabilities=True,
    constrain=grammar_option,
)
