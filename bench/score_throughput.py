"""Scoring throughput on CPU: the SmolLM2 smoke judge on transformers (batch 1 vs 8) and on
llama.cpp servers running the exported GGUF LoRA (1 vs 8 requests in flight).

    bench/build_llama_server.sh        # optional, once: upstream llama-server with parallel slots
    .venv/bin/python bench/score_throughput.py [--items 16] [--adapter DIR] [--llama-server PATH]

Without --adapter, a smoke judge is trained first (8 steps on QAGS-XSum human judgments).
The items are 16 other QAGS-XSum article/summary pairs; decoding is greedy with at most 96
new tokens, the same for every engine. Evaluations/s = items / wall time of `judge.score`
(model loading excluded). Results: bench/results/score_throughput.{json,md}. Not a test:
nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from annotate_throughput import UpstreamServer  # noqa: E402
from report_files import machine, write_report  # noqa: E402

from spanjudge.core.paths import data_dir  # noqa: E402
from spanjudge.inference.backends.llamacpp import LlamaCppServer  # noqa: E402
from spanjudge.inference.backends.llamacpp.lora_export import adapter_to_gguf  # noqa: E402
from spanjudge.inference.hf_models import local_folder, resolve_model_source  # noqa: E402
from spanjudge.inference.judge import Judge  # noqa: E402
from spanjudge.inference.judge_location import recorded_base  # noqa: E402
from spanjudge.inference.shipped_models import smollm2_gguf  # noqa: E402
from tests.support.judge_records import qags_xsum_records, write_qags_records  # noqa: E402

MAX_NEW_TOKENS = 96


def train_adapter(scratch: Path) -> Path:
    records = write_qags_records(scratch / "records", data_dir())
    command = [
        str(Path(sys.executable).parent / "spanjudge"), "train",
        "--config", str(REPO / "configs/train/smollm2_cpu_smoke.yaml"),
        "--set", f"data.train={records}", "--set", f"training.output_dir={scratch / 'run'}",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "WANDB_MODE": "disabled"}
    subprocess.run(command, cwd=REPO, env=env, check=True, capture_output=True)
    return scratch / "run" / "adapter"


def measure(judge: Judge, items: list[dict]) -> dict[str, float]:
    requests = [
        judge.request("qags_xsum", "factual consistency", r["inputs"], r["outputs"]["Summary"], id=r["id"])
        for r in items
    ]
    started = time.perf_counter()
    results = judge.score(requests)
    wall = time.perf_counter() - started
    judge.close()
    return {
        "items": len(items),
        "scored": sum(1 for r in results if r.score is not None),
        "wall_s": round(wall, 2),
        "evaluations_per_s": round(len(items) / wall, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=16)
    parser.add_argument("--adapter", type=Path)
    parser.add_argument("--llama-server", type=Path, default=os.environ.get("LLAMA_SERVER"))
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "score_throughput")
    args = parser.parse_args()
    threads = os.cpu_count() or 1
    items = qags_xsum_records(data_dir(), args.items, offset=16)
    rows = []
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        adapter = args.adapter or train_adapter(scratch)
        for batch in (1, 8):
            judge = Judge.from_pretrained(adapter, batch_size=batch, max_new_tokens=MAX_NEW_TOKENS)
            rows.append({"engine": "transformers", "in_flight": batch, **measure(judge, items)})
            print(rows[-1], flush=True)
        base_folder = Path(local_folder(resolve_model_source(recorded_base(adapter))))
        base_config = json.loads((base_folder / "config.json").read_text())
        lora = adapter_to_gguf(adapter, base_config, scratch / "judge-lora.gguf")
        servers = [("llama-cpp-python server (1 slot)", lambda: LlamaCppServer(
            smollm2_gguf(), alias="judge", n_threads=threads, lora_path=lora, n_ctx=4096))]  # fmt: skip
        if args.llama_server:
            servers.append(("llama-server --parallel 8", lambda: UpstreamServer(
                args.llama_server, slots=8, threads=threads, alias="judge", extra=("--lora", str(lora)))))  # fmt: skip
        for name, make in servers:
            for in_flight in (1, 8):
                with make() as server:
                    judge = Judge.from_pretrained(
                        adapter, engine="openai", base_url=server.base_url, served_model="judge",
                        concurrency=in_flight, max_new_tokens=MAX_NEW_TOKENS,
                    )  # fmt: skip
                    rows.append({"engine": name, "in_flight": in_flight, **measure(judge, items)})
                    print(rows[-1], flush=True)
    payload = {
        "machine": machine(threads),
        "model": "SmolLM2-135M-Instruct + LoRA smoke judge "
        "(transformers: fp32 dequantized base; llama.cpp: Q4_1 GGUF + GGUF LoRA)",
        "items": f"{args.items} QAGS-XSum article/summary pairs, greedy, max {MAX_NEW_TOKENS} new tokens",
        "results": rows,
    }
    lines = [
        "# Scoring throughput (SmolLM2 smoke judge, `bench/score_throughput.py`)",
        "",
        f"Machine: {payload['machine']}. Items: {payload['items']}. One run per row, all in the same invocation.",
        "",
        "| engine | batch / in flight | evaluations/s | wall (s) | scored |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in rows:
        lines.append(
            f"| {row['engine']} | {row['in_flight']} | {row['evaluations_per_s']:.3f} | {row['wall_s']} | "
            f"{row['scored']}/{row['items']} |"
        )
    write_report(args.out, payload, lines)


if __name__ == "__main__":
    main()
