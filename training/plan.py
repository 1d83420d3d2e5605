"""`spanjudge train --config C --plan --gpu NAME`: will this run fit that GPU, and how long is an epoch?

Everything is computed from the base model's config.json built on the meta device (no weights,
no network: the shipped recipes' architectures are in configs/models/) and the training
config. The formulas, so a reader can check every number:

- **weights**: every parameter in the configured dtype; with `quantization: 4bit` the Linear
  weights of the decoder layers are NF4 (0.5 byte) plus double-quantised block constants
  (8-bit absmax per 64 weights and an fp32 constant per 256 blocks: 0.127 bit), while
  embeddings, the LM head and the norms stay in the compute dtype (bitsandbytes quantizes
  Linear layers only, and transformers leaves `lm_head` out); 8bit is one byte per weight.
- **LoRA**: r·(in + out) parameters per targeted Linear, kept in fp32 by PEFT, plus their fp32
  gradients and AdamW's two fp32 moments: 16 bytes a parameter.
- **full fine-tuning** (`training.finetuning: full`): every parameter with its gradient and AdamW's two
  moments, all in the weights' dtype (float32 under `auto`): 4 × 4 = 16 bytes a parameter; no LoRA.
- **activations**, for the configured per-device batch at `data.max_length` (the worst case:
  a batch padded to the longest example): per token and decoder layer, in a 2-byte compute
  dtype, 22·hidden + 8·intermediate bytes — two RMSNorms (their fp32 input and bf16 output:
  6·hidden each), the attention's q, k, v and output kept by SDPA (k and v repeated to every
  head: 8·hidden) and the o_proj input (2·hidden), the MLP's gate, up, SiLU and product
  (8·intermediate). With `training.liger_kernel` 14·hidden + 4·intermediate: Liger's RMSNorm
  keeps its bf16 input and one fp32 scale per row (2·hidden each, no fp32 copy) and its SwiGLU
  keeps gate and up only and recomputes the SiLU and product in the backward (4·intermediate).
  With gradient checkpointing each layer keeps only its input (2·hidden) and one layer is
  recomputed at a time. The LM head is TRL's fused one (trl/kernels/chunked_logprob.py): it never
  builds the logits, only one tile of 4,096 tokens × 32,768 vocabulary entries in the compute dtype
  at a time, and keeps the hidden states (2·hidden per token) and their fp32 gradient (4·hidden).
- **overhead**: 1 GiB (CUDA context, cuBLAS workspace) plus 10 % of the rest for the
  allocator's fragmentation — a stated allowance, not a measurement.
- **time per epoch** at a stated MFU: model FLOPs per token = 4·N (the frozen base's forward
  and its backward through the activations; no weight gradients: the base is frozen), with N
  the Linear parameters including the LM head, + 6·N_LoRA (LoRA's forward, backward and
  weight gradients) + 6·length·hidden·layers (causal attention's scores and context, forward
  and backward, at the mean example length); full fine-tuning computes every weight's gradient
  too: 6·N, no LoRA term. Recomputation under checkpointing is not model
  FLOPs: the MFU you state has to absorb it. bench/gpu/run.py measures MFU with the same
  formula.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.configio import configs_dir
from spanjudge.core.errors import InputError, SpanjudgeError
from spanjudge.inference.cpu_precision import cpu_bf16
from spanjudge.inference.hf_models import resolve_model_source

from .config import TrainConfig
from .precision import TrainingPrecision, training_precision

if TYPE_CHECKING:
    from transformers import PretrainedConfig

GIB = 1024**3
OVERHEAD_FIXED = 1 * GIB
OVERHEAD_SHARE = 0.10
NF4_BYTES = 0.5 + 0.127 / 8
LORA_BYTES = 4 + 4 + 8  # fp32 weight, fp32 gradient, AdamW's two fp32 moments
LM_HEAD_TILE = (4096, 32768)  # TRL's fused LM head's tile: tokens × vocabulary entries (TOKEN_CHUNK_SIZE, chunk)
DEFAULT_MFU = 0.40  # the goal (issue #48), used only where no GPU row measured the setup
MEASURED = Path(__file__).resolve().parents[1] / "bench" / "results" / "gpu.json"  # a source checkout's
THESIS_EXAMPLES = 37_000  # the thesis's training set (§6)
THESIS_HOURS = 6.0  # its epoch on one A40 with Unsloth (§4.4)


@dataclass(frozen=True)
class Gpu:
    name: str
    memory_gib: float
    bf16_tflops: float  # dense peak (no structured sparsity)
    source: str


GPUS = {
    gpu.name.lower(): gpu
    for gpu in (
        Gpu("A40", 48, 149.7, "NVIDIA A40 datasheet: 48 GB GDDR6; BF16 Tensor Core 149.7 TFLOPS (299.4 sparse)"),
        Gpu("A100-40GB", 40, 312.0, "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS (624 sparse)"),
        Gpu("A100-80GB", 80, 312.0, "NVIDIA A100 datasheet: BF16 Tensor Core 312 TFLOPS (624 sparse)"),
        Gpu("H100", 80, 989.4, "NVIDIA H100 datasheet, SXM5 80 GB: BF16 Tensor Core 1,979 TFLOPS sparse, 989.4 dense"),
        Gpu(
            "H200",
            141,
            989.4,
            "NVIDIA H200 datasheet, SXM 141 GB HBM3e: BF16 Tensor Core 1,979 TFLOPS sparse, 989.4 dense",
        ),
        Gpu("L4", 24, 121.0, "NVIDIA L4 datasheet: 24 GB GDDR6; BF16 Tensor Core 242 TFLOPS sparse, 121 dense"),
        Gpu(
            "RTX4090",
            24,
            165.2,
            "NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): BF16 with FP32 accumulate "
            "165.2 TFLOPS (330.3 sparse)",
        ),
    )
}

# hub ids whose config.json the project ships, so a plan needs no network
SHIPPED_CONFIGS = {
    "meta-llama/Llama-3.1-8B-Instruct": "llama-3.1-8b",
    "meta-llama/Llama-3.1-8B": "llama-3.1-8b",
    "meta-llama/Meta-Llama-3.1-8B-Instruct": "llama-3.1-8b",
}


def find_gpu(name: str) -> Gpu:
    key = name.lower().replace(" ", "").replace("_", "-")
    aliases = {"a100": "a100-80gb", "a100-40": "a100-40gb", "a100-80": "a100-80gb", "4090": "rtx4090"}
    gpu = GPUS.get(aliases.get(key, key)) or GPUS.get(key.replace("-", ""))
    if gpu is None:
        known = ", ".join(g.name for g in GPUS.values())
        raise SpanjudgeError(f"unknown GPU {name!r} for --gpu (known: {known})")
    return gpu


@dataclass(frozen=True)
class ModelShape:
    """What the plan needs from a model, read off its modules on the meta device."""

    hidden: int
    layers: int
    intermediate: int
    vocab: int
    params: int  # every parameter
    layer_linear_params: int  # Linear weights inside the decoder layers (what 4-bit quantizes)
    linear_params: int  # every Linear weight, LM head included: the matmul parameters
    lora_params: int


def model_config(base: str, trust_remote_code: bool = False) -> PretrainedConfig:
    """The base model's config, offline: a local folder, a GGUF, or a hub id the project ships."""
    from transformers import AutoConfig

    source = resolve_model_source(base)
    try:
        if source.kind == "gguf":
            path = Path(source.location)
            return AutoConfig.from_pretrained(str(path.parent), gguf_file=path.name)
        if source.kind == "hub" and base in SHIPPED_CONFIGS:
            return AutoConfig.from_pretrained(str(configs_dir() / "models" / SHIPPED_CONFIGS[base]))
        return AutoConfig.from_pretrained(source.location, trust_remote_code=trust_remote_code)
    except (OSError, ValueError) as exc:
        raise SpanjudgeError(
            f"no config.json for {base} here ({str(exc).splitlines()[0]}); point model.base at a local model "
            f"folder (shipped architectures: {', '.join(sorted(SHIPPED_CONFIGS))})"
        ) from None


