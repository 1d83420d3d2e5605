"""Judging throughput with prefix reuse, beside a plain generate loop and this machine's roofline (#31).

    .venv/bin/python bench/judge_throughput.py [--adapter DIR] [--articles 2] [--tables 4] \
        [--llama-server $(bench/build_llama_server.sh)]

One judge (a SmolLM2-135M-Instruct LoRA judge: `--adapter`, else the smoke judge is trained first,
8 steps on QAGS-XSum), the same items and greedy decoding for every row:
- workloads: `summeval16` (SummEval: 16 system summaries of each of `--articles` articles, relevance),
  `quintd4` (quintd-1 wikidata: the 4 systems' outputs of each of `--tables` tables) and `metaeval`
  (a meta-eval suite step: 4 summaries of one article on each of SummEval's 4 aspects);
- engines: `transformers-loop` (a plain `generate` loop at batch 1, what OpeNLGauge's released inference
  does), `transformers` at batch 8 and 16 (the LoRA merged into the base: the engine's default), at the
  largest batch also `transformers-unmerged` (the LoRA applied at run time, the engine's path before #48)
  and `transformers-continuous` (continuous batching; it has no reuse of its own making, so its two
  rows are the same path), `llamacpp` (the same judge's Q4_1 GGUF and GGUF LoRA in
  process) and, given `--llama-server`, upstream `llama-server` with one slot (the same GGUF and LoRA,
  served; without reuse the judge keeps the data's order and sends `cache_prompt: false`), each without
  and with prefix reuse (`reuse_prefix`);
- `identical_replies`: a reuse row's replies equal the same engine's without reuse;
- the roofline: this machine's float32 matmul FLOP/s and memory bandwidth (torch), and each engine's
  prefill and decode tokens/s measured alone, as a fraction of the limit that binds them.

Evaluations/s = evaluations / wall time of `Judge.score` (loading excluded). Prefill tokens are those
the engine read (without reuse: every prompt token; with reuse: each shared prefix once, planned as
the engine plans it). Results: bench/results/judge_throughput.{json,md}. Not a test: nothing asserts
a time.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))
sys.path.insert(0, str(REPO))

from annotate_throughput import UpstreamServer  # noqa: E402
from report_files import machine, write_report  # noqa: E402
from roofline import forward_flops_per_token, machine_limits, median_seconds  # noqa: E402
from score_throughput import train_adapter  # noqa: E402

from spanjudge.core.paths import data_dir  # noqa: E402
from spanjudge.inference.backends.llamacpp.lora_export import adapter_to_gguf  # noqa: E402
from spanjudge.inference.backends.prefix import prefix_batches  # noqa: E402
from spanjudge.inference.chat import encode_text, shared_length  # noqa: E402
from spanjudge.inference.hf_models import local_folder, resolve_model_source  # noqa: E402
from spanjudge.inference.judge import Judge, JudgeRequest  # noqa: E402
from spanjudge.inference.judge_conversation import judge_prompt_ids  # noqa: E402
from spanjudge.inference.judge_location import recorded_base  # noqa: E402
from spanjudge.inference.shipped_models import smollm2_gguf  # noqa: E402

MAX_NEW_TOKENS = 128
BATCH = 8
GREEDY: dict[str, Any] = {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
SUMMEVAL_ASPECTS = ("coherence", "consistency", "fluency", "relevance")


# -- workloads --------------------------------------------------------------------------------


def summeval_rows() -> list[dict[str, Any]]:
    with (data_dir() / "meta_eval/summeval/summeval.jsonl").open(encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


def workloads(judge: Judge, articles: int, tables: int) -> dict[str, list[JudgeRequest]]:
    """The three workloads' requests, each in the data's own order (outputs of one input together
    as the data lists them; the engines reorder as they plan)."""
    from spanjudge.eval.spans.documents import QUINTD_TASK_ID
    from spanjudge.eval.spans.quintd import load_quintd1

    rows = summeval_rows()
    docs = list(dict.fromkeys(row["doc_id"] for row in rows))
    summeval = [
        judge.request(
            "summeval", "relevance", {"Article": r["source"]}, r["system_output"], id=f"{r['doc_id']}/{r['system_id']}"
        )
        for r in rows
        if r["doc_id"] in docs[:articles]
    ]
    first = [r for r in rows if r["doc_id"] == docs[articles]][:4]  # an article the summeval16 rows do not use
    metaeval = [
        judge.request("summeval", aspect, {"Article": r["source"]}, r["system_output"], id=f"{r['system_id']}/{aspect}")
        for aspect in SUMMEVAL_ASPECTS
        for r in first
    ]
    outputs = load_quintd1(annotator="gpt-4", domains=["wikidata"])
    by_table: dict[str, list[Any]] = {}
    for doc in outputs:
        by_table.setdefault(doc.input_id, []).append(doc)
    full = [group for group in by_table.values() if len(group) == 4][:tables]
    quintd = [
        judge.request(QUINTD_TASK_ID, "accuracy", dict(doc.inputs), doc.output, id=doc.id)
        for group in full
        for doc in group
    ]
    return {"summeval16": summeval, "quintd4": quintd, "metaeval": metaeval}


# -- engines ----------------------------------------------------------------------------------


def plain_loop(adapter: Path, requests: list[JudgeRequest]) -> tuple[float, list[str], list[int]]:
    """A plain transformers loop at batch 1: chat template, `generate`, decode (OpeNLGauge's released
    inference). The same model (base + LoRA), prompt and greedy decoding as the judge."""
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    base = local_folder(resolve_model_source(recorded_base(adapter)))
    tokenizer = AutoTokenizer.from_pretrained(adapter)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, use_safetensors=True), adapter).eval()
    prompts = [judge_prompt_ids(tokenizer, request) for request in requests]
    replies, generated = [], []
    started = time.perf_counter()
    for prompt in prompts:
        encoded = {"input_ids": torch.tensor([prompt]), "attention_mask": torch.ones(1, len(prompt), dtype=torch.long)}
        with torch.inference_mode():
            output = model.generate(**encoded, max_new_tokens=MAX_NEW_TOKENS, **GREEDY,
                                    pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id)  # fmt: skip
        new = output[0, encoded["input_ids"].shape[1] :]
        replies.append(tokenizer.decode(new, skip_special_tokens=True))
        generated.append(len(new))
    return time.perf_counter() - started, replies, generated


def judged(make: Callable[[ExitStack], Judge], requests: list[JudgeRequest]) -> tuple[float, list[str], list[int]]:
    """The judge `make` builds (what it starts, a server, it leaves on the stack) scores the requests."""
    with ExitStack() as stack:
        judge = make(stack)
        stack.callback(judge.close)
        started = time.perf_counter()
        results = judge.score(requests)
        wall = time.perf_counter() - started
        assert judge.tokenizer is not None
        replies = [r.raw_replies[-1] if r.raw_replies else "" for r in results]
        return wall, replies, [len(encode_text(judge.tokenizer, reply)) + 1 for reply in replies]


def gguf_lora(adapter: Path, out: Path) -> Path:
    """The adapter as a GGUF LoRA (`out`) for llama.cpp's engines on the SmolLM2 GGUF base."""
    base = Path(local_folder(resolve_model_source(recorded_base(adapter))))
    return adapter_to_gguf(adapter, json.loads((base / "config.json").read_text()), out)


