"""Training: config checks, completion-only labels, GGUF → transformers, and real LoRA/QLoRA
runs on CPU (SmolLM2-135M, a real Llama-architecture model; 2 processes over gloo), with a
killed run resumed from its last complete checkpoint, and a second run into its folder refused."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from support.judge_records import sfres_records, write_records
from support.training_cli import run_cli, write_config
from support.training_runs import BIN, ENV, REPO, SMOKE, TrainedRun, launch, smoke_args

from spanjudge.core.catalog import load_catalog
from spanjudge.core.errors import InputError
from spanjudge.inference.contract import Evaluation, render_judge
from spanjudge.inference.hf_models import convert_gguf, load_tokenizer
from spanjudge.inference.judge_conversation import judge_chat_prompt, request_from_record
from spanjudge.inference.shipped_models import smollm2_gguf
from spanjudge.training.config import load_train_config
from spanjudge.training.data import IGNORE_INDEX, describe, tokenize_split
from spanjudge.training.run import OutputDirBusy, TrainingRun


@pytest.fixture(scope="session")
def smollm2_hf() -> Path:
    """SmolLM2's GGUF converted once to a transformers folder (cached across runs)."""
    return convert_gguf(smollm2_gguf())


@pytest.fixture(scope="session")
def tokenizer(smollm2_hf: Path):
    return load_tokenizer(str(smollm2_hf))


@pytest.fixture
def records(tmp_path: Path, shared_data: Path) -> Path:
    return write_records(tmp_path / "annotate", shared_data)


# -- config and data errors: one line, before any model loads ----------------------------


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"training": {"learning_rat": 0.1}}, "training.learning_rat: unknown key"),
        ({"training": {"max_steps": "many"}}, "training.max_steps: Input should be a valid integer"),
        ({"data": {"train": "nowhere/train.jsonl"}}, "data.train: file not found: nowhere/train.jsonl"),
        ({"training": {"effective_batch_size": 5}}, "not a multiple of training.per_device_batch_size"),
        ({"model": {"quantization": "3bit"}}, "model.quantization: Input should be 'none', '4bit' or '8bit'"),
        (
            {"model": {"quantization": "4bit"}, "training": {"finetuning": "full"}},
            "training.finetuning full trains every weight of the base, and model.quantization: 4bit belong to LoRA",
        ),
    ],
)
def test_bad_config_is_one_clear_line(
    tmp_path: Path, records: Path, capsys: pytest.CaptureFixture[str], change: dict, expected: str
) -> None:
    out = tmp_path / "run"
    sections = {"data": {"train": str(records)}, "training": {"output_dir": str(out)}}
    for section, values in change.items():
        sections[section] = {**sections.get(section, {}), **values}
    code, err = run_cli(["train", "--config", str(write_config(tmp_path / "c.yaml", **sections))], capsys)
    assert code == 2
    assert expected in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not out.exists()  # nothing started