def model_shape(
    config: PretrainedConfig, lora_r: int, targets: tuple[str, ...], trust_remote_code: bool = False
) -> ModelShape:
    import torch
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)
    linears = [(name, module) for name, module in model.named_modules() if isinstance(module, torch.nn.Linear)]
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    return ModelShape(
        hidden=text.hidden_size,
        layers=text.num_hidden_layers,
        intermediate=text.intermediate_size,
        vocab=text.vocab_size,
        params=sum(p.numel() for p in model.parameters()),
        layer_linear_params=sum(m.weight.numel() for name, m in linears if ".layers." in f".{name}"),
        linear_params=sum(m.weight.numel() for _, m in linears),
        lora_params=sum(
            lora_r * (m.in_features + m.out_features)
            for name, m in linears
            if any(name == t or name.endswith("." + t) for t in targets)
        ),
    )


@dataclass(frozen=True)
class Line:
    label: str
    bytes: float
    how: str


@dataclass(frozen=True)
class Plan:
    gpu: Gpu
    memory: list[Line]  # the parts, overhead last
    total_bytes: float
    tokens_per_epoch: float
    model_flops_per_token: float
    mfu: float
    hours_per_epoch: float
    assumptions: list[str]
    other_checkpointing_bytes: float  # the decoder layers' activations with checkpointing the other way

    @property
    def fits(self) -> bool:
        return self.total_bytes <= self.gpu.memory_gib * GIB