def served_judge(stack: ExitStack, binary: Path, adapter: Path, lora: Path, reuse: bool) -> Judge:
    """The judge on upstream llama-server (one slot, a fresh server, stopped with `stack`); without
    reuse it keeps the data's order and sends cache_prompt false, so the slot reads every prompt whole."""
    server = stack.enter_context(
        UpstreamServer(binary, slots=1, threads=os.cpu_count() or 1, alias="judge", extra=("--lora", str(lora)))
    )
    return Judge.from_pretrained(
        adapter, engine="openai", base_url=server.base_url, served_model="judge",
        reuse_prefix=None if reuse else False, retries=0, max_new_tokens=MAX_NEW_TOKENS,
    )  # fmt: skip


def prefill_tokens(prompts: list[list[int]], engine: str, reuse: bool, batch: int) -> int:
    """Prompt tokens the engine reads: every token without reuse; with it, as the engine plans it
    (transformers: each batch's prefixes once, none for a batch reading the same ones as the batch
    before; llama.cpp: what a prompt does not share with the one before)."""
    if not reuse:
        return sum(len(p) for p in prompts)
    if engine == "transformers-continuous":  # its own prefix sharing, not planned here: every token counted
        return sum(len(p) for p in prompts)
    if engine in ("llamacpp", "llama-server"):  # one sequence at a time: what it does not share with the last
        ordered = sorted(prompts)
        return sum(len(p) - min(shared_length(p, q), len(p) - 1) for p, q in zip(ordered, [[], *ordered], strict=False))
    read = 0
    for plan in prefix_batches(prompts, batch):
        read += 0 if plan.same_prefixes else sum(run.length for run in plan.runs)
        read += sum(
            len(prompts[m]) - plan.runs[r].length for m, r in zip(plan.members, plan.run_of_member, strict=True)
        )
    return read


