"""The README and the docs cannot rot: every link and every file they name exists, and every
example either runs in tests/slow/test_docs.py or says why it cannot."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.docs_examples import REPO, RUNNABLE, examples, pages_in_reading_order

PAGES = [REPO / "README.md", REPO / "ARCHITECTURE.md", *sorted((REPO / "docs").rglob("*.md"))]
_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
# a path from the repository root in backticks: `configs/train/x.yaml`, `bench/results/*.md`
_TOP = "configs|bench|tests|docs|core|inference|data_gen|training|eval|publish|app|spanjudge"
_FILE = re.compile(rf"`((?:{_TOP})/[^`\s]*)`")
GENERATED = {REPO / "docs" / "reference" / "cli.md"}  # written when the site is built (mkdocs.yml)
_PLACEHOLDER = re.compile(r"[<>{}]|[A-Z]{3,}")  # `configs/tasks/<task>.yaml`, `OUT/…`: not a file


def _github_anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _headings(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.M | re.S)
    return {_github_anchor(h) for h in re.findall(r"^#{1,6} (.+)$", text, flags=re.M)}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_and_named_file_exists(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    broken = []
    for target in _LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto: — the network is not checked
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() and linked not in GENERATED:
            broken.append(f"link {target}: no {linked.relative_to(REPO)}")
        elif anchor and linked.suffix == ".md" and linked.exists() and anchor not in _headings(linked):
            broken.append(f"link {target}: no heading '#{anchor}' in {linked.relative_to(REPO)}")
    for named in _FILE.findall(text):
        named = named.rstrip(".,:;")
        if _PLACEHOLDER.search(named):
            continue
        if not (any(REPO.glob(named)) if "*" in named else (REPO / named).exists()):
            broken.append(f"names {named}, which does not exist")
    assert not broken, f"{page.relative_to(REPO)}:\n" + "\n".join(broken)


def test_a_link_to_a_missing_heading_is_caught(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text("# Scoring with the judge\n\n## The results file\n")
    assert _headings(page) == {"scoring-with-the-judge", "the-results-file"}


def test_every_example_runs_or_says_why() -> None:
    pages = pages_in_reading_order()
    found = [e for page in pages for e in examples(page)]
    runnable = [e for e in found if e.not_run is None]
    # the quick starts run: train, score (Python and CLI), meta-evaluate
    readme = [e.code for e in runnable if e.page.name == "README.md"]
    assert any("spanjudge train" in c for c in readme) and any("judge.predict(" in c for c in readme)
    assert any("spanjudge score" in c for c in readme) and any("spanjudge meta-eval" in c for c in readme)
    assert all(e.language in RUNNABLE for e in found)
    assert all(e.not_run.strip() for e in found if e.not_run is not None)
    # a page outside the nav is not part of the site (mkdocs --strict warns too) and never run here
    in_nav = {str(p.relative_to(REPO / "docs")) for p in pages[1:]}
    on_disk = {str(p.relative_to(REPO / "docs")) for p in (REPO / "docs").rglob("*.md")}
    assert on_disk == in_nav, f"pages not in mkdocs.yml's nav: {sorted(on_disk - in_nav)}"