def gpu_precision(config: TrainConfig) -> TrainingPrecision:
    """The config's precision on the planned GPU (every GPU of the table computes bf16)."""
    training = config.training
    return training_precision(
        config.model.dtype, training.mixed_precision, on_cpu=False, gpu_bf16=True, cpu_bf16=cpu_bf16, full=training.full
    )


WIDTHS = {"float32": 4, "bfloat16": 2, "float16": 2, "auto": 2}


def weight_bytes(shape: ModelShape, dtype: str, quantization: str) -> tuple[float, str]:
    width = WIDTHS[dtype]
    if quantization == "none":
        return shape.params * width, f"{shape.params:,} parameters × {width} bytes ({dtype})"
    per_weight = NF4_BYTES if quantization == "4bit" else 1
    rest = shape.params - shape.layer_linear_params
    how = (
        f"{shape.layer_linear_params:,} layer weights × {per_weight:.4g} bytes ({quantization}) + "
        f"{rest:,} others × {width} bytes"
    )
    return shape.layer_linear_params * per_weight + rest * width, how


def activation_lines(
    shape: ModelShape, tokens: int, checkpointing: bool, width: int, liger: bool = False
) -> list[Line]:
    """The decoder layers' activations and the LM head's, for `tokens` tokens in one batch."""
    per_token = (14 * shape.hidden + 4 * shape.intermediate) if liger else (22 * shape.hidden + 8 * shape.intermediate)
    per_layer = per_token * width / 2
    if checkpointing:
        layers = tokens * (shape.layers * shape.hidden * width + per_layer)
        how = f"{tokens:,} tokens × ({shape.layers} layer inputs + 1 layer recomputed at a time)"
    else:
        layers = tokens * shape.layers * per_layer
        how = f"{tokens:,} tokens × {shape.layers} layers, no checkpointing"
    tile = min(tokens, LM_HEAD_TILE[0]) * min(shape.vocab, LM_HEAD_TILE[1]) * width
    head = tile + tokens * shape.hidden * (width + 4)
    head_how = (
        f"one {min(tokens, LM_HEAD_TILE[0]):,} × {min(shape.vocab, LM_HEAD_TILE[1]):,} tile + {tokens:,} tokens × "
        f"hidden {shape.hidden:,} × {width + 4} bytes (no logits: TRL's fused head)"
    )
    if liger:
        how += ", Liger's RMSNorm and SwiGLU"
    return [Line("activations: decoder layers", layers, how), Line("activations: LM head (loss)", head, head_how)]


def model_flops_per_token(shape: ModelShape, mean_tokens: float, full: bool = False) -> float:
    """4·N + 6·N_LoRA (full fine-tuning: 6·N, every weight's gradient too) + attention's 6·length·hidden·layers."""
    weights = 6 * shape.linear_params if full else 4 * shape.linear_params + 6 * shape.lora_params
    return weights + 6 * mean_tokens * shape.hidden * shape.layers


def hardware_flops_per_token(shape: ModelShape, mean_tokens: float, checkpointing: bool, full: bool = False) -> float:
    """The FLOPs the device runs per token: the model FLOPs, plus with gradient checkpointing the forward
    it runs again in the backward (2·N + 2·N_LoRA + causal attention's 2·length·hidden·layers)."""
    lora = 0 if full else 2 * shape.lora_params
    again = 2 * shape.linear_params + lora + 2 * mean_tokens * shape.hidden * shape.layers
    return model_flops_per_token(shape, mean_tokens, full) + (again if checkpointing else 0)