# -- the roofline -----------------------------------------------------------------------------


def transformers_rates(adapter: Path, prompt_tokens: int = 1024, steps: int = 64) -> dict[str, Any]:
    """Prefill tokens/s (one forward over a `prompt_tokens` prompt) and decode tokens/s at batch 1
    and 8 (`steps` greedy tokens after a 32-token prompt, eos ignored), on the judge's model."""
    import torch

    judge = Judge.from_pretrained(adapter, retries=0)
    model = judge.backend.model
    try:
        ids = torch.randint(100, 20000, (1, prompt_tokens))
        with torch.inference_mode():
            prefill = prompt_tokens / median_seconds(lambda: model(input_ids=ids), repeats=3)
            decode = {}
            for batch in (1, BATCH, 2 * BATCH):
                short = torch.randint(100, 20000, (batch, 32))

                def run(short: Any = short) -> Any:
                    return model.generate(input_ids=short, attention_mask=torch.ones_like(short),
                                          min_new_tokens=steps, max_new_tokens=steps, **GREEDY)  # fmt: skip

                decode[batch] = batch * steps / median_seconds(run, repeats=3)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # merged by default
        parameters = sum(p.numel() for p in base.parameters())
        embedding = base.get_input_embeddings().weight.numel()
        tied = base.get_output_embeddings().weight.data_ptr() == base.get_input_embeddings().weight.data_ptr()
        config = base.config
        return {
            "dtype": str(next(base.parameters()).dtype).removeprefix("torch."),
            "bytes_per_parameter": next(base.parameters()).element_size(),
            # every weight matrix is multiplied per token; the input embedding is a lookup, unless tied to the output
            "matmul_parameters": parameters - (0 if tied else embedding),
            "weight_bytes": parameters * next(base.parameters()).element_size(),
            "layers": config.num_hidden_layers,
            "hidden": config.hidden_size,
            "prefill_tokens_per_s": prefill,
            "decode_tokens_per_s": decode,
            "prompt_tokens": prompt_tokens,
        }
    finally:
        judge.close()


