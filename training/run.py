"""One training run: config → tokenizer + data (checked) → model + LoRA (or every weight, `training.finetuning:
full`) → TRL SFTTrainer → run folder.

The run folder (`training.output_dir`) holds everything needed to resume and to use the result:

    checkpoint-N/        Trainer checkpoints (adapter or whole model, optimizer, scheduler, RNG); resume starts here
    train_config.yaml    the config as it ran, defaults filled in
    adapter/             the final LoRA adapter (safetensors), the tokenizer and spanjudge.json; with full
                         fine-tuning the whole model (model.safetensors, config.json) in its place
    metrics.json         final train/eval metrics, tokens/s, peak memory, world size
    log_history.jsonl    every logged step (loss, learning rate, eval loss)
    precision.json       the precision the run began in, which a resume keeps (training/precision.py: `resumed`)

Killing a run and starting it again with the same config resumes from the last complete checkpoint
(one torn by a kill while it was saved is set aside: `checkpoints.py`); checkpoints are saved every
`training.save_steps` and every `training.save_minutes`. Starting a finished run again does nothing.
One run at a time holds the folder (OUTPUT_DIR/.spanjudge.lock): a second training into it is refused
with one line naming the first.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import resource
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spanjudge.core.artifacts import ADAPTER_METADATA
from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import ConfigError
from spanjudge.core.fileio import atomic_write_json, atomic_write_jsonl, atomic_write_text, widen_to_umask
from spanjudge.core.locks import Busy, folder_lock, this_command
from spanjudge.core.overlap import RULE as OVERLAP_RULE
from spanjudge.inference.hf_models import (
    load_causal_lm,
    load_tokenizer,
    local_folder,
    resolve_model_source,
)
from spanjudge.inference.judge_conversation import TEMPLATE_FILE
from spanjudge.inference.prompts import template_sha256

from .checkpoints import CheckpointModes, TimedSaves, resume_point
from .config import (
    SFT_FROM_FIELDS,
    TrainConfig,
    config_value,
    load_chat_template,
    load_prompt_template,
    resolved_yaml,
    train_file,
    validation_file,
)
from .cpu_memory import (
    CPU_TILE_TOKENS,
    CPU_TILE_VOCABULARY,
    project_labelled_positions_only,
    release_freed_memory_per_layer,
    restore_projected_positions,
    set_loss_tiles,
)
from .data import TokenizedSplit, describe, tokenize_split
from .decision import weighted_trainer
from .environment import (
    accelerator_present,
    check_liger,
    check_name,
    check_sharding,
    configure_wandb,
    count_quantized,
    gpu_has_bf16,
    import_unsloth,
    module_names,
    unsloth_model,
)
from .eval_loss import token_weighted_eval
from .precision import TrainingPrecision, resumed, training_precision
from .run_folder import (
    PRECISION_FILE,
    began_in,
    check_same_run,
    checkpoint_step,
    init_adapter_metadata,
    short_sha,
    whole_run_train_loss,
)
from .step_times import StepTimes, steady_speed
from .world import World, gradient_accumulation

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel
    from trl import SFTTrainer

ADAPTER_DIR = "adapter"
WARMUP_STEPS = 3  # steps left out of metrics.json's steady speed (CUDA context, autotuning, compilation)


def checkpointing_argument() -> str:
    """TrainingArguments' name for gradient checkpointing: `activation_checkpointing` where this transformers has
    it (the old name is its deprecated alias, and warns), else `gradient_checkpointing`."""
    from transformers import TrainingArguments

    fields = TrainingArguments.__dataclass_fields__
    return "activation_checkpointing" if "activation_checkpointing" in fields else "gradient_checkpointing"


class OutputDirBusy(Busy):
    """Another training run holds the run folder."""


METADATA_FORMAT = "spanjudge-judge/1"


def _peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB


def _peak_gpu_memory_mib() -> float | None:
    """The most GPU memory PyTorch held at once in this process; None without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    return round(float(torch.cuda.max_memory_allocated()) / 2**20, 1)