def plan(
    config: TrainConfig,
    shape: ModelShape,
    gpu: Gpu,
    *,
    examples: int,
    mean_tokens: float,
    mfu: float = DEFAULT_MFU,
    assumptions: list[str] | None = None,
) -> Plan:
    training, data = config.training, config.data
    full = training.full
    precision = gpu_precision(config)
    width = 4 if precision.dtype == "float32" and precision.mixed_precision == "no" else 2
    tokens = training.per_device_batch_size * data.max_length
    if full:  # the weight, its gradient and AdamW's two moments, each in the weights' dtype
        per_param = 4 * WIDTHS[precision.dtype]
        trained = [
            Line(
                "weights, gradients, AdamW (full)",
                shape.params * per_param,
                f"{shape.params:,} parameters × {per_param} bytes (4 × {precision.dtype})",
            )
        ]
    else:
        weights, weights_how = weight_bytes(shape, precision.dtype, config.model.quantization)
        lora_bytes, lora_how = shape.lora_params * LORA_BYTES, f"{shape.lora_params:,} × 16 bytes"
        trained = [
            Line("base weights", weights, weights_how),
            Line("LoRA (weights, gradients, AdamW)", lora_bytes, lora_how),
        ]
    parts = [*trained, *activation_lines(shape, tokens, training.gradient_checkpointing, width, training.liger_kernel)]
    subtotal = sum(line.bytes for line in parts)
    overhead = OVERHEAD_FIXED + OVERHEAD_SHARE * subtotal
    parts.append(Line("overhead", overhead, "1 GiB + 10 % (CUDA context, allocator)"))
    flops = model_flops_per_token(shape, mean_tokens, full)
    epoch_tokens = examples * mean_tokens * training.epochs
    seconds = epoch_tokens * flops / (mfu * gpu.bf16_tflops * 1e12)
    other = activation_lines(shape, tokens, not training.gradient_checkpointing, width, training.liger_kernel)[0].bytes
    return Plan(gpu, parts, subtotal + overhead, epoch_tokens, flops, mfu, seconds / 3600, assumptions or [], other)


def variant_setup(name: str) -> dict[str, Any]:
    """What a bench/gpu/run.py variant name says about its setup (the rows of the first format carry no
    settings): full fine-tuning or LoRA, quantization, gradient checkpointing, Liger, padding-free, packing, FSDP,
    torch.compile."""
    return {
        "finetuning": "full" if name.startswith("full") else "lora",
        "quantization": "4bit" if name.startswith("qlora") else "none",
        "gradient_checkpointing": "no-checkpointing" not in name,
        "liger_kernel": "liger" in name,
        "padding_free": "padding-free" in name,
        "packing": "packing" in name,
        "fsdp": "fsdp" in name,
        "compiled": "compiled" in name,
    }


def measured_mfu(config: TrainConfig, results: Path | None = None) -> tuple[float, str] | None:
    """The MFU a GPU row of bench/results/gpu.json measured for this config's setup, and where it comes
    from: the newest row timed after the warm-up, else the newest with the warm-up inside (a lower bound);
    None when no row matches or the file is not here (an installed wheel)."""
    import json

    results = results or MEASURED
    if not results.is_file():
        return None
    wanted = {
        "finetuning": config.training.finetuning,
        "quantization": config.model.quantization,
        "gradient_checkpointing": config.training.gradient_checkpointing,
        "liger_kernel": config.training.liger_kernel,
        "padding_free": config.training.padding_free,
        "packing": config.training.packing,
        "fsdp": False,  # a one-process FSDP row checks the path, it does not time a plain run
        "compiled": bool(config.training.trainer_args.get("torch_compile", False)),
    }
    payload = json.loads(results.read_text(encoding="utf-8"))
    found = []
    for run in payload.get("runs", [payload]):
        if run.get("shape") != "8b":
            continue
        for row in run.get("training", []):
            if row.get("mfu") and variant_setup(row["variant"]) == wanted:
                found.append((bool(row.get("timed_steps")), run.get("date", ""), row, run))
    if not found:
        return None
    timed, date, row, run = max(found, key=lambda item: (item[0], item[1]))
    how = "timed after the warm-up" if timed else "the warm-up inside its timing: a lower bound"
    return row["mfu"], (
        f"{row['mfu']:.1%} MFU as measured for this setup ({row['variant']}) on {run['device']}, {date or 'undated'}, "
        f"{how} (bench/results/gpu.json)"
    )


def implied_mfu(result: Plan, hours: float) -> float:
    """The MFU at which an epoch of this plan takes `hours` on its GPU."""
    return result.tokens_per_epoch * result.model_flops_per_token / (hours * 3600 * result.gpu.bf16_tflops * 1e12)