def llamacpp_rates(gguf: Path, lora: Path, threads: int, prompt_tokens: int = 1024, steps: int = 64) -> dict[str, Any]:
    """llama.cpp's prefill tokens/s (`eval` of a `prompt_tokens` prompt from an empty cache) and
    decode tokens/s (`steps` single-token evals), batch 1: it runs one sequence at a time here."""
    from llama_cpp import Llama

    llm = Llama(model_path=str(gguf), lora_path=str(lora), n_ctx=4096, n_threads=threads, verbose=False)
    try:
        ids = [100 + (i * 7919) % 20000 for i in range(prompt_tokens)]

        def prefill() -> None:
            llm.reset()
            llm.eval(ids)

        prefill_rate = prompt_tokens / median_seconds(prefill, repeats=3)

        def decode() -> None:
            llm.reset()
            llm.eval(ids[:32])
            for i in range(steps):
                llm.eval([ids[32 + i]])

        decode_seconds = median_seconds(decode, repeats=3) - 32 / prefill_rate
        return {"prefill_tokens_per_s": prefill_rate, "decode_tokens_per_s": {1: steps / decode_seconds},
                "weight_bytes": gguf.stat().st_size + lora.stat().st_size}  # fmt: skip
    finally:
        llm.close()


def roofline(limits: dict[str, float], model: dict[str, Any], engine: dict[str, Any]) -> dict[str, Any]:
    """Achieved prefill FLOP/s over the matmul peak and decode bytes/s over the bandwidth.

    Prefill FLOPs per prompt of T tokens = 2 * P * T (every weight matrix, P = `matmul_parameters`)
    + 2 * L * d * T^2 (causal attention: QK^T and AV over half of the T x T pairs, L layers, width d).
    Decode bytes per step = the weights once (`weight_bytes`), shared by the batch's rows; the KV
    cache read is left out (a 32-96 token cache is under 1 % of the weights here)."""
    per_token = forward_flops_per_token(
        model["matmul_parameters"], model["layers"], model["hidden"], model["prompt_tokens"]
    )
    prefill_flops = per_token * engine["prefill_tokens_per_s"]
    decode = {
        batch: {
            "tokens_per_s": rate,
            "bandwidth_fraction": rate / batch * engine["weight_bytes"] / limits["memory_bytes_per_s"],
        }
        for batch, rate in engine["decode_tokens_per_s"].items()
    }
    return {
        "prefill_tokens_per_s": engine["prefill_tokens_per_s"],
        "prefill_flops_per_s": prefill_flops,
        "prefill_peak_fraction": prefill_flops / limits["matmul_flops_per_s"],
        "decode": decode,
        "weight_bytes": engine["weight_bytes"],
    }


