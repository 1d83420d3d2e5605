"""Annotation throughput on CPU: concurrency 4 vs 1 against a llama.cpp server with 4
parallel slots, and spanjudge's own overhead per request.

    bench/build_llama_server.sh            # once: builds upstream llama-server (parallel slots)
    .venv/bin/python bench/annotate_throughput.py [--requests 16] [--llama-server PATH]

Real SummEval annotator prompts (the tiny ensemble's SmolLM2 annotator, with its grammar)
go through the framework's OpenAI backend. Each configuration gets a freshly started
server so no run profits from another's prompt cache. Results: bench/results/
annotate_throughput.{json,md}. Not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from spanjudge.core.catalog import load_catalog  # noqa: E402
from spanjudge.core.paths import data_dir  # noqa: E402
from spanjudge.data_gen.annotate import run_with_retries  # noqa: E402
from spanjudge.data_gen.config import ParseRetry  # noqa: E402
from spanjudge.inference.backends import BackendSpec, CachedBackend, LLMCache, make_backend  # noqa: E402
from spanjudge.inference.backends.base import ChatRequest, Completion, SamplingParams  # noqa: E402
from spanjudge.inference.backends.llamacpp import LlamaCppServer  # noqa: E402
from spanjudge.inference.contract import parse_annotator  # noqa: E402
from spanjudge.inference.prompts import render_annotator_prompt  # noqa: E402
from spanjudge.inference.shipped_models import smollm2_gguf  # noqa: E402

PARAMS = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=160, seed=0)


def prompts(count: int) -> list[str]:
    task = load_catalog().task("summeval")
    aspect = task.aspect("consistency")
    lines = (data_dir() / "meta_eval" / "summeval" / "summeval.jsonl").read_text().splitlines()
    records = [json.loads(line) for line in lines[::16][:count]]  # one summary per article
    return [render_annotator_prompt(task, aspect, {"Article": r["source"]}, r["system_output"]) for r in records]


def grammar() -> str:
    config = yaml.safe_load((REPO / "configs" / "ensemble" / "tiny_local.yaml").read_text())
    return str(config["definitions"]["annotator"])


class UpstreamServer(LlamaCppServer):
    """llama.cpp's own `llama-server` with N parallel slots (context split between them); started, asked for a
    first completion and watched as `LlamaCppServer` is, so a crash is reported as one."""

    def __init__(
        self, binary: Path, slots: int, threads: int, alias: str = "smollm2", extra: tuple[str, ...] = ()
    ) -> None:
        super().__init__(smollm2_gguf(), alias, n_ctx=2048 * slots, n_threads=threads)
        self.binary, self.slots, self.extra = binary, slots, extra

    def command(self) -> list[str]:
        return [
            str(self.binary), "-m", str(self.model_path), "--alias", self.alias, "--host", self.host,
            "--port", str(self.port), "--parallel", str(self.slots), "--ctx-size", str(self.n_ctx),
            "--threads", str(self.n_threads), "--no-webui", *self.extra,
        ]  # fmt: skip


def measure(base_url: str, texts: list[str], concurrency: int, gbnf: str) -> dict[str, float]:
    spec = BackendSpec(
        kind="openai", model="smollm2", endpoints=(base_url,), concurrency=concurrency, timeout_s=600,
        extra_body={"grammar": gbnf},
    )  # fmt: skip
    backend = make_backend(spec)
    requests = [ChatRequest.user(t, PARAMS) for t in texts]
    started = time.perf_counter()
    results = backend.generate(requests)
    wall = time.perf_counter() - started
    backend.close()
    done = [r for r in results if isinstance(r, Completion)]
    if len(done) != len(requests):
        raise RuntimeError(f"{len(requests) - len(done)} requests failed: {results}")
    latencies = [r.seconds for r in done]
    tokens = sum(r.completion_tokens or 0 for r in done)
    return {
        "concurrency": concurrency,
        "requests": len(done),
        "wall_s": round(wall, 2),
        "requests_per_s": round(len(done) / wall, 3),
        "generated_tokens_per_s": round(tokens / wall, 1),
        "median_latency_s": round(statistics.median(latencies), 2),
        # at concurrency 1 the calls do not overlap, so what is left is the framework's time
        "outside_http_per_request_ms": round(1000 * (wall - sum(latencies)) / len(done), 2)
        if concurrency == 1
        else None,
    }


def cached_pipeline_cost(base_url: str, texts: list[str], gbnf: str) -> dict[str, float]:
    """Per-request cost of everything but the model: prompt hashing, the SQLite cache,
    parsing (the replies are already cached, so no model runs)."""
    spec = BackendSpec(kind="openai", model="smollm2", endpoints=(base_url,), extra_body={"grammar": gbnf})
    with tempfile.TemporaryDirectory() as scratch:
        cache = LLMCache(Path(scratch) / "cache.sqlite")
        warm = CachedBackend(make_backend(spec), cache)
        run_with_retries(warm, texts, PARAMS, ParseRetry(attempts=0), parse_annotator)
        timings = []
        for _ in range(5):
            again = CachedBackend(make_backend(spec), cache)
            started = time.perf_counter()
            run_with_retries(again, texts, PARAMS, ParseRetry(attempts=0), parse_annotator)
            timings.append((time.perf_counter() - started) / len(texts))
            assert again.model_calls == 0
        cache.close()
    return {"cached_request_median_ms": round(1000 * statistics.median(timings), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=16)
    parser.add_argument("--llama-server", type=Path, default=os.environ.get("LLAMA_SERVER"))
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "annotate_throughput")
    args = parser.parse_args()
    texts, gbnf = prompts(args.requests), grammar()
    threads = os.cpu_count() or 1
    rows = []
    if args.llama_server:
        for concurrency in (1, 4):
            with UpstreamServer(args.llama_server, slots=4, threads=threads) as server:
                measured = measure(server.base_url, texts, concurrency, gbnf)
                rows.append({"server": "llama-server --parallel 4", **measured})
    for concurrency in (1, 4):
        with LlamaCppServer(smollm2_gguf(), alias="smollm2", n_threads=threads) as server:
            rows.append({"server": "llama-cpp-python (1 slot)", **measure(server.base_url, texts, concurrency, gbnf)})
            if concurrency == 1:
                overhead = cached_pipeline_cost(server.base_url, texts, gbnf)
    ratios = {}
    for name in {r["server"] for r in rows}:
        by_c = {r["concurrency"]: r for r in rows if r["server"] == name}
        ratios[name] = round(by_c[4]["requests_per_s"] / by_c[1]["requests_per_s"], 2)
    result = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "model": "SmolLM2-135M-Instruct Q4_1, SummEval consistency annotator prompts, max 160 new tokens, GBNF",
        "rows": rows,
        "throughput_ratio_c4_over_c1": ratios,
        "framework": overhead,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Annotation throughput (CPU)\n",
        f"Machine: {os.cpu_count()} CPUs, {platform.platform()}. {result['model']}.\n",
        "| server | concurrency | requests/s | tokens/s | median latency s | outside HTTP ms/request |",
        "|---|---|---|---|---|---|",
    ]
    lines += [
        f"| {r['server']} | {r['concurrency']} | {r['requests_per_s']} | {r['generated_tokens_per_s']} | "
        f"{r['median_latency_s']} | {r['outside_http_per_request_ms'] or '-'} |"
        for r in rows
    ]
    lines += ["", f"Throughput ratio, concurrency 4 / 1: {ratios}", ""]
    lines += [f"Cached request (hash + SQLite + parse, no model): {overhead['cached_request_median_ms']} ms median"]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
