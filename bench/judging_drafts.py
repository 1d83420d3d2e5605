"""How far a Gemma 3 student's protocol replies could be drafted from their own prompts: the headroom of
two ways to cut judging's work per output (issue #67, "judging fast enough to search"), read from the kept
replies alone, with no model run.

The protocol's student judges greedily, and its replies quote the output they judge ("Location: 3 goals in
normal time") in a fixed format that its prompt spells out. Two exact speed-ups follow from that:

1. **Prompt-lookup drafting** (transformers' `prompt_lookup_num_tokens`): the next tokens are guessed by
   finding the last `NGRAM` tokens earlier in the prompt or the reply and copying the `DRAFT` tokens that
   followed; one forward pass checks the guess, and greedy decoding keeps the longest agreeing prefix plus the
   model's own next token. The reply is the same as plain greedy decoding. Because the kept replies *are* the
   greedy replies, the passes the method needs are counted exactly by replaying its guesses against them
   (`lookup_passes`): passes per reply against one pass per token.
2. **A vocabulary cut to the prompt's own tokens** for the output layer (Gemma's 262,144 words cost 36 of 90 ms
   of a decoding step at batch 1 on the Intel host, docs/research/performance.md): greedy decoding over a subset
   is exact whenever the greedy token lies in it, so the share of replies whose every token is one of their
   prompt's tokens or the judge format's (`format_tokens`), and then also of the training replies'
   (`training_tokens`), is the share such decoding reproduces exactly.
   Probabilities over the subset would be renormalised over it: that error is not measured here.

Passes are not seconds: a checking pass over DRAFT + 1 positions costs more than a one-token step (its output
rows above all), so the counts bound what a model run would gain; they say whether one is worth measuring.

    .venv/bin/python bench/judging_drafts.py            # → bench/results/judging_drafts.{json,md}
"""

from __future__ import annotations

import argparse
import functools
import gzip
import json
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from report_files import machine, write_report  # noqa: E402

from spanjudge.core.catalog import Task, load_catalog  # noqa: E402
from spanjudge.eval.distill.phases import import_teacher  # noqa: E402
from spanjudge.eval.distill.study import StudySettings  # noqa: E402
from spanjudge.eval.spans.judging import QUINTD_ASPECT, QUINTD_TASK  # noqa: E402
from spanjudge.eval.spans.quintd import quintd_tables  # noqa: E402
from spanjudge.inference.backends.transformers_drafted import format_tokens as judge_format_tokens  # noqa: E402
from spanjudge.inference.backends.transformers_drafted import guess_of  # noqa: E402
from spanjudge.inference.contract.model import Evaluation  # noqa: E402
from spanjudge.inference.contract.render import render_judge  # noqa: E402
from spanjudge.inference.hf_models import convert_gguf, load_tokenizer  # noqa: E402
from spanjudge.inference.prompts import render_judge_prompt  # noqa: E402
from spanjudge.inference.shipped_models import gemma3_gguf  # noqa: E402

JUDGMENTS = BENCH / "results" / "distill_judgments"
OUT = BENCH / "results" / "judging_drafts"
KEPT = "dev/student+probabilities.json.gz"  # the greedy replies on dev, as each run's engine wrote them
DOMAINS = ("wikidata", "ice_hockey", "owid")
DEV_TABLES = (70, 80)


def agreed_prefix(guess: list[int], reply: list[int], written: int) -> int:
    """How many of `guess`'s tokens the greedy `reply` writes next, after its first `written` tokens."""
    agreed = 0
    while agreed < len(guess) and written + agreed < len(reply) and guess[agreed] == reply[written + agreed]:
        agreed += 1
    return agreed


def lookup_passes(context: list[int], reply: list[int], ngram: int, draft: int) -> int:
    """Forward passes prompt-lookup decoding needs to write `reply` after `context`, when `reply` is what the
    model writes greedily: each pass checks a guess (`guess_of`) and keeps its agreeing prefix plus one token of
    the model's own."""
    written, passes = 0, 0
    while written < len(reply):
        guess = guess_of(context + reply[:written], ngram, draft)
        written += agreed_prefix(guess, reply, written) + 1  # the checked prefix and the model's own next token
        passes += 1
    return passes


@functools.cache
def quintd_task() -> Task:
    return load_catalog().task(QUINTD_TASK)


def judge_prompt(tokenizer: Any, doc: Any) -> list[int]:
    """The tokens of the protocol judge's prompt (user turn) for a quintd-1 output."""
    task = quintd_task()
    inputs = {task.inputs[0].header: next(iter(doc.inputs.values()))}
    text = render_judge_prompt(task, task.aspect(QUINTD_ASPECT), inputs, doc.output)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def cut_rows(tokenizer: Any, vocabulary: set[int], size: int) -> list[int]:
    """The output layer's rows cut to `vocabulary`, padded to `size` with the lowest other ids (the tokenizer's
    frequent merges), so that every cut layer costs the same."""
    filler = (i for i in range(len(tokenizer)) if i not in vocabulary)
    return sorted(vocabulary) + [next(filler) for _ in range(max(0, size - len(vocabulary)))]