# -- the run ----------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--adapter", type=Path, help="a SmolLM2 LoRA judge (default: train the smoke judge)")
    parser.add_argument("--articles", type=int, default=2, help="SummEval articles of summeval16 (16 outputs each)")
    parser.add_argument("--tables", type=int, default=4, help="quintd-1 wikidata tables of quintd4 (4 outputs each)")
    parser.add_argument("--workloads", nargs="+", default=["summeval16", "quintd4", "metaeval"])
    parser.add_argument("--batches", nargs="+", type=int, default=[8, 16], help="transformers batch sizes")
    parser.add_argument(
        "--llama-server",
        type=Path,
        default=os.environ.get("LLAMA_SERVER"),
        help="upstream llama-server (bench/build_llama_server.sh); none: no llama-server rows",
    )
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "judge_throughput")
    args = parser.parse_args()
    if args.llama_server and not os.access(args.llama_server, os.X_OK):
        parser.error(f"--llama-server {args.llama_server}: not an executable (build one: bench/build_llama_server.sh)")
    threads = os.cpu_count() or 1
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        adapter = args.adapter or train_adapter(scratch)
        lora = gguf_lora(adapter, scratch / "lora.gguf")
        gguf = smollm2_gguf()

        def transformers(batch: int, **options: Any) -> Callable[[bool, ExitStack], Judge]:
            return lambda reuse, stack: Judge.from_pretrained(
                adapter, batch_size=batch, reuse_prefix=reuse, retries=0, max_new_tokens=MAX_NEW_TOKENS,
                engine_options=options or None,
            )  # fmt: skip

        def llama_server(reuse: bool, stack: ExitStack) -> Judge:
            return served_judge(stack, args.llama_server, adapter, lora, reuse)

        def llamacpp(reuse: bool, stack: ExitStack) -> Judge:
            return Judge.from_pretrained(
                adapter,
                engine="llamacpp",
                reuse_prefix=reuse,
                retries=0,
                max_new_tokens=MAX_NEW_TOKENS,
                engine_options={"gguf": str(gguf), "lora": str(lora), "n_threads": threads, "n_ctx": 4096},
            )

        # (engine, batch, the judge with or without reuse): llama.cpp in process runs one sequence at a time
        engines = [*(("transformers", b, transformers(b)) for b in args.batches)]
        largest = max(args.batches)
        engines += [
            ("transformers-unmerged", largest, transformers(largest, merge_adapter=False)),
            ("transformers-continuous", largest, transformers(largest, continuous_batching=True)),
            ("llamacpp", 1, llamacpp),
        ]
        if args.llama_server:
            engines.append(("llama-server", 1, llama_server))
        probe = Judge.from_pretrained(adapter, retries=0)
        assert probe.tokenizer is not None
        tokenizer = probe.tokenizer
        work = {
            name: requests
            for name, requests in workloads(probe, args.articles, args.tables).items()
            if name in args.workloads
        }
        probe.close()
        # a workload's rows are kept as soon as it is measured: a run stopped later resumes after it
        kept = args.out.with_name(args.out.name + ".rows.jsonl")
        if kept.is_file():
            rows.extend(json.loads(line) for line in kept.read_text(encoding="utf-8").splitlines() if line.strip())
        finished = {row["workload"] for row in rows}
        for name, requests in work.items():
            if name in finished:
                print(f"{name}: measured by an earlier run of this command ({kept})", flush=True)
                continue
            prompts = [judge_prompt_ids(tokenizer, r) for r in requests]
            loop_wall, _, loop_generated = plain_loop(adapter, requests)
            measured = [("transformers-loop", False, 1, loop_wall, None, loop_generated)]
            for engine, batch, make in engines:
                without: list[str] | None = None
                for reuse in (False, True):
                    wall, replies, generated = judged(
                        lambda stack, make=make, reuse=reuse: make(reuse, stack), requests
                    )
                    measured.append((engine, reuse, batch, wall, without == replies if reuse else None, generated))
                    without = replies
            for engine, reuse, batch, wall, identical, generated in measured:
                read = prefill_tokens(prompts, engine, reuse, batch)
                rows.append({
                    "workload": name, "engine": engine, "reuse": reuse, "batch": batch, "evaluations": len(requests),
                    "wall_s": round(wall, 2), "evals_per_s": round(len(requests) / wall, 4),
                    "prompt_tokens": sum(len(p) for p in prompts), "prefill_tokens_read": read,
                    "generated_tokens": sum(generated),
                    "prefill_tokens_per_wall_s": round(read / wall, 1),
                    "decode_tokens_per_wall_s": round(sum(generated) / wall, 1),
                    "identical_replies": identical,
                })  # fmt: skip
                print(json.dumps(rows[-1]), flush=True)
            with kept.open("a", encoding="utf-8") as handle:
                handle.write("".join(json.dumps(row) + "\n" for row in rows if row["workload"] == name))
        limits = machine_limits(_dtype(adapter))
        model = transformers_rates(adapter)
        lines_roof = {
            "transformers": roofline(limits, model, model),
            "llamacpp": roofline(limits, model, llamacpp_rates(gguf, lora, threads)),
        }
    for name in work:
        loop = next(r for r in rows if r["workload"] == name and r["engine"] == "transformers-loop")
        best_plain = max(
            r["evals_per_s"]
            for r in rows
            if r["workload"] == name and not r["reuse"] and r["engine"] != "transformers-loop"
        )
        for row in rows:
            if row["workload"] == name:
                row["vs_loop"] = round(row["evals_per_s"] / loop["evals_per_s"], 2)
                row["vs_best_without_reuse"] = round(row["evals_per_s"] / best_plain, 2)
    payload = {
        "machine": machine(threads),
        "model": "SmolLM2-135M-Instruct + LoRA judge "
        "(transformers: fp32 dequantized base; llamacpp: Q4_1 GGUF + GGUF LoRA)",
        "settings": {"max_new_tokens": MAX_NEW_TOKENS, "batches": args.batches, "retries": 0, "greedy": True,
                     "threads": threads, "articles": args.articles, "tables": args.tables},
        "rows": rows,
        "limits": limits,
        "model_shape": model,
        "roofline": lines_roof,
    }  # fmt: skip
    payload["resumed_workloads"] = sorted(finished & set(work))
    write_report(args.out, payload, markdown(payload))
    kept.unlink(missing_ok=True)  # everything is in the report now


