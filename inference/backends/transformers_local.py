"""Hugging Face transformers in this process (CPU or GPU), for when no server is wanted.

`spec.model` is a local folder or a hub id. `spec.options` are `from_pretrained`
arguments of the model (`dtype`, `device_map`, `revision`, ...) plus three of our own:

- `batch_size` (default 8): requests generated together, left-padded;
- `reuse_prefix` (default: on for float32 weights, off for bfloat16/float16 unless asked; a model with
  sliding-window layers, Gemma 3, is never batched after shared prefixes, whose padding its window would count,
  and reuses them only in the probability reading): requests
  whose prompts share a prefix (every output of one input:
  the task, the aspect and the input come first) are batched together, and each batch first reads
  its distinct prefixes once, one row each, into a KV cache (transformers' `DynamicCache`) whose
  rows are then repeated to the members (`batch_select_indices`); whole groups are packed into a
  batch while they fit (`prefix.prefix_batches`). Each row is its prefix, padding, then its own
  tokens, and positions come from the attention mask, so they are those of the row alone. Greedy
  replies are those of the same engine without reuse in float32 (tested; on CUDA too). In half
  precision the prefix, read in a pass of its own, rounds differently, and a near-tie can flip
  (bench/results/reuse_numerics.md), so there it is on only when asked;
- `trust_remote_code` (default False): runs code shipped with the model, so only on request;
- `gguf_file`: load a GGUF file inside the `spec.model` folder; transformers (with the
  `gguf` package) dequantizes it to dense weights;
- `adapter`: a PEFT (LoRA) adapter, a folder or a Hub id, applied on top of the model (the
  distilled judge); a folder's tokenizer, when it has one, is the one used (it is the
  tokenizer it was trained with);
- `merge_adapter` (default: on, unless the weights are quantized): the adapter is merged into the
  base weights once (`merge_and_unload`), so each decoding step runs one matrix product per
  projection instead of three (on a GPU at batch 16 an unmerged LoRA adds about 450 small kernels
  per token at 8B's shape). In float32 the replies are those of the unmerged model (tested); a
  quantized base is never merged (its rounding would change the adapter): `merge_adapter=true` on one
  is refused;
- `dtype` (default auto: the checkpoint's own): on a CPU without native bf16 (`cpu_precision.py`) auto
  loads float32, since a bfloat16 checkpoint would run emulated, several times slower; a half dtype
  written out there is kept, with a warning;
- `continuous_batching` (default off): greedy requests (the judge's first reply; no stop strings, no
  grammar) go through transformers' continuous batching (`init_continuous_batching`: a paged KV
  cache, requests joining and leaving the running batch as they finish, shared prefixes cached),
  each result delivered as it finishes; sampled requests (retries, self-consistency) keep the
  batched `generate` path. In float32 the replies are those of that path (tested); it pays on a GPU,
  where it runs CUDA graphs — on CPU it is slower than `generate`, and its paged cache is sized to the
  requests at hand (transformers' default takes most of the free memory: 10 GB for one row of SmolLM2
  measured, 1.1 GB so). It needs the adapter merged and no grammar, and says so before weights load;
- `decoding` (default `batched`): `drafted` writes greedy replies (the judge's first; no stop strings),
  `batch_size` together (the outputs of one input, in prefix order), with prompt-lookup guesses checked a pass
  at a time, each reply a row of the pass where the model takes masks of ours (`row_cache`), and the output
  layer cut to the prompt's and the judge's vocabulary, every token then checked against the whole output layer
  and the reply rewritten from the first that fails (`transformers_drafted`); the probability reading reuses
  that writing's cache. The replies are greedy decoding's (tested against `batched` and against one reply at a
  time); sampled requests keep the batched path; not with a grammar or continuous batching. Made for a small
  judge on a CPU (docs/research/performance.md);
- `stop_at_repeat` (default off; drafted decoding only): a greedy reply that writes an error block (location
  and explanation) again word for word is cut before it, `Overall score:` is written for the judge, and the
  judge writes its score: a small judge's greedy loop then ends its errors instead of repeating one until its
  tokens run out (`contract.first_repeat`; bench/results/repeated_errors_readings.md);
- `grammar`: a GBNF grammar every reply is held to (constrained decoding), applied by
  xgrammar's logits processor (`xgrammar.contrib.hf.LogitsProcessor`; the optional extra
  `spanjudge[constrained]`). The grammar is compiled once for the tokenizer; each `generate`
  call gets a fresh processor. Its mask comes before the sampling warpers (temperature,
  top-p), so a sampled retry only ever draws allowed tokens.

Otherwise weights load from safetensors only (`use_safetensors=True`): a pickle
checkpoint can run code when it is loaded.

Requests are batched only with others of the same temperature, top_p, max_tokens, seed
and stop strings, because one `generate` call takes one set of them. Temperature 0 is
greedy decoding. The seed is applied with `torch.manual_seed` before each batch, so a
sampled reply (temperature > 0) depends on the batch it lands in: use `batch_size: 1` when
sampled replies must be reproducible one by one. Stop strings end generation in
`generate` itself (`stop_strings=` with the tokenizer: transformers' StopStringCriteria
matches them across token boundaries), and the returned text ends before the stop
string, as servers return it; `finish_reason` is "length" when max_tokens ran out before
an end token or a stop string.
"""

