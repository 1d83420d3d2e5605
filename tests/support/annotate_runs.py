"""An annotation run against scripted stand-in annotators (tests/support/standin.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from spanjudge.core.catalog import load_catalog
from spanjudge.data_gen.config import load_ensemble, load_sources
from spanjudge.data_gen.pipeline import run_pipeline
from spanjudge.data_gen.source_run import SourceRun
from support.standin import Reply

GOOD = (
    "Error 1:\nLocation: {loc}\nExplanation: Not supported by the article.\nSeverity: {sev}\n\nOverall score: {label}"
)


def _prompt(body: dict[str, Any]) -> str:
    return body["messages"][-1]["content"] if "messages" in body else body["prompt"]


OUTPUT_HEADERS = ("Summary", "Response", "Model output")  # SummEval's, SFRES's, and the prompt's own default


def output_word(body: dict[str, Any]) -> str:
    """A word of the evaluated output, taken from the fenced output in the prompt."""
    prompt = _prompt(body)
    marker = next(f"### {h}\n```\n" for h in OUTPUT_HEADERS if f"### {h}\n```\n" in prompt)
    return prompt.split(marker, 1)[1].split()[0]


def good_annotator(label: str = "Good", severity: int = 2):
    def reply(body: dict[str, Any]) -> Reply:
        return Reply(text=GOOD.format(loc=output_word(body), sev=severity, label=label))

    return reply


def write_configs(tmp_path: Path, urls: dict[str, str], inputs: int = 3, **ensemble_extra: Any) -> tuple[Path, Path]:
    def role(name: str) -> dict[str, Any]:
        return {
            "name": name,
            "backend": {"kind": "openai", "model": name, "endpoints": [urls[name]], "retries": 1, "backoff_s": 0.01,
                        "timeout_s": 2, "max_consecutive_failures": 50},
        }  # fmt: skip

    ensemble = {
        "name": "stand-ins",
        "annotators": [role("a"), role("b")],
        "supervisor": role("sup"),
        "sampling": {"max_tokens": 64},
        "supervisor_sampling": {"max_tokens": 64},
        **ensemble_extra,
    }
    if ensemble.get("merge", {}).get("method") == "vote":  # a vote calls no supervisor
        del ensemble["supervisor"]
    sources = {
        "seed": 0,
        "n_systems": 1,
        "n_aspects": 1,
        "sources": [
            {"name": "summeval", "format": "summeval", "path": "$DATA/meta_eval/summeval/summeval.jsonl",
             "task": "summeval", "limit_inputs": inputs}
        ],
    }  # fmt: skip
    ensemble_path, sources_path = tmp_path / "ensemble.yaml", tmp_path / "sources.yaml"
    ensemble_path.write_text(yaml.safe_dump(ensemble))
    sources_path.write_text(yaml.safe_dump(sources))
    return ensemble_path, sources_path


def run_annotation(tmp_path: Path, urls: dict[str, str], shared_data: Path, out: str = "out", **extra: Any):
    ensemble_path, sources_path = write_configs(tmp_path, urls, **extra)
    run = SourceRun(load_sources(sources_path), sources_path, tmp_path / out, load_catalog(), shared_data)
    return run_pipeline(load_ensemble(ensemble_path), run)


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]
