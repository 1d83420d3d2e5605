"""The transformers engine's speed options, in float32 on CPU: the LoRA merged into the base (the
default) and continuous batching write the replies of the plain path (the adapter applied unmerged,
batched `generate`), and each request gets its own result.

The model is a 2-layer Llama with random weights and SmolLM2's tokenizer, the adapter a LoRA with
random non-zero weights on every projection: its replies are long and differ from prompt to prompt,
so any change in the arithmetic that moved a logit past another would show."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.tiny_models import tiny_llama

from spanjudge.inference.backends.base import BackendError, ChatRequest, Completion, SamplingParams
from spanjudge.inference.backends.spec import BackendSpec
from spanjudge.inference.backends.transformers_local import TransformersBackend

pytestmark = pytest.mark.timeout(300)
PROMPTS = [f"Judge summary {n}: the council {'approved' if n % 2 else 'rejected'} plan {n * 7}." for n in range(7)]


@pytest.fixture(scope="module")
def model_and_adapter(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    import torch
    from peft import LoraConfig, get_peft_model

    root = tmp_path_factory.mktemp("speed-options")
    model, _ = tiny_llama(root / "model", initializer_range=0.2)
    lora = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, target_modules="all-linear"))
    for name, parameter in lora.named_parameters():
        if "lora_B" in name:  # PEFT starts B at zero: a LoRA that changes nothing would prove nothing
            torch.nn.init.normal_(parameter, std=0.2)
    lora.save_pretrained(root / "adapter")
    return root / "model", root / "adapter"


def backend(model_and_adapter: tuple[Path, Path], **options: object) -> TransformersBackend:
    model, adapter = model_and_adapter
    spec = BackendSpec(
        kind="transformers", model=str(model), options={"adapter": str(adapter), "dtype": "float32", **options}
    )
    return TransformersBackend(spec)


def replies(engine: TransformersBackend, temperature: float = 0.0) -> list[str]:
    params = SamplingParams(temperature=temperature, max_tokens=24, seed=1)
    delivered: dict[int, object] = {}
    results = engine.generate(
        [ChatRequest.user(prompt, params) for prompt in PROMPTS], lambda i, r: delivered.setdefault(i, r)
    )
    assert all(isinstance(result, Completion) for result in results)
    assert sorted(delivered) == list(range(len(PROMPTS)))  # each result handed over as it finished
    return [result.text for result in results]  # type: ignore[union-attr]


def test_merged_adapter_and_continuous_batching_write_the_plain_replies(
    model_and_adapter: tuple[Path, Path],
) -> None:
    plain = replies(backend(model_and_adapter, merge_adapter=False, batch_size=3))
    base = TransformersBackend(BackendSpec(kind="transformers", model=str(model_and_adapter[0]),
                                           options={"dtype": "float32", "batch_size": 3}))  # fmt: skip
    assert len(set(plain)) == len(PROMPTS) and replies(base) != plain  # the adapter changes the replies

    assert replies(backend(model_and_adapter, batch_size=3)) == plain
    assert replies(backend(model_and_adapter, continuous_batching=True)) == plain


def test_sampled_requests_keep_the_batched_path_under_continuous_batching(
    model_and_adapter: tuple[Path, Path],
) -> None:
    """Continuous batching cannot seed a request: sampled ones (retries, self-consistency) stay reproducible."""
    sampled = replies(backend(model_and_adapter, batch_size=3), temperature=0.9)
    assert replies(backend(model_and_adapter, batch_size=3, continuous_batching=True), temperature=0.9) == sampled


def test_the_default_merges_the_adapter_and_continuous_batching_refuses_a_grammar(
    model_and_adapter: tuple[Path, Path],
) -> None:
    from peft import PeftModel

    assert not isinstance(backend(model_and_adapter).model, PeftModel)
    assert isinstance(backend(model_and_adapter, merge_adapter=False).model, PeftModel)
    with pytest.raises(BackendError, match=r"continuous_batching: it takes no grammar"):
        backend(model_and_adapter, continuous_batching=True, grammar='root ::= "x"')
    with pytest.raises(BackendError, match=r"continuous_batching: it needs the adapter merged into the weights"):
        backend(model_and_adapter, continuous_batching=True, merge_adapter=False)


def test_an_adapter_is_never_merged_into_quantized_weights(model_and_adapter: tuple[Path, Path]) -> None:
    import torch
    from peft import PeftModel
    from transformers import BitsAndBytesConfig

    four_bit = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_compute_dtype=torch.float32)
    assert isinstance(backend(model_and_adapter, quantization_config=four_bit).model, PeftModel)
    with pytest.raises(BackendError, match=r"merge_adapter=true on quantized weights; spanjudge never merges"):
        backend(model_and_adapter, quantization_config=four_bit, merge_adapter=True)


def test_continuous_batching_on_a_cpu_reserves_the_requests_pages_not_the_machines_memory() -> None:
    """transformers sizes its paged cache by default to most of the free memory (10.2 GB peak for one SmolLM2 row
    measured on the 2-core machine); on a CPU it is sized to the requests (1.1 GB peak measured)."""
    from spanjudge.inference.backends.transformers_batching import CPU_BATCH_TOKENS, cpu_paged_cache

    config = cpu_paged_cache([100, 300, 600])  # prompt + room for the reply, each; 256-token pages
    assert config.num_blocks == 1 + 2 + 3 + 1 and config.max_batch_tokens == 1000
    assert cpu_paged_cache([4000, 4000]).max_batch_tokens == CPU_BATCH_TOKENS