from __future__ import annotations

import copy
import sys
import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from ..chat import encode_chat, turn_end_ids
from ..contract import Evaluation
from ..contract.render import first_repeat
from ..cpu_precision import cpu_judging_dtype
from ..probabilities import ReplyProbabilities
from . import transformers_reader  # read as a module: a test shortens CPU_PREFILL_CHUNK there
from .adapters import adapter_config, tokenizer_source
from .base import (
    Backend,
    BackendError,
    CallFailure,
    CallResult,
    ChatRequest,
    Completion,
    ResultCallback,
    SamplingParams,
)
from .engine import Engine, grammar_option
from .grammar_cache import compiled_grammar
from .prefix import PrefixBatch, prefix_batches
from .server import short
from .spec import BackendSpec
from .transformers_batching import check_continuous_batching, cpu_paged_cache, sampling_groups, takes_continuous
from .transformers_drafted import DraftedReader

if TYPE_CHECKING:
    import xgrammar
    from transformers import BatchEncoding, DynamicCache

DEFAULT_BATCH_SIZE = 8
DECODINGS = ("batched", "drafted")  # option `decoding`
GRAMMAR_INSTALL_HINT = "option 'grammar' needs xgrammar: pip install 'spanjudge[constrained]'"


class TransformersBackend(Backend):
    """AutoModelForCausalLM + the tokenizer's chat template, batched generation."""

    def __init__(self, spec: BackendSpec) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        options = dict(spec.options)
        self.batch_size: int = int(options.pop("batch_size", DEFAULT_BATCH_SIZE))
        reuse_prefix = options.pop("reuse_prefix", None)
        if self.batch_size < 1:
            raise BackendError(f"transformers model {spec.model!r}: batch_size must be at least 1")
        shared: dict[str, Any] = {"trust_remote_code": bool(options.pop("trust_remote_code", False))}
        gguf_file = options.pop("gguf_file", None)
        adapter = options.pop("adapter", None)
        grammar = options.pop("grammar", None)
        merge_adapter = options.pop("merge_adapter", None)
        self.continuous_batching = bool(options.pop("continuous_batching", False))
        self.decoding = str(options.pop("decoding", "batched"))
        if self.decoding not in DECODINGS:
            raise BackendError(
                f"transformers model {spec.model!r}: decoding is one of {', '.join(DECODINGS)}, not {self.decoding!r}"
            )
        if self.decoding == "drafted" and (grammar or self.continuous_batching):
            raise BackendError(
                f"transformers model {spec.model!r}: decoding 'drafted' writes greedy replies over the whole "
                "vocabulary: not with a grammar or continuous_batching"
            )
        self.stop_at_repeat = bool(options.pop("stop_at_repeat", False))
        if self.stop_at_repeat and self.decoding != "drafted":
            raise BackendError(
                f"transformers model {spec.model!r}: stop_at_repeat stops a reply as drafted decoding writes it: "
                "set decoding to drafted"
            )
        if adapter:
            adapter_config(adapter)  # a folder or Hub id without an adapter: one line, before any weights load
        if self.continuous_batching:
            check_continuous_batching(spec.model, bool(adapter), merge_adapter, grammar)
        if gguf_file:
            shared["gguf_file"] = gguf_file
        else:
            options.setdefault("use_safetensors", True)
        self.spec = spec
        self.model_id = spec.model_id
        source = tokenizer_source(adapter, spec.model)
        self.tokenizer = AutoTokenizer.from_pretrained(source, **shared)
        if not self.tokenizer.chat_template:
            raise BackendError(
                f"{spec.model!r} has no chat template; serve it with an OpenAI-compatible server "
                "and use api: completions"
            )
        self.tokenizer.padding_side = "left"  # decoder-only models continue from the right edge
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        if "device_map" not in options and not torch.cuda.is_available():
            options["dtype"], said = cpu_judging_dtype(options.get("dtype", "auto"))  # never emulated bf16 unasked
            if said:
                print(f"transformers model {spec.model}: {said}", file=sys.stderr, flush=True)
        self.model = AutoModelForCausalLM.from_pretrained(spec.model, **shared, **options)
        if adapter:
            from peft import PeftModel

            self.model = PeftModel.from_pretrained(self.model, adapter)
            quantized = getattr(self.model.config, "quantization_config", None) is not None
            if quantized and merge_adapter:
                raise BackendError(
                    f"transformers model {spec.model!r}: merge_adapter=true on quantized weights; spanjudge never "
                    "merges an adapter into them (their rounding would change what it learnt): leave it unset"
                )
            if merge_adapter or (merge_adapter is None and not quantized):
                self.model = self.model.merge_and_unload()
        if self.continuous_batching and not hasattr(self.model, "init_continuous_batching"):
            raise BackendError(
                f"transformers model {spec.model!r}: continuous_batching needs an unquantized model with its adapter "
                "merged (merge_adapter) and no grammar (constrained)"
            )
        self.model.eval()
        # by default only where it is exact: float32 (a half-precision prefix read alone rounds differently)
        weights = next(self.model.parameters()).dtype
        self.reuse_prefix = bool(reuse_prefix) if reuse_prefix is not None else weights == torch.float32
        # a batch after shared prefixes pads between a row's prefix and its own tokens, and a sliding-window layer
        # (Gemma 3's local attention) counts those pads in its window, so the row sees fewer of its own tokens: a
        # Gemma 3 student's logits moved by up to 3.7 before its first changed token (docs/research/performance.md).
        # Such a model is batched without it (its probability reading still reuses prefixes: it pads nothing)
        self._batch_after_prefixes = self.reuse_prefix and transformers_reader.sliding_window(self.model) is None
        if "device_map" not in options and torch.cuda.is_available():
            self.model.to("cuda")
        self._torch = torch
        self._end_ids = _end_token_ids(
            self.model.generation_config.eos_token_id, self.tokenizer.eos_token_id, *turn_end_ids(self.tokenizer)
        )
        self._grammar: xgrammar.CompiledGrammar | None = self._compile_grammar(grammar) if grammar else None
        self._reader: transformers_reader.ProbabilityReader | None = None  # made on first use (`_probability_reader`)

    def _compile_grammar(self, grammar: str) -> xgrammar.CompiledGrammar:
        """The grammar compiled for this tokenizer and the model's full vocabulary (xgrammar)."""
        try:
            import xgrammar
        except ModuleNotFoundError as error:
            if error.name is None or error.name.split(".")[0] != "xgrammar":
                raise
            raise BackendError(f"transformers model {self.spec.model!r}: {GRAMMAR_INSTALL_HINT}") from None
        # the output layer can be larger than the tokenizer (padded vocabularies): masks cover all of it
        vocab_size = self.model.get_output_embeddings().weight.shape[0]
        info = xgrammar.TokenizerInfo.from_huggingface(
            self.tokenizer, vocab_size=vocab_size, stop_token_ids=sorted(self._end_ids)
        )
        try:
            return compiled_grammar(info, grammar)
        except Exception as error:  # a grammar that does not compile is a configuration error
            where = f"transformers model {self.spec.model!r}"
            raise BackendError(f"{where}: the grammar does not compile: {error}") from None

    def generate(self, requests: Sequence[ChatRequest], on_result: ResultCallback | None = None) -> list[CallResult]:
        results: list[CallResult | None] = [None] * len(requests)
        for group in sampling_groups(requests):
            if self.continuous_batching and takes_continuous(requests[group[0]].params):
                self._generate_continuously(requests, group, results, on_result)
                continue
            if self.decoding == "drafted" and takes_continuous(requests[group[0]].params):
                for batch, _, prompts in self._plan(requests, group):
                    calls = [requests[i] for i in batch]
                    for index, written in zip(batch, self._write_drafted(calls, prompts), strict=True):
                        results[index] = written
                        if on_result is not None:
                            on_result(index, written)
                continue
            held: DynamicCache | None = None  # the last batch's prefix cache, for a batch that reads the same prefixes
            for batch, plan, prompts in self._plan(requests, group):
                calls = [requests[i] for i in batch]
                if plan is None:
                    outcome = self._run_batch(calls, partial(self._generate_tokens, calls))
                else:
                    if not plan.same_prefixes:
                        held = None
                    outcome, held = self._run_after_prefixes(calls, prompts, plan, held)
                for index, result in zip(batch, outcome, strict=True):
                    results[index] = result
                    if on_result is not None:
                        on_result(index, result)
        return cast("list[CallResult]", results)  # every batch filled its slots

    def _generate_continuously(
        self,
        requests: Sequence[ChatRequest],
        group: list[int],
        results: list[CallResult | None],
        on_result: ResultCallback | None,
    ) -> None:
        """One group of greedy requests through transformers' continuous batching, each result kept (and
        passed to `on_result`) as soon as its request finishes; a request the manager drops or fails is a
        failed call, so a re-run asks again."""
        from transformers import GenerationConfig

        params = requests[group[0]].params
        config = GenerationConfig(
            max_new_tokens=params.max_tokens,
            do_sample=False,
            eos_token_id=sorted(self._end_ids),
            pad_token_id=self.tokenizer.pad_token_id,
        )
        prompts = {f"spanjudge-{index}": self._prompt_ids(requests[index]) for index in group}
        started = time.perf_counter()

        def finish(index: int, result: CallResult) -> None:
            results[index] = result
            if on_result is not None:
                on_result(index, result)

        try:
            graphs = self.model.device.type == "cuda"  # the warm-up captures CUDA graphs; nothing to capture on CPU
            needed = [len(ids) + params.max_tokens for ids in prompts.values()]
            with self.model.continuous_batching_context_manager(
                generation_config=config,
                block=True,
                warmup=graphs,
                continuous_batching_config=None if graphs else cpu_paged_cache(needed),
            ) as manager:
                for request_id, ids in prompts.items():
                    manager.add_request(ids, request_id=request_id, max_new_tokens=params.max_tokens)
                waiting = set(prompts)
                while waiting:
                    output = manager.get_result(timeout=1)
                    if output is None:
                        if not manager.is_running():
                            break
                        continue
                    if output.request_id not in waiting or not output.is_finished():
                        continue
                    waiting.discard(output.request_id)
                    index = int(output.request_id.rsplit("-", 1)[1])
                    if output.error is not None:
                        finish(index, self._failed([requests[index]], RuntimeError(output.error))[0])
                        continue
                    seconds = time.perf_counter() - started
                    tokens = list(output.generated_tokens)
                    finish(index, self._completion(tokens, len(prompts[output.request_id]), params, seconds))
        except Exception as error:  # e.g. out of memory: the requests not finished fail, the run goes on
            reason = error
        else:
            reason = RuntimeError("continuous batching stopped before this request finished")
        for index in group:
            if results[index] is None:
                finish(index, self._failed([requests[index]], reason)[0])

    def _plan(
        self, requests: Sequence[ChatRequest], group: list[int]
    ) -> list[tuple[list[int], PrefixBatch | None, list[list[int]]]]:
        """The batches of one group of requests (same decoding parameters), each with the prefixes it
        reads first (`prefix.prefix_batches`) and its members' prompt ids (encoded once, here); without
        reuse, the group in order, each prompt read whole (and encoded by `_generate_tokens`)."""
        if not self._batch_after_prefixes:
            return [(group[i : i + self.batch_size], None, []) for i in range(0, len(group), self.batch_size)]
        ids = [self._prompt_ids(requests[index]) for index in group]
        return [
            ([group[i] for i in plan.members], plan, [ids[i] for i in plan.members])
            for plan in prefix_batches(ids, self.batch_size)
        ]

    def _run_after_prefixes(
        self, batch: list[ChatRequest], prompts: list[list[int]], plan: PrefixBatch, held: DynamicCache | None
    ) -> tuple[list[CallResult], DynamicCache | None]:
        """The batch (its prompt ids `prompts`) generated after its prefixes' KV cache (`held` when the
        batch before read the same prefixes, else read now), and that cache for the next batch."""
        if held is None:
            try:
                held = self._read_prefixes(prompts, plan)
            except Exception as error:  # e.g. out of memory: the batch fails, the run goes on
                return self._failed(batch, error), None
        generation = lambda: self._generate_after_prefixes(batch[0].params, prompts, plan, held)  # noqa: E731
        return self._run_batch(batch, generation), held

    def _prompt_ids(self, request: ChatRequest) -> list[int]:
        """The request's chat as token ids; no message's text becomes a control token (`chat.encode_chat`)."""
        return encode_chat(self.tokenizer, [message.model_dump() for message in request.messages])

    def _run_batch(
        self, batch: list[ChatRequest], generation: Callable[[], tuple[list[list[int]], list[int]]]
    ) -> list[CallResult]:
        started = time.perf_counter()
        try:
            rows, prompt_lengths = generation()
        except Exception as error:  # e.g. out of memory: the batch fails, the run goes on
            return self._failed(batch, error)
        seconds = time.perf_counter() - started  # one batch: each request reports the batch's wall time
        return [
            self._completion(tokens, prompt_length, request.params, seconds)
            for tokens, prompt_length, request in zip(rows, prompt_lengths, batch, strict=True)
        ]

    @staticmethod
    def _failed(batch: list[ChatRequest], error: Exception) -> list[CallResult]:
        reason = f"generation failed: {type(error).__name__}: {short(error)}"
        return [CallFailure(reason=reason, kind="crashed", attempts=1) for _ in batch]

    def _generate_tokens(self, batch: list[ChatRequest]) -> tuple[list[list[int]], list[int]]:
        """New token ids of each request (padding included) and each prompt's length."""
        # left-padded to the longest (padding_side "left")
        ids = {"input_ids": [self._prompt_ids(request) for request in batch]}
        encoded = self.tokenizer.pad(ids, padding=True, return_tensors="pt", return_attention_mask=True)
        return self._generate(batch[0].params, encoded.to(self.model.device), None)

    def _read_prefixes(self, prompts: list[list[int]], plan: PrefixBatch) -> DynamicCache:
        """The KV cache of the batch's prefixes, one row each, read in one left-padded forward pass
        (positions from the attention mask, as `generate` counts them)."""
        from transformers import DynamicCache

        torch = self._torch
        firsts = [prompts[plan.run_of_member.index(r)] for r in range(len(plan.runs))]
        prefixes = [prompt[: run.length] for prompt, run in zip(firsts, plan.runs, strict=True)]
        width = max(len(prefix) for prefix in prefixes)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(p)) + p for p in prefixes], device=self.model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prefixes], device=self.model.device)
        cache = DynamicCache(config=self.model.config)
        with torch.inference_mode():
            positions = (mask.cumsum(-1) - 1).clamp(min=0)
            # only the cache is wanted: every position's logits would take prefixes x tokens x vocabulary floats
            # (Gemma 3's 262,144 words: 4 GB a 4,000-token prefix, and the judge ran out of memory on long inputs)
            for begin, end in transformers_reader.prefill_chunks(0, width, self.model.device):
                self.model(
                    input_ids=ids[:, begin:end], attention_mask=mask[:, :end], position_ids=positions[:, begin:end],
                    cache=cache, logits_to_keep=1,
                )  # fmt: skip
        return cache

    def _generate_after_prefixes(
        self, params: SamplingParams, prompts: list[list[int]], plan: PrefixBatch, held: DynamicCache
    ) -> tuple[list[list[int]], list[int]]:
        """As `_generate_tokens`, reading each member's prefix from `held` (a row per prefix, repeated to
        the members): each row is its prefix (left-padded to the longest), padding, then its own tokens."""
        torch = self._torch
        lengths = [plan.runs[r].length for r in plan.run_of_member]
        width = max(run.length for run in plan.runs)
        own = [prompt[length:] for prompt, length in zip(prompts, lengths, strict=True)]
        tail = max(len(tokens) for tokens in own)
        pad = self.tokenizer.pad_token_id
        rows, masks = [], []
        for prompt, length, tokens in zip(prompts, lengths, own, strict=True):
            gap, space = width - length, tail - len(tokens)
            rows.append([pad] * gap + prompt[:length] + [pad] * space + tokens)
            masks.append([0] * gap + [1] * length + [0] * space + [1] * len(tokens))
        cache = copy.deepcopy(held)
        cache.batch_select_indices(torch.tensor(plan.run_of_member, device=self.model.device))
        encoded = {
            "input_ids": torch.tensor(rows, device=self.model.device),
            "attention_mask": torch.tensor(masks, device=self.model.device),
        }
        return self._generate(params, encoded, cache)

    def _generate(
        self, params: SamplingParams, encoded: BatchEncoding, cache: DynamicCache | None
    ) -> tuple[list[list[int]], list[int]]:
        """`model.generate` on encoded rows (after `cache`, when given): each row's new token ids
        (padding included) and each prompt's length."""
        if params.seed is not None:
            self._torch.manual_seed(params.seed)
        extra: dict[str, Any] = {}
        stops = [stop for stop in params.stop if stop]
        if stops:  # generation ends at a stop string instead of running on to max_tokens
            extra.update(stop_strings=stops, tokenizer=self.tokenizer)
        if self._grammar is not None:
            from xgrammar.contrib.hf import LogitsProcessor

            extra["logits_processor"] = [LogitsProcessor(self._grammar)]  # one per generate() call
        if cache is not None:
            extra["cache"] = cache
        if self.model.device.type == "cpu":  # a long prompt read in pieces (CPU_PREFILL_CHUNK)
            extra["prefill_chunk_size"] = transformers_reader.CPU_PREFILL_CHUNK
        with self._torch.inference_mode():
            output = self.model.generate(
                **encoded,
                max_new_tokens=params.max_tokens,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=sorted(self._end_ids),  # a turn's end (Gemma's <end_of_turn>) ends it too
                **_decoding(params),
                **extra,
            )
        new_tokens = output[:, encoded["input_ids"].shape[1] :].tolist()
        return new_tokens, encoded["attention_mask"].sum(dim=1).tolist()

    def _completion(self, tokens: list[int], prompt_length: int, params: SamplingParams, seconds: float) -> Completion:
        pad = self.tokenizer.pad_token_id
        if pad is not None and pad not in self._end_ids:  # a row stopped (stop string) before others
            while tokens and tokens[-1] == pad:
                tokens = tokens[:-1]
        end = next((i for i, token in enumerate(tokens) if token in self._end_ids), None)
        if end is None:  # no end token: generation ran out of max_tokens
            finish = "length"
        else:
            tokens, finish = tokens[: end + 1], "stop"
        text = self.tokenizer.decode(tokens, skip_special_tokens=True)
        cut = _cut_at_stop(text, params.stop)
        if cut is not None:
            text, finish = cut, "stop"
        return Completion(
            text=text,
            finish_reason=finish,
            model=self.spec.model,
            prompt_tokens=prompt_length,
            completion_tokens=len(tokens),
            seconds=seconds,
        )

    def _write_drafted(self, batch: list[ChatRequest], prompts: list[list[int]]) -> list[CallResult]:
        """Greedy replies written together by the drafted decoder (`transformers_drafted`), each one's cache left
        for the reading of its probabilities; each reports the batch's wall time, as a batch of `generate` does.
        `prompts`: the batch's prompt ids where `_plan` encoded them, else empty (encoded here)."""
        reader = self._probability_reader()
        assert isinstance(reader, DraftedReader)  # decoding 'drafted' makes one
        prompts = prompts or [self._prompt_ids(request) for request in batch]
        started = time.perf_counter()
        try:
            replies = reader.write_all(prompts, batch[0].params.max_tokens)
        except Exception as error:  # e.g. out of memory: the batch fails, the run goes on
            return self._failed(batch, error)
        seconds = time.perf_counter() - started
        return [
            self._completion(tokens, len(prompt), request.params, seconds)
            for tokens, prompt, request in zip(replies, prompts, batch, strict=True)
        ]

    def _probability_reader(self) -> transformers_reader.ProbabilityReader:
        if self._reader is None:
            if self.decoding == "drafted":
                stop_at = first_repeat if self.stop_at_repeat else None
                self._reader = DraftedReader(self.model, self.tokenizer, self._end_ids, stop_at=stop_at)
            else:
                self._reader = transformers_reader.ProbabilityReader(
                    self.model, self.tokenizer, self._end_ids, reuse_prefix=self.reuse_prefix
                )
        return self._reader

    def read_probabilities(self, request: ChatRequest, evaluation: Evaluation) -> ReplyProbabilities:
        """The model's `probabilities.ReplyProbabilities` along `evaluation` (a parsed reply) to
        `request`, whose prompt is encoded exactly as `generate` encodes it."""
        return self._probability_reader().read(self._prompt_ids(request), evaluation)

    def close(self) -> None:
        """Drop the model so its memory can be reused in this process."""
        del self.model
        if self._torch.cuda.is_available():
            self._torch.cuda.empty_cache()