def format_tokens(tokenizer: Any) -> set[int]:
    """The tokens of the judge format itself (`transformers_drafted.format_tokens`) and the end of turn."""
    ends = {tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<end_of_turn>")}
    return judge_format_tokens(tokenizer) | ends


def training_tokens(tokenizer: Any) -> set[int]:
    """The tokens of the replies the protocol's students learn from: GPT-4's spans on tables 0–24 of the three
    domains, imported and rendered as the training targets are (no model call)."""
    with tempfile.TemporaryDirectory() as work:
        import_teacher(Path(work), StudySettings(label="judging-drafts"))
        records = (Path(work) / "teacher" / "train.jsonl").read_text(encoding="utf-8").splitlines()
    replies = [render_judge(Evaluation.model_validate(json.loads(line)["evaluation"])) for line in records]
    return {i for reply in replies for i in tokenizer(reply, add_special_tokens=False)["input_ids"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", nargs="+", help="kept gemma3 runs (default: every gemma3 run with dev judgments)")
    parser.add_argument("--ngram", type=int, default=2, help="the longest n-gram looked up (transformers: 2)")
    parser.add_argument("--draft", type=int, nargs="+", default=[3, 5, 10], help="tokens guessed per pass")
    parser.add_argument("--out", type=Path, default=OUT, help="the report's path, without suffix")
    parser.add_argument(
        "--history", type=int, default=0, help="also look up the judge's last N replies (in prompt order), as "
        "`decoding: drafted` does (its HISTORY)",
    )  # fmt: skip
    args = parser.parse_args()
    runs = args.runs or sorted(
        p.name for p in JUDGMENTS.iterdir() if p.name.startswith("gemma3") and (p / KEPT).is_file()
    )
    tokenizer = load_tokenizer(str(convert_gguf(gemma3_gguf())))
    docs = {d.id: d for d in quintd_tables("human", DEV_TABLES, list(DOMAINS))}
    prompts = {i: judge_prompt(tokenizer, d) for i, d in docs.items()}
    always = format_tokens(tokenizer)
    allowed = {i: set(p) | always for i, p in prompts.items()}  # a vocabulary cut to the prompt's own tokens
    learned = training_tokens(tokenizer)
    widened = {i: v | learned for i, v in allowed.items()}  # and to the training replies' tokens
    rows: list[dict[str, Any]] = []
    for run in runs:
        kept = json.loads(gzip.decompress((JUDGMENTS / run / KEPT).read_bytes()))["rows"]
        replies = {i: r["reply"] for i, r in kept.items() if i in prompts and r.get("reply")}
        tokens = {i: tokenizer(text, add_special_tokens=False)["input_ids"] for i, text in replies.items()}
        total = sum(map(len, tokens.values()))
        row: dict[str, Any] = {
            "run": run,
            "replies": len(tokens),
            "reply_tokens": total,
            "median_reply_tokens": statistics.median(map(len, tokens.values())),
            "replies_inside_prompt_vocabulary": sum(set(t) <= allowed[i] for i, t in tokens.items()),
            "tokens_inside_prompt_vocabulary": sum(sum(x in allowed[i] for x in t) for i, t in tokens.items()),
            "training_vocabulary": len(learned),
            "replies_inside_widened_vocabulary": sum(set(t) <= widened[i] for i, t in tokens.items()),
        }
        order = sorted(tokens, key=lambda i: prompts[i])  # prompt order, as the judge sends them
        before = {i: [t for j in order[max(0, k - args.history) : k] for t in tokens[j]] for k, i in enumerate(order)}
        for draft in args.draft:
            passes = sum(lookup_passes(before[i] + prompts[i], t, args.ngram, draft) for i, t in tokens.items())
            row[f"passes_draft{draft}"] = passes
            row[f"tokens_per_pass_draft{draft}"] = round(total / passes, 2)
        rows.append(row)
        print(row, flush=True)
    payload = {"machine": machine(), "ngram": args.ngram, "history": args.history, "rows": rows}
    write_report(args.out, payload, markdown(rows, args))


def markdown(rows: list[dict[str, Any]], args: argparse.Namespace) -> list[str]:
    drafts = args.draft
    lines = [
        "# Drafting a Gemma 3 student's replies from their prompts (`bench/judging_drafts.py`)",
        "",
        "No model runs: the protocol's kept dev replies (greedy, as each run's engine wrote them; quintd-1 tables "
        f"70–79 of {', '.join(DOMAINS)}) replayed against prompt-lookup drafting (the last ≤ {args.ngram} tokens "
        "looked up in the prompt and the reply so far"
        + (f", and in the judge's last {args.history} replies in prompt order" if args.history else "")
        + "; its guesses checked one pass at a time) and against the "
        "vocabulary of their own prompt and the judge format (every error number, severity and score), then also "
        f"the training replies' ({rows[0]['training_vocabulary']:,} tokens: GPT-4's spans on tables 0–24, rendered "
        "as trained). Tokens per pass: how many reply tokens one forward pass would write (plain greedy decoding: "
        "1.00). A checking pass costs more than a one-token step, so these bound a model run's gain; they do not "
        "measure it.",
        "",
        "| run | replies | reply tokens (median) | replies inside prompt + format vocabulary | tokens inside it | "
        "replies inside it + training replies' | " + " | ".join(f"tokens per pass, draft {d}" for d in drafts) + " |",
        "|---|---:|---:|---:|---:|---:|" + "---:|" * len(drafts),
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['replies']} | {r['reply_tokens']:,} ({r['median_reply_tokens']:g}) | "
            f"{r['replies_inside_prompt_vocabulary']}/{r['replies']} | "
            f"{r['tokens_inside_prompt_vocabulary'] / r['reply_tokens']:.1%} | "
            f"{r['replies_inside_widened_vocabulary']}/{r['replies']} | "
            + " | ".join(f"{r[f'tokens_per_pass_draft{d}']:.2f}" for d in drafts)
            + " |"
        )
    return lines


if __name__ == "__main__":
    main()