def advice(config: TrainConfig, shape: ModelShape, gpu: Gpu) -> str:
    """The levers, pulled in order until the plan fits, those that leave the results alone first:
    gradient checkpointing, a halved per-device batch (accumulation keeps the effective batch),
    then LoRA in place of full fine-tuning, then QLoRA, then a halved max length (down to 512); or that none of them
    is enough."""
    model, training, data = config.model, config.training, config.data
    steps: list[tuple[str, dict[str, dict[str, Any]]]] = []
    if not training.gradient_checkpointing:
        steps.append(("training.gradient_checkpointing: true", {"training": {"gradient_checkpointing": True}}))
    batch = training.per_device_batch_size
    while batch > 1:
        batch //= 2
        steps.append((f"training.per_device_batch_size: {batch}", {"training": {"per_device_batch_size": batch}}))
    if training.full:  # an adapter on the frozen base: no gradients nor moments for the base
        steps.append(("training.finetuning: lora", {"training": {"finetuning": "lora"}}))
    if model.quantization == "none":
        steps.append(("model.quantization: 4bit (QLoRA)", {"model": {"quantization": "4bit"}}))
    length = data.max_length
    while length > 512:
        length //= 2
        steps.append((f"data.max_length: {length}", {"data": {"max_length": length}}))
    changed, taken = config, list[str]()
    for label, update in steps:
        changed = changed.model_copy(
            update={section: getattr(changed, section).model_copy(update=values) for section, values in update.items()}
        )
        if taken and taken[-1].split(":")[0] == label.split(":")[0]:
            taken[-1] = label  # a further halving replaces the one before
        else:
            taken.append(label)
        need = plan(changed, shape, gpu, examples=1, mean_tokens=1).total_bytes
        if need <= gpu.memory_gib * GIB:
            return f"{', '.join(taken)} would need {need / GIB:.1f} GiB"
    return f"even {', '.join(taken)} would not fit: choose a GPU with more memory"


def render(config: TrainConfig, result: Plan, thesis_hours: float | None = None) -> str:
    gpu = result.gpu
    lines = [
        f"Plan for {config.model.base} on one {gpu.name} ({gpu.memory_gib:g} GiB, {gpu.bf16_tflops:g} bf16 TFLOP/s "
        f"dense; {gpu.source})",
        f"  per-device batch {config.training.per_device_batch_size} × max length {config.data.max_length}, "
        f"gradient checkpointing {'on' if config.training.gradient_checkpointing else 'off'}, "
        f"quantization {config.model.quantization}, "
        + ("full fine-tuning" if config.training.full else f"LoRA r {config.lora.r}"),
        f"  {gpu_precision(config).line}",
        "",
        "Memory (GiB):",
    ]
    for line in result.memory:
        lines.append(f"  {line.label:<36} {line.bytes / GIB:8.2f}   {line.how}")
    other = "off" if config.training.gradient_checkpointing else "on"
    other_gib = result.other_checkpointing_bytes / GIB
    lines.append(f"  (with gradient checkpointing {other}, the decoder layers' activations: {other_gib:.2f})")
    verdict = "fits" if result.fits else "does NOT fit"
    lines.append(f"  {'total':<36} {result.total_bytes / GIB:8.2f}   {verdict} in {gpu.memory_gib:g} GiB")
    lines += [
        "",
        f"Time per epoch at {result.mfu:.0%} MFU: {result.hours_per_epoch:.2f} h "
        f"({result.tokens_per_epoch:,.0f} tokens × {result.model_flops_per_token / 1e9:.1f} GFLOP per token)",
    ]
    if thesis_hours is not None:
        implied = implied_mfu(result, thesis_hours)
        lines.append(
            f"  the thesis's {thesis_hours:g} h per epoch on this GPU would mean {implied:.0%} MFU on these assumptions"
        )
    lines += [f"  assumed: {text}" for text in result.assumptions]
    return "\n".join(lines)


def epoch_size(config: TrainConfig, examples: int | None, mean_tokens: float | None) -> tuple[int, float, list[str]]:
    """Examples and mean tokens per example for the time estimate, and what was assumed.

    Examples: --examples, else the lines of the config's train.jsonl when it is here, else the
    thesis's 37,000. Mean tokens: --mean-tokens, else data.max_length, an upper bound that says so."""
    assumptions = []
    if examples is None:
        train = config.data.train / "train.jsonl" if config.data.train.is_dir() else config.data.train
        if train.is_file() and train.suffix == ".jsonl":
            with train.open("rb") as handle:
                examples = sum(1 for line in handle if line.strip())
            assumptions.append(f"{examples:,} examples: the lines of {train}")
        else:
            examples = THESIS_EXAMPLES
            assumptions.append(f"{examples:,} examples: the thesis's training set (no data at {config.data.train})")
    if mean_tokens is not None and mean_tokens > config.data.max_length:
        raise InputError(
            f"--mean-tokens {mean_tokens:g}: no example is longer than data.max_length {config.data.max_length} "
            "(the memory is planned at that length); give the mean within it, or raise data.max_length"
        )
    if mean_tokens is None:
        mean_tokens = float(config.data.max_length)
        assumptions.append(
            f"every example {config.data.max_length} tokens long: an upper bound (pass --mean-tokens with your "
            "data's mean)"
        )
    return examples, mean_tokens, assumptions