def _decoding(params: SamplingParams) -> dict[str, Any]:
    """generate() arguments: greedy at temperature 0, else temperature + top_p sampling.

    The model's own generation config may carry sampling defaults (temperature, top_k);
    they are overridden so that every backend decodes the same way for the same params.
    """
    if params.temperature == 0:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return {"do_sample": True, "temperature": params.temperature, "top_p": params.top_p, "top_k": None}


def _end_token_ids(*ids: int | list[int] | None) -> frozenset[int]:
    flat: set[int] = set()
    for value in ids:
        if isinstance(value, int):
            flat.add(value)
        elif value:
            flat.update(value)
    return frozenset(flat)


def _cut_at_stop(text: str, stops: tuple[str, ...]) -> str | None:
    """The text before the earliest stop string, or None if none occurs (generate() stopped
    after the token that completed it, so the stop string itself is still in the text)."""
    positions = [position for stop in stops if stop and (position := text.find(stop)) >= 0]
    return text[: min(positions)] if positions else None


ENGINE = Engine(
    name="transformers",
    backend=TransformersBackend,
    summary="Hugging Face transformers in this process (CPU or GPU)",
    packages=("transformers", "torch"),
    install="pip install transformers",
    judge_options=("batch_size", "dtype", "reuse_prefix", "decoding", "stop_at_repeat"),
    constrain=grammar_option,
)