class TrainingRun:
    """Prepare (cheap, all checks) then train (loads the model). Used by the CLI and tests."""

    def __init__(self, config: TrainConfig, *, say: Callable[[str], None] | None = None) -> None:
        """`config` as `config.load_train_config` returns it: its trainer_args and trackers already checked."""
        self.config = config
        self.world = World.from_accelerate(config.training.use_cpu)
        self.say = say or (lambda message: print(f"[spanjudge train] {message}", file=sys.stderr, flush=True))
        self.output_dir = config.training.output_dir
        self.adapter_dir = self.output_dir / ADAPTER_DIR
        self.trl_tiles: tuple[int, int] | None = None  # TRL's own loss tiles while the CPU's are set (restored after)
        self.trl_positions: Callable[[torch.device], bool] | None = None  # TRL's own choice of projected positions

    def log(self, message: str) -> None:
        if self.world.main:
            self.say(message)

    @property
    def finished(self) -> bool:
        return (self.adapter_dir / ADAPTER_METADATA).is_file()

    def prepare(self) -> None:
        """Everything that can fail because of the user's config or data, before any model loads."""
        config = self.config
        if config.model.unsloth:
            import_unsloth()  # Unsloth patches transformers, so it must come first
        if config.training.liger_kernel:
            check_liger(self.on_cpu)
        check_sharding(self.on_cpu)
        self.accumulation = gradient_accumulation(config, self.world)
        check_same_run(config, self.output_dir)
        self.source = resolve_model_source(config.model.base)
        self.folder = local_folder(self.source, self.log)
        self.tokenizer = load_tokenizer(self.folder, trust_remote_code=config.model.trust_remote_code)
        start = config.lora.init_from
        self.init_metadata = None if start is None else init_adapter_metadata(start, config.lora, self.source.spec)
        chat_template = load_chat_template(config, None)
        if chat_template is not None:  # saved with the adapter's tokenizer, which scoring loads
            self.tokenizer.chat_template = chat_template
        resuming = resume_point(self.output_dir, False, self.log) is not None  # main=False: nothing set aside yet
        self.precision = resumed(self._precision(), began_in(self.output_dir, resuming))
        self.check_trainer()  # seconds, before tokenizing everything
        catalog = load_catalog(config.data.catalog)
        self.template = load_prompt_template(config, None)
        options: dict[str, Any] = {
            "max_length": config.data.max_length, "too_long": config.data.too_long, "template": self.template
        }  # fmt: skip
        self.train_split = tokenize_split(
            train_file(config),
            self.tokenizer,
            catalog,
            limit=config.data.limit,
            repeat_no_error=config.data.repeat_no_error,
            example_weights=config.data.example_weights,
            **options,
        )
        validation = validation_file(config)
        self.validation_split: TokenizedSplit | None = (
            tokenize_split(validation, self.tokenizer, catalog, **options) if validation else None
        )
        self.log(
            f"world size {self.world.size} (this is rank {self.world.rank}); per-device batch "
            f"{config.training.per_device_batch_size} × accumulation {self.accumulation} × {self.world.size} "
            f"process(es) = effective batch {config.training.effective_batch_size}"
        )
        for line in describe([s for s in (self.train_split, self.validation_split) if s is not None]):
            self.log(line)
        self.log(self.precision.line)
        if self.precision.warning:
            self.log(f"warning: {self.precision.warning}")

    def train(self) -> dict[str, Any]:
        """Train (resuming), holding the run folder (the main process) so no second run trains into it."""
        with self._holding_output_dir():
            try:
                return self._train()
            finally:  # TRL's tiles and positions are its module's settings: a caller's next training in this process
                # gets its own
                if self.trl_tiles is not None:
                    set_loss_tiles(*self.trl_tiles)
                if self.trl_positions is not None:
                    restore_projected_positions(self.trl_positions)

    @contextlib.contextmanager
    def _holding_output_dir(self) -> Iterator[None]:
        if not self.world.main:  # the main process holds it for all processes of the run
            yield
            return
        with folder_lock(self.output_dir, this_command(), OutputDirBusy, "set another training.output_dir"):
            yield

    def _train(self) -> dict[str, Any]:
        if self.finished:
            self.log(f"{self.output_dir} already holds a finished run; nothing to do")
            return dict(json.loads((self.output_dir / "metrics.json").read_text(encoding="utf-8")))
        config = self.config
        if self.world.main:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.output_dir / "train_config.yaml", resolved_yaml(config))
        last = resume_point(self.output_dir, self.world.main, self.log)
        if self.world.main and last is None:  # a run starting: what it begins in, for a resume to keep
            atomic_write_text(self.output_dir / PRECISION_FILE, json.dumps(self.precision.record()))
        trainer = self._trainer()
        if config.training.save_minutes:
            trainer.add_callback(TimedSaves(config.training.save_minutes))
        step_times = StepTimes()
        trainer.add_callback(step_times)
        trainer.add_callback(CheckpointModes())
        layout = str(getattr(trainer.accelerator.distributed_type, "value", trainer.accelerator.distributed_type))
        self.log(f"the trainer's layout: {layout} over {self.world.size} process(es)")
        start = f"the adapter {config.lora.init_from}" if config.lora.init_from else "the base model"
        start += " (full fine-tuning: every weight trains)" if self.full else ""
        self.log(f"resuming from {last}" if last else f"starting from {start}")
        started = time.perf_counter()
        result = trainer.train(resume_from_checkpoint=last)
        seconds = time.perf_counter() - started
        metrics: dict[str, Any] = {
            f"train_{k}" if not k.startswith("train") else k: v for k, v in result.metrics.items()
        }
        if last:  # the Trainer's figure covers only the steps since the checkpoint
            metrics["train_loss_since_resume"] = metrics.get("train_loss")
            metrics["train_loss"] = whole_run_train_loss(
                trainer.state.log_history, checkpoint_step(last), metrics.get("train_loss"), trainer.state.global_step
            )
        if self.validation_split is not None:
            metrics.update(trainer.evaluate())
        tokens_seen = trainer.state.num_input_tokens_seen
        metrics.update(
            {
                "world_size": self.world.size,
                "distributed_type": layout,
                "global_step": trainer.state.global_step,
                "resumed_from": last,
                "wall_seconds_this_process": round(seconds, 2),
                "input_tokens_seen": tokens_seen,
                "tokens_per_second": round(tokens_seen / seconds, 2) if seconds > 0 and not last else None,
                # speed after the warm-up (steps 4..N of this process): what a benchmark quotes
                "steady": steady_speed(step_times.steps, WARMUP_STEPS),
                "step_times": step_times.steps,
                "peak_rss_mib_rank0": round(_peak_rss_mib(), 1),
                "peak_gpu_memory_mib": _peak_gpu_memory_mib(),
                "train_examples": len(self.train_split.input_ids),
                "skipped_too_long": len(self.train_split.too_long),
                "inputs_cut_to_fit": len(self.train_split.cut),
                "quantized_linear_layers": count_quantized(trainer.model),
                "precision": self.precision.record(),
            }
        )
        if trainer.is_world_process_zero():
            self._save(trainer, metrics)
        trainer.accelerator.wait_for_everyone()
        return metrics

    def trainer_arguments(self, has_validation: bool) -> dict[str, Any]:
        """The SFTConfig keyword arguments of this run (`--check` builds them without a model)."""
        config, training = self.config, self.config.training
        ours = {name: config_value(config, field) for name, field in SFT_FROM_FIELDS.items()}
        ours[checkpointing_argument()] = ours.pop("gradient_checkpointing")
        ours |= dict(  # what the run computes (config.SFT_COMPUTED), and TRL's defaults the run changes
            output_dir=str(self.output_dir),
            max_steps=training.max_steps or -1,
            gradient_accumulation_steps=self.accumulation,
            bf16=self.precision.mixed_precision == "bf16",
            fp16=self.precision.mixed_precision == "fp16",
            # TRL 1.16 refuses max_length with padding_free but no packing (it could not enforce it);
            # tokenize_split has already enforced data.max_length (too_long: cut | error | skip) by then
            max_length=None if training.padding_free and not training.packing else config.data.max_length,
            eval_strategy="steps" if training.eval_steps and has_validation else "no",
            eval_on_start=training.eval_on_start and has_validation,
            save_strategy="steps",
            logging_first_step=True,
            include_num_input_tokens_seen="non_padding",
            report_to=config.trackers,
            ddp_find_unused_parameters=False if self.world.size > 1 else None,
            disable_tqdm=not sys.stderr.isatty(),
        )
        # the user's extra SFTConfig arguments (training.trainer_args): unknown names and those a
        # config field sets were refused before the model loaded, so these add arguments or
        # replace internal defaults (save_strategy ...)
        return {**ours, **training.trainer_args}

    def check_trainer(self) -> None:
        """Trainer settings that only fail when the trainer is built, checked in seconds without
        loading weights: optimizer and scheduler names, LoRA target modules against the base
        model's config.json, the W&B install, then the trainer arguments as a whole."""
        from transformers import SchedulerType
        from transformers.training_args import OptimizerNames
        from trl import SFTConfig

        training = self.config.training
        check_name(training.optimizer, [o.value for o in OptimizerNames], "training.optimizer")
        check_name(training.lr_scheduler, [t.value for t in SchedulerType], "training.lr_scheduler")
        if "wandb" in self.config.trackers:
            configure_wandb(self.config)
        self._check_target_modules()
        arguments = self.trainer_arguments(validation_file(self.config) is not None)
        if not accelerator_present():  # bf16/fp16 need a GPU: a config for one is checked here all the same
            arguments.update(bf16=False, fp16=False)
        try:
            SFTConfig(**arguments)
        except (ValueError, TypeError) as exc:
            raise ConfigError(None, "training", f"the trainer refuses these settings: {exc}") from None

    def _check_target_modules(self) -> None:
        if self.full:  # no adapter: the lora section is not read
            return
        names = module_names(self.folder, self.config.model.trust_remote_code)
        if names is None:
            self.log("lora.target_modules not checked: the base model's config.json could not be read here")
            return
        leaves = sorted({name.rsplit(".", 1)[-1] for name in names})
        for index, target in enumerate(self.config.lora.target_modules):
            # PEFT's rule for a list: a module whose name is the target or ends with "." + target
            if not any(name == target or name.endswith("." + target) for name in names):
                close = difflib.get_close_matches(target, leaves, n=3)
                hint = (
                    f"did you mean {', '.join(repr(c) for c in close)}?" if close else f"modules: {', '.join(leaves)}"
                )
                raise ConfigError(
                    None, f"lora.target_modules[{index}]", f"the base model has no module '{target}'; {hint}"
                )

    def _trainer(self) -> SFTTrainer:
        from trl import SFTConfig, SFTTrainer

        config = self.config
        if "wandb" in config.trackers:
            configure_wandb(config)
        model, peft_config = self._model()
        if self.on_cpu and config.training.cpu_memory_fixes:
            self._fit_cpu_memory(model)
        args = SFTConfig(**self.trainer_arguments(self.validation_split is not None))
        weight, weighted = config.training.decision_weight, config.data.example_weights != "none"
        plain = weight == 1.0 and not weighted
        # the validation loss counts every completion token once, whatever the batch (eval_loss.py)
        trainer_class = token_weighted_eval(SFTTrainer if plain else weighted_trainer(weight, weighted))
        return trainer_class(
            model=model,
            args=args,
            train_dataset=self.train_split.to_dataset(),
            eval_dataset=self.validation_split.to_dataset() if self.validation_split else None,
            processing_class=self.tokenizer,
            peft_config=peft_config,
        )

    @property
    def full(self) -> bool:
        """Whether every weight trains (training.finetuning full) rather than a LoRA adapter."""
        return self.config.training.full

    @property
    def on_cpu(self) -> bool:
        """Whether this run trains on CPU (the Trainer's own choice: training.use_cpu, or no GPU)."""
        return self.config.training.use_cpu or not accelerator_present()

    def _precision(self) -> TrainingPrecision:
        """model.dtype and training.mixed_precision as this device runs them (training/precision.py)."""
        from spanjudge.inference.cpu_precision import cpu_bf16

        on_cpu = self.on_cpu
        return training_precision(
            self.config.model.dtype,
            self.config.training.mixed_precision,
            on_cpu=on_cpu,
            gpu_bf16=not on_cpu and gpu_has_bf16(),
            cpu_bf16=cpu_bf16,
            full=self.full,
        )

    def _fit_cpu_memory(self, model: PreTrainedModel) -> None:
        """The CPU's memory fixes (training/cpu_memory.py): the loss in small tiles over the labelled positions
        only, freed pages returned."""

        self.trl_tiles = set_loss_tiles(CPU_TILE_TOKENS, CPU_TILE_VOCABULARY)
        tiled = self.trl_tiles is not None
        tiles = f"{CPU_TILE_TOKENS} × {CPU_TILE_VOCABULARY}" if tiled else "TRL's own size (its settings moved)"
        self.trl_positions = project_labelled_positions_only()
        positions = "the labelled positions only" if self.trl_positions else "every position (TRL's choice moved)"
        hooked = release_freed_memory_per_layer(model)
        self.log(
            f"CPU memory (training.cpu_memory_fixes): the loss in tiles of {tiles} over {positions}, freed memory "
            f"handed back around each of {hooked} decoder layers"
        )

    def _model(self) -> tuple[Any, Any]:
        from peft import LoraConfig

        config = self.config
        lora = config.lora
        if config.model.unsloth:
            return unsloth_model(self.folder, config), None
        device_map: dict[str, int | str] | None = None
        if config.model.quantization != "none" and not config.training.use_cpu:
            import torch

            if torch.cuda.is_available():  # quantized weights cannot be moved after loading
                device_map = {"": self.world.local_rank}
        model = load_causal_lm(
            self.folder,
            dtype=self.precision.dtype,
            quantization=config.model.quantization,
            attn_implementation=config.model.attn_implementation,
            trust_remote_code=config.model.trust_remote_code,
            device_map=device_map,
        )
        if self.full:  # no PEFT config: TRL trains every parameter of the model as loaded
            return model, None
        if lora.init_from is not None:  # the trained adapter's weights are the start; TRL trains a PeftModel as is
            from peft import PeftModel

            return PeftModel.from_pretrained(model, str(lora.init_from), is_trainable=True), None
        peft_config = LoraConfig(
            r=lora.r,
            lora_alpha=lora.alpha,
            lora_dropout=lora.dropout,
            target_modules=list(lora.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )
        return model, peft_config

    def _save(self, trainer: SFTTrainer, metrics: dict[str, Any]) -> None:
        trainer.save_model(str(self.adapter_dir))  # the adapter only (full fine-tuning: the model), as safetensors
        (self.adapter_dir / "training_args.bin").unlink(missing_ok=True)  # a pickle; the YAML config says it all
        self.tokenizer.save_pretrained(str(self.adapter_dir))
        widen_to_umask(self.adapter_dir)  # safetensors writes the weights 0600 under any umask
        if self.template is not None:  # scoring renders the prompt from this copy (spanjudge.json names it)
            atomic_write_text(self.adapter_dir / TEMPLATE_FILE, self.template.source)
        history = [dict(entry) for entry in trainer.state.log_history]
        if metrics.get("train_loss_since_resume") is not None:  # the summary line agrees with metrics.json
            last = next((entry for entry in reversed(history) if "train_loss" in entry), None)
            if last is not None:
                last["train_loss"] = metrics["train_loss"]
        atomic_write_jsonl(self.output_dir / "log_history.jsonl", history)
        atomic_write_json(self.output_dir / "metrics.json", metrics)
        # written last: its presence marks the run as finished
        atomic_write_json(self.adapter_dir / ADAPTER_METADATA, self._metadata())
        self.log(f"adapter saved to {self.adapter_dir}")

    def _seen_inputs(self) -> list[str]:
        """The digests of every input the judge learnt from: this run's, and lora.init_from's own training's."""
        seen = set(self.train_split.input_digests)
        inherited = (self.init_metadata or {}).get("train_inputs") or {}
        if inherited.get("rule") == OVERLAP_RULE:
            seen.update(inherited.get("sha1", []))
        elif self.init_metadata is not None:  # digests under another rule would not match ours: say so, keep ours
            self.log(f"lora.init_from's training inputs are digested by another rule ({inherited.get('rule')}); "
                     "meta-eval's overlap check sees only this run's")  # fmt: skip
        return sorted(seen)

    def _init_record(self) -> dict[str, Any]:
        """Where this judge started: lora.init_from and what trained it."""
        start, adapter = self.init_metadata or {}, self.config.lora.init_from
        if adapter is None:
            return {}
        return {
            "adapter": str(Path(adapter).resolve()),
            **{k: start.get(k) for k in ("train_file", "created")},
        }

    def _metadata(self) -> dict[str, Any]:
        """What scoring needs to rebuild the judge exactly as trained."""
        return {
            "format": METADATA_FORMAT,
            "base_model": self.source.spec,
            "base_kind": self.source.kind,
            "max_length": self.config.data.max_length,
            "quantization": self.config.model.quantization,
            "finetuning": self.config.training.finetuning,
            "dtype": self.precision.dtype,
            "precision": self.precision.record(),
            "chat_template_sha256": short_sha(str(self.tokenizer.chat_template)),
            "judge_prompt_sha256": template_sha256(self.template),
            "prompt_template": TEMPLATE_FILE if self.template else None,
            "train_file": str(train_file(self.config)),
            "train_examples": len(self.train_split.input_ids),
            # which inputs the judge saw: meta-eval warns when it is scored on one of them
            "train_inputs": {"rule": OVERLAP_RULE, "sha1": self._seen_inputs()},
            **({} if self.init_metadata is None else {"init_from": self._init_record()}),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "versions": {name: version(name) for name in ("spanjudge", "transformers", "peft", "trl", "torch")},
        }