def _dtype(adapter: Path) -> Any:
    import torch

    config = json.loads((Path(local_folder(resolve_model_source(recorded_base(adapter)))) / "config.json").read_text())
    return getattr(torch, str(config.get("torch_dtype") or config.get("dtype") or "float32"))


def markdown(payload: dict[str, Any]) -> list[str]:
    s, limits = payload["settings"], payload["limits"]
    lines = [
        "# Judging throughput with prefix reuse (`bench/judge_throughput.py`)",
        "",
        f"Machine: {payload['machine']}. Judge: {payload['model']}. Greedy, at most {s['max_new_tokens']} new tokens, "
        f"no retries; one run per row, all in this invocation"
        + (
            f" (the rows of {', '.join(payload['resumed_workloads'])} by an earlier invocation of the same command, "
            "stopped after them; the roofline by this one)"
            if payload.get("resumed_workloads")
            else ""
        )
        + ". `vs loop`: evaluations/s over the plain batch-1 `generate` loop's on the same workload; `vs best w/o "
        "reuse`: over the fastest engine without reuse.",
        "",
        "| workload | engine | reuse | batch | evals | evaluations/s | vs loop | vs best w/o reuse "
        "| prefill tokens read / of prompts | generated | identical replies |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in payload["rows"]:
        identical = {None: "—", True: "yes", False: "**no**"}[r["identical_replies"]]
        lines.append(
            f"| {r['workload']} | {r['engine']} | {'yes' if r['reuse'] else 'no'} | {r['batch']} "
            f"| {r['evaluations']} | "
            f"{r['evals_per_s']:.3f} | {r['vs_loop']:.2f}× | {r['vs_best_without_reuse']:.2f}× | "
            f"{r['prefill_tokens_read']} / {r['prompt_tokens']} | {r['generated_tokens']} | {identical} |"
        )
    lines += [
        "",
        "## Roofline",
        "",
        f"Measured limits (torch, {s['threads']} threads): matmul {limits['matmul_flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"({payload['model_shape']['dtype']}, n=2048), memory bandwidth {limits['memory_bytes_per_s'] / 1e9:.1f} GB/s "
        "(a 1 GiB copy, read + write). Prefill FLOPs = 2·P·T + 2·L·d·T² (P the weights multiplied per token, L "
        "layers, d width, T the prompt); decode bytes per step = the weights once per batch (the KV cache is left "
        "out). Rates measured alone on a 1,024-token prompt and 64 decoded tokens.",
        "",
        "| engine | prefill tokens/s | prefill GFLOP/s | of matmul peak | decode tokens/s (batch) | of bandwidth |",
        "|---|---:|---:|---:|---|---|",
    ]
    for engine, r in payload["roofline"].items():
        decode = ", ".join(f"{v['tokens_per_s']:.1f} ({b})" for b, v in r["decode"].items())
        fractions = ", ".join(f"{v['bandwidth_fraction']:.0%} ({b})" for b, v in r["decode"].items())
        lines.append(
            f"| {engine} | {r['prefill_tokens_per_s']:.0f} | {r['prefill_flops_per_s'] / 1e9:.1f} | "
            f"{r['prefill_peak_fraction']:.0%} | {decode} | {fractions} |"
        )
    return lines


if __name__ == "__main__":
    main()