def test_override_with_unknown_key_is_reported(records: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = run_cli(["train", "--config", str(SMOKE), "--set", "lora.rank=8"], capsys)
    assert code == 2 and "lora.rank: unknown key" in err


def test_max_length_smaller_than_a_prompt_stops_before_the_model_loads(
    tmp_path: Path, records: Path, capsys: pytest.CaptureFixture[str], smollm2_hf: Path
) -> None:
    out = tmp_path / "run"
    config = write_config(
        tmp_path / "c.yaml",
        data={"train": str(records), "max_length": 64, "too_long": "error"},
        training={"output_dir": str(out)},
    )
    code, err = run_cli(["train", "--config", str(config)], capsys)
    assert code == 2
    assert "train.jsonl:1: example is" in err and "> data.max_length 64" in err
    assert not out.exists()  # the model (loaded only after these checks) never was


def test_malformed_and_unscored_records_name_their_line(
    tmp_path: Path, records: Path, capsys: pytest.CaptureFixture[str], smollm2_hf: Path
) -> None:
    lines = (records / "train.jsonl").read_text().splitlines()
    unscored = json.loads(lines[2])
    unscored["evaluation"]["score"] = None
    cases = {
        "broken": ([lines[0], "{not json", *lines[1:]], "train.jsonl:2: not valid JSON"),
        "unscored": ([*lines[:2], json.dumps(unscored)], "train.jsonl:3: the evaluation has no score"),
        "no_task": ([json.dumps({k: v for k, v in json.loads(lines[0]).items() if k != "task_id"})], "missing field"),
    }
    for name, (content, expected) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        (folder / "train.jsonl").write_text("\n".join(content) + "\n")
        config = write_config(
            tmp_path / f"{name}.yaml", data={"train": str(folder)}, training={"output_dir": str(tmp_path / "o")}
        )
        code, err = run_cli(["train", "--config", str(config)], capsys)
        assert code == 2 and expected in err, (name, err)


# -- completion-only loss ------------------------------------------------------------------


def test_prompt_tokens_are_masked_and_the_completion_is_the_rendered_evaluation(
    tmp_path: Path, records: Path, tokenizer
) -> None:
    catalog = load_catalog()
    split = tokenize_split(records / "train.jsonl", tokenizer, catalog, max_length=1536)
    rows = [json.loads(line) for line in (records / "train.jsonl").read_text().splitlines()]
    assert len(split.input_ids) == len(rows) == 16
    for row, ids, labels in zip(rows, split.input_ids, split.labels, strict=True):
        request = request_from_record(row, catalog, "test")
        prompt_length = labels.count(IGNORE_INDEX)
        assert labels[:prompt_length] == [IGNORE_INDEX] * prompt_length  # masked prompt, one block at the start
        assert labels[prompt_length:] == ids[prompt_length:]  # every completion token is learned
        # the masked part is exactly what scoring sends; the learned part is the evaluation
        assert tokenizer.decode(ids[:prompt_length]) == judge_chat_prompt(tokenizer, request)
        expected = render_judge(Evaluation.model_validate(row["evaluation"])) + "<|im_end|>\n"
        assert tokenizer.decode(ids[prompt_length:]) == expected


def test_a_long_example_has_its_inputs_cut_as_judging_cuts_them_never_its_evaluation(
    tmp_path: Path, records: Path, tokenizer
) -> None:
    """data.too_long: cut (the default): an example over data.max_length keeps its output and its whole
    evaluation, and its input is cut as the judge cuts one to fit its context (`fit_inputs`); it is
    counted; one whose output and evaluation alone do not fit is refused, naming its line."""
    catalog = load_catalog()
    original = tokenize_split(records / "train.jsonl", tokenizer, catalog, max_length=4096)
    limit = max(len(ids) for ids in original.input_ids) + 10  # every record as it is fits
    rows = [json.loads(line) for line in (records / "train.jsonl").read_text().splitlines()]
    header = next(iter(rows[1]["inputs"]))
    rows[1]["inputs"][header] = " ".join([rows[1]["inputs"][header]] * 12)  # now far longer than the limit
    path = tmp_path / "long" / "train.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    whole = tokenize_split(path, tokenizer, catalog, max_length=20000)
    assert len(whole.input_ids[1]) > limit
    split = tokenize_split(path, tokenizer, catalog, max_length=limit)
    assert len(split.input_ids) == len(rows) and not split.too_long  # no record left out
    [note] = split.cut
    assert note.startswith(f"{path}:2 ({header} ") and "→" in note
    assert "1 with their inputs cut to fit data.max_length" in describe([split])[0]
    assert split.input_ids[0] == whole.input_ids[0] and split.input_ids[2:] == whole.input_ids[2:]
    ids, labels = split.input_ids[1], split.labels[1]
    assert len(ids) <= limit
    completion = [label for label in labels if label != IGNORE_INDEX]
    assert completion == [label for label in whole.labels[1] if label != IGNORE_INDEX]  # the evaluation: never cut
    prompt = tokenizer.decode(ids[: labels.count(IGNORE_INDEX)])
    assert " [...]" in prompt and next(iter(rows[1]["outputs"].values())) in prompt  # the output: never cut
    with pytest.raises(InputError, match=r"train\.jsonl:1: the example cannot fit data\.max_length 64 even with"):
        tokenize_split(path, tokenizer, catalog, max_length=64)


def test_repeat_no_error_repeats_only_clean_records(tmp_path: Path, records: Path, tokenizer) -> None:
    rows = [json.loads(line) for line in (records / "train.jsonl").read_text().splitlines()][:4]
    for row in rows[:3]:  # three records with an error, one 'No Error'
        word = next(iter(row["outputs"].values())).split()[0]
        row["evaluation"] = {"errors": [{"location": word, "explanation": "Wrong.", "severity": 2}], "score": 60}
    assert not rows[3]["evaluation"]["errors"]
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    once = tokenize_split(path, tokenizer, load_catalog(), max_length=1536)
    thrice = tokenize_split(path, tokenizer, load_catalog(), max_length=1536, repeat_no_error=3)
    assert len(once.input_ids) == 4 and once.repeated == 0
    assert thrice.input_ids == once.input_ids + [once.input_ids[3]] * 2 and thrice.repeated == 2
    assert thrice.labels == once.labels + [once.labels[3]] * 2
    assert "repeats of" not in describe([once])[0] and "incl. 2 repeats of" in describe([thrice])[0]


# -- GGUF → transformers -------------------------------------------------------------------


@pytest.mark.slow
def test_gguf_conversion_gives_the_same_model_without_the_quantizer(smollm2_hf: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    config = json.loads((smollm2_hf / "config.json").read_text())
    assert "quantization_config" not in config
    assert (smollm2_hf / "model.safetensors").is_file()
    assert not list(smollm2_hf.glob("*.bin"))
    gguf = smollm2_gguf()
    from_gguf = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    assert from_gguf.hf_quantizer is not None  # what blocks training, and why we convert
    converted = AutoModelForCausalLM.from_pretrained(str(smollm2_hf))
    assert getattr(converted, "hf_quantizer", None) is None
    ids = torch.tensor([[1, 504, 3458, 282, 253, 1345]])
    with torch.no_grad():
        assert torch.equal(from_gguf(ids).logits, converted(ids).logits)


# -- real training runs --------------------------------------------------------------------


def train_losses(out: Path) -> list[tuple[int, float]]:
    history = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    return [(entry["step"], entry["loss"]) for entry in history if "loss" in entry]


@pytest.mark.slow
def test_two_cpu_processes_train_save_and_reload(
    trained_judge: TrainedRun, smollm2_hf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out, log = trained_judge.out, trained_judge.log
    assert "world size 2" in log  # two real processes (DDP over gloo)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["world_size"] == 2 and metrics["global_step"] == 16
    losses = [entry["loss"] for entry in trained_judge.history() if "loss" in entry]
    assert losses[-1] < losses[0] / 2  # loss goes down
    eval_losses = [entry["eval_loss"] for entry in trained_judge.history() if "eval_loss" in entry]
    assert eval_losses[-1] < eval_losses[0]  # on held-out inputs too

    adapter = trained_judge.adapter
    assert (adapter / "adapter_model.safetensors").is_file()
    assert not list(adapter.glob("*.bin"))
    meta = json.loads((adapter / "spanjudge.json").read_text())
    assert meta["base_model"] == "@smollm2" and meta["train_examples"] == 16

    # reload: the adapter changes the model, and reproduces the eval loss the trainer reported
    tokenizer = load_tokenizer(str(adapter))
    records = trained_judge.records
    split = tokenize_split(records / "validation.jsonl", tokenizer, load_catalog(), max_length=1536)
    base = AutoModelForCausalLM.from_pretrained(str(smollm2_hf))
    tuned = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(smollm2_hf)), str(adapter))

    def mean_loss(model: torch.nn.Module) -> float:
        """The completion loss over every validation token, each counted once: as the trainer's
        evaluation counts it (training/eval_loss.py), whatever its batches."""
        with torch.no_grad():
            sums = [
                (model(input_ids=torch.tensor([ids]), labels=torch.tensor([labels])).loss.item() * tokens, tokens)
                for ids, labels in zip(split.input_ids, split.labels, strict=True)
                if (tokens := sum(label != IGNORE_INDEX for label in labels[1:]))
            ]
        return sum(s for s, _ in sums) / sum(t for _, t in sums)

    tuned_loss, base_loss = mean_loss(tuned), mean_loss(base)
    assert tuned_loss < base_loss
    # the trainer evaluated under bf16 autocast, in batches: close, not equal
    assert tuned_loss == pytest.approx(metrics["eval_loss"], rel=0.15)

    # a finished run is not trained again, and the same folder with another config is refused, not mixed into
    # this run: `spanjudge train` in this process, as train.py runs it (the launcher is the fixture's)
    code, err = run_cli(["train", *trained_judge.args[1:]], capsys)
    assert code == 0 and "already holds a finished run" in err, err[-3000:]
    code, err = run_cli(["train", *smoke_args(records, out)[1:]], capsys)
    assert code == 2 and "holds a run made with training.max_steps = 16, not 8" in err, err[-3000:]


@pytest.mark.slow
def test_killed_run_resumes_from_its_checkpoint(tmp_path: Path, records: Path, smollm2_hf: Path) -> None:
    out = tmp_path / "run"
    # the command line; accelerate's CPU launcher starts one process
    # 4 steps with a checkpoint after 2, each step one batch of 2
    sets = ["--set", "training.max_steps=4", "--set", "training.save_steps=2"]
    sets += ["--set", "training.effective_batch_size=2"]
    args = ["--cpu", "--num_processes", "2", *smoke_args(records, out, *sets)]
    process = launch(args, start_new_session=True)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-2" / "trainer_state.json").is_file():
        assert process.poll() is None, process.stdout.read()[-3000:] if process.stdout else ""
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.2)
    time.sleep(1.0)  # let the checkpoint finish writing
    # a second training into the folder while this one runs is refused at once, naming the first (issue #46)
    second = TrainingRun(load_train_config(SMOKE, [("data.train", str(records)), ("training.output_dir", str(out))]))
    with pytest.raises(OutputDirBusy, match=r"is in use by .*set another training.output_dir"):
        second.train()
    os.killpg(process.pid, signal.SIGKILL)  # kill mid-training
    process.wait()
    assert not (out / "adapter").exists()
    began = json.loads((out / "precision.json").read_text())  # what it began in, which the resume keeps
    torn = out / "checkpoint-3"  # as a kill while the Trainer saves leaves it: no trainer_state.json yet
    torn.mkdir()
    (torn / "adapter_model.safetensors").write_bytes(b"")

    resumed = launch(args)
    log, _ = resumed.communicate(timeout=600)
    assert resumed.returncode == 0, log[-3000:]
    assert "checkpoint-3 is incomplete" in log and (out / "torn-checkpoint-3").is_dir(), log[-3000:]
    assert "resuming from" in log and "checkpoint-2" in log
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 4 and metrics["resumed_from"].endswith("checkpoint-2")
    assert metrics["precision"] == began == json.loads((out / "precision.json").read_text())
    steps = [step for step, _ in train_losses(out)]
    assert steps == sorted(set(steps)) and steps[-1] == 4  # no step lost, none repeated
    # the mean loss covers all 4 steps (logged every step), not only the 2 after the resume
    assert metrics["train_loss"] == pytest.approx(sum(loss for _, loss in train_losses(out)) / 4, rel=1e-5)
    assert (out / "adapter" / "adapter_model.safetensors").is_file()


