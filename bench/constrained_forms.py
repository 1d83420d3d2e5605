"""Unconstrained, grammar-held and JSON-schema-held replies of one trained judge on a real server.

Ollama holds replies to a JSON schema only, so the judge's constrained mode there asks for the
contract's JSON form (`inference/contract/json_form.py`) and renders each reply to the text
evaluation. No Ollama server can be installed on this machine, so llama.cpp's OpenAI-compatible
server stands in for the schema path: it takes the same JSON schema through its chat API
(`response_format: {"type": "json_object", "schema": ...}`) and holds the reply to it, as Ollama
does with `format`. The three modes run the same student, on the same chat API, on the same
held-out quintd-1 outputs (dev tables of the protocol, never the test tables), against the human
spans:

- `unconstrained`: the judge writes its text contract freely;
- `grammar`: held to the text contract's GBNF (what `constrained=True` sends llama.cpp and vLLM);
- `json-schema`: held to the contract's JSON form, rendered back to the text evaluation.

Per mode: the share of replies that parse, evaluations per second, and the span agreement with
the humans (overlap / token F1, count / token Pearson). Judgments are kept per mode under
`--work` (a killed run resumes; a finished mode is not judged again). Results:
bench/results/constrained_forms.{json,md}.

    python bench/constrained_forms.py --run runs/bench/distill_quintd/smollm2-wikidata-s42 --outputs 24
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "bench" / "results" / "constrained_forms"
MODES = ("unconstrained", "grammar", "json-schema")


def judge_for(mode: str, url: str, adapter: Path, args: argparse.Namespace) -> Any:
    """The judge of one mode: the same student and chat API, only the constraint differs."""
    from spanjudge.inference.backends import BackendSpec, make_backend
    from spanjudge.inference.contract.grammar import errors_within, judge_grammar
    from spanjudge.inference.contract.json_form import judge_json_schema
    from spanjudge.inference.hf_models import load_tokenizer
    from spanjudge.inference.judge import Judge
    from spanjudge.inference.judge_options import JudgeOptions
    from spanjudge.inference.judge_setup import JudgeSetup

    errors = errors_within(args.max_new_tokens)
    extra_body: dict[str, Any] = {
        "unconstrained": {},
        "grammar": {"grammar": judge_grammar(max_errors=errors)},
        "json-schema": {"response_format": {"type": "json_object", "schema": judge_json_schema(max_errors=errors)}},
    }[mode]
    spec = BackendSpec(kind="openai", model="judge", endpoints=(url,), api="chat", extra_body=extra_body)
    options = JudgeOptions(max_new_tokens=args.max_new_tokens, retries=0)  # one reply: each mode's own parse rate
    setup = JudgeSetup(
        tokenizer=load_tokenizer(str(adapter)),  # measures the prompt to fit the context
        max_context=4096,
        json_replies=mode == "json-schema",
        name=f"student-{mode}",
    )
    return Judge(make_backend(spec), options, setup=setup)


def summary(mode: str, payload: dict[str, Any], docs: list[Any]) -> dict[str, Any]:
    from spanjudge.eval.spans.agreement import span_agreement
    from spanjudge.eval.spans.judging import predictions

    spans = predictions(payload)
    agreement = span_agreement(docs, spans, n_resamples=200, seed=0)
    return {
        "mode": mode,
        "parsed": sum(1 for d in docs if spans.get(d.id) is not None),
        "asked": len(docs),
        "evaluations_per_s": payload["evaluations_per_s"],
        "no_error_outputs": sum(1 for d in docs if spans.get(d.id) == []),
        **{k: agreement[k] for k in ("overlap_f1", "token_f1", "count_pearson", "token_pearson")},
    }


def markdown(rows: list[dict[str, Any]], settings: dict[str, Any]) -> str:
    def cell(value: Any) -> str:
        return "–" if value is None else f"{value:.3f}"

    lines = [
        "# Constrained forms: unconstrained vs grammar vs JSON schema (`bench/constrained_forms.py`)",
        "",
        f"{settings['machine']}. Student `{settings['run']}` on llama.cpp's OpenAI-compatible server (chat API), "
        f"{settings['outputs']} held-out quintd-1 outputs ({settings['domain']} dev tables "
        f"{settings['tables'][0]}–{settings['tables'][1] - 1}), greedy, ≤ {settings['max_new_tokens']} new tokens, "
        "no retry, against the human spans. The JSON-schema row is llama.cpp standing in for Ollama's `format` "
        "(no Ollama server installs here): the same schema, held by llama.cpp's `response_format`."
        + (f" {settings['note']}" if settings.get("note") else ""),
        "",
        "| mode | parsed | says 'No Error' | overlap F1 | token F1 | count Pearson | token Pearson | evals/s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['mode']} | {r['parsed']}/{r['asked']} | {r['no_error_outputs']} | {cell(r['overlap_f1'])} | "
            f"{cell(r['token_f1'])} | {cell(r['count_pearson'])} | {cell(r['token_pearson'])} | "
            f"{r['evaluations_per_s']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", type=Path, required=True, help="a bench/distill_quintd.py run folder (SmolLM2)")
    parser.add_argument("--outputs", type=int, default=24, help="held-out outputs judged per mode")
    parser.add_argument("--domain", default="wikidata")
    parser.add_argument("--tables", type=int, nargs=2, default=(70, 80), help="the protocol's dev tables")
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--work", type=Path, default=None, help="judgments kept here (default RUN/constrained_forms)")
    parser.add_argument("--note", default="")
    args = parser.parse_args()

    from spanjudge.eval.spans.judging import judge_span_documents
    from spanjudge.eval.spans.quintd import quintd_tables
    from spanjudge.inference.backends.llamacpp import LlamaCppServer
    from spanjudge.inference.shipped_models import smollm2_gguf

    adapter, lora = args.run / "student" / "adapter", args.run / "student-lora.gguf"
    for needed in (adapter, lora):
        if not needed.exists():
            sys.exit(f"{needed}: not found (a finished SmolLM2 run of bench/distill_quintd.py has both)")
    docs = quintd_tables("human", tuple(args.tables), [args.domain])[: args.outputs]
    work = args.work or args.run / "constrained_forms"
    work.mkdir(parents=True, exist_ok=True)
    key = f"{args.domain}_{args.tables[0]}-{args.tables[1]}_{args.outputs}out_{args.max_new_tokens}tok"
    server = LlamaCppServer(smollm2_gguf(), alias="judge", n_threads=os.cpu_count() or 1, n_ctx=4096, lora_path=lora)
    rows = []
    with server:
        for mode in MODES:
            judge = judge_for(mode, server.base_url, adapter, args)
            try:
                print(f"[constrained_forms] {mode}: judging {len(docs)} outputs", file=sys.stderr, flush=True)
                payload = judge_span_documents(judge, docs, work / f"{mode}_{key}.json")
            finally:
                judge.close()
            rows.append(summary(mode, payload, docs))
    settings = {
        "run": str(args.run),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, no GPU",
        "outputs": len(docs),
        "domain": args.domain,
        "tables": list(args.tables),
        "max_new_tokens": args.max_new_tokens,
        "server": "llama-cpp-python's OpenAI-compatible server (standing in for Ollama's JSON-schema format)",
        "note": args.note,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.with_suffix(".json").write_text(json.dumps({"settings": settings, "rows": rows}, indent=2) + "\n")
    RESULTS.with_suffix(".md").write_text(markdown(rows, settings))
    print(RESULTS.with_suffix(".md").read_text())


if __name__ == "__main__":
    main()