def test_full_fine_tuning_trains_every_weight_into_a_whole_model_the_judge_loads(
    tmp_path: Path, records: Path, smollm2_hf: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """training.finetuning full: no adapter, every kind of weight moves (LoRA never trains embeddings or norms),
    and the run's adapter/ folder is a whole model that scoring loads as it is; export says there is nothing to
    merge. Killed after a checkpoint (a whole model with its optimizer), the run resumes from it."""
    from safetensors.torch import load_file

    from spanjudge.inference.judge import Judge
    from spanjudge.training.checkpoints import resume_point

    out = tmp_path / "run"
    training = {"output_dir": str(out), "finetuning": "full", "max_steps": 3, "effective_batch_size": 1,
                "per_device_batch_size": 1, "learning_rate": 1e-4, "save_steps": 1}  # fmt: skip
    config = write_config(tmp_path / "c.yaml", data={"train": str(records)}, training=training)
    command = [str(BIN / "spanjudge"), "train", "--config", str(config)]
    process = subprocess.Popen(command, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True, start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 300
    while not (out / "checkpoint-1" / "trainer_state.json").is_file():
        assert process.poll() is None, process.stdout.read()[-3000:] if process.stdout else ""
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.2)
    os.killpg(process.pid, signal.SIGKILL)  # kill mid-training: steps 2 and 3 are not all done
    log = process.communicate()[0]
    assert "starting from the base model (full fine-tuning: every weight trains)" in log, log[-3000:]
    assert not (out / "adapter").exists()
    last = resume_point(out, False, print)
    assert last is not None and (Path(last) / "model.safetensors").is_file()  # the whole model, not an adapter
    assert not (Path(last) / "adapter_model.safetensors").exists()

    code, err = run_cli(["train", "--config", str(config)], capsys)
    assert code == 0, err
    assert f"resuming from {last}" in err
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["global_step"] == 3 and metrics["resumed_from"] == last
    assert [step for step, _ in train_losses(out)] == [1, 2, 3]  # no step lost, none repeated
    judge_folder = out / "adapter"
    names = {path.name for path in judge_folder.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "spanjudge.json"} <= names, names
    assert not names & {"adapter_model.safetensors", "adapter_config.json", "training_args.bin"}
    assert json.loads((judge_folder / "spanjudge.json").read_text())["finetuning"] == "full"
    trained = load_file(str(judge_folder / "model.safetensors"))
    base = load_file(str(smollm2_hf / "model.safetensors"))
    layer, last = "model.layers.0.", "model.layers.29."
    moved = ("model.embed_tokens.weight", layer + "input_layernorm.weight", layer + "self_attn.q_proj.weight",
             last + "mlp.down_proj.weight", "model.norm.weight")  # fmt: skip
    for name in moved:
        assert trained[name].shape == base[name].shape and not trained[name].equal(base[name]), name

    judge = Judge.from_pretrained(judge_folder, engine="transformers", max_new_tokens=8, retries=0)
    try:  # the trained weights themselves, not the base's: there is no base to name
        assert judge.backend.model.get_input_embeddings().weight.equal(trained["model.embed_tokens.weight"])
        request = judge.request("qags_xsum", "factual consistency", {"Article": "Rain fell."}, "It rained.")
        [result] = judge.score([request])
        assert result.raw_replies  # it wrote a reply (eight tokens after one step: rarely a parsed one)
    finally:
        judge.close()
    code, err = run_cli(["export", "--model", str(judge_folder), "--merge", "--out", str(tmp_path / "m")], capsys)
    assert code == 2 and "was fully fine-tuned: it is a whole model already" in err


@pytest.mark.slow
def test_qlora_on_cpu_with_wandb_offline(tmp_path: Path, records: Path, smollm2_hf: Path) -> None:
    out = tmp_path / "run"
    command = [
        str(BIN / "spanjudge"),
        "train",
        "--config",
        str(SMOKE),
        *("--set", f"data.train={records}", "--set", f"training.output_dir={out}"),
        *("--set", "model.quantization=4bit", "--set", "training.max_steps=1"),  # model.dtype auto: float32 on CPU
        *("--set", "training.effective_batch_size=1", "--set", "training.per_device_batch_size=1"),  # one example
        *("--set", "logging.report_to=wandb", "--set", "logging.wandb_mode=offline"),
    ]
    env = {**ENV, "WANDB_MODE": "offline", "WANDB_API_KEY": ""}
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["quantized_linear_layers"] == 30 * 7  # every projection of the 30 layers is 4-bit
    assert (out / "adapter" / "adapter_model.safetensors").is_file()
    assert list((out / "wandb").glob("offline-run-*")), "wandb wrote no offline run"


def test_fixture_records_match_data_gen_fields(shared_data: Path) -> None:
    """The fixture carries every field data_gen writes for a record."""
    fields = {
        "id", "dataset", "input_id", "system", "inputs", "outputs", "aspect_name", "aspect_definition",
        "task_type", "task_name", "task_id", "extra_task_info", "evaluation", "provenance",
    }  # fmt: skip
    assert set(sfres_records(shared_data, 1)[0]) >= fields


@pytest.mark.slow
def test_training_continues_from_a_trained_adapter(
    tmp_path: Path, trained_judge: TrainedRun, records: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """lora.init_from: the trained judge's LoRA weights are the start (not zeros), and the new judge
    records the inputs both trainings saw; a LoRA shape other than the adapter's is refused in one line."""
    from safetensors.torch import load_file

    start = trained_judge.adapter  # trained on QAGS-XSum; continued here on other records
    data = {"train": str(records)}
    out = tmp_path / "other_shape"
    config = write_config(tmp_path / "r8.yaml", data=data, lora={"init_from": str(start), "r": 8},
                          training={"output_dir": str(out)})  # fmt: skip
    code, err = run_cli(["train", "--config", str(config)], capsys)
    assert code == 2 and "lora.r: 8, but the adapter in lora.init_from" in err and "has 16" in err, err
    assert not out.exists()

    out = tmp_path / "continued"
    # one step at a learning rate that moves nothing measurable: the weights are where they started
    training = {"output_dir": str(out), "max_steps": 1, "learning_rate": 1e-12, "effective_batch_size": 1,
                "per_device_batch_size": 1, "save_steps": 10}  # fmt: skip
    config = write_config(tmp_path / "c.yaml", data=data, lora={"init_from": str(start)}, training=training)
    code, err = run_cli(["train", "--config", str(config)], capsys)
    assert code == 0, err
    before = load_file(str(start / "adapter_model.safetensors"))
    after = load_file(str(out / "adapter" / "adapter_model.safetensors"))
    assert before.keys() == after.keys()
    lora_b = [name for name in before if "lora_B" in name]
    assert lora_b and all(before[name].abs().max() > 0 for name in lora_b)  # trained: a fresh LoRA's B is zero
    for name, weights in before.items():
        assert (after[name] - weights).abs().max() < 1e-6, name
    meta = json.loads((out / "adapter" / "spanjudge.json").read_text())
    started = json.loads((start / "spanjudge.json").read_text())
    assert meta["init_from"]["adapter"] == str(start)
    seen, inherited = set(meta["train_inputs"]["sha1"]), set(started["train_inputs"]["sha1"])
    assert inherited < seen  # the first training's inputs, and this one's
