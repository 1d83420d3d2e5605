"""`scores.html` in a real browser: the spans are highlighted at the right characters, each
explanation shows on hover and on keyboard focus, the page makes no request and logs no error,
and it reads at a phone's width."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spanjudge.inference.score.html import render_html
from tests.support.browser import PHONE, opened

# Characters outside the Basic Multilingual Plane (one code point, two UTF-16 units) before the
# spans: a page that counted offsets as JavaScript does would be off by one per emoji.
OUTPUT = "Le café 😀 opened in 1998 😀, says https://example.org/" + "a" * 90 + " — its owner, Zoë."


def _error(output: str, text: str, severity: int, explanation: str, **more: Any) -> dict[str, Any]:
    start = output.index(text)
    return {"location": text, "start": start, "end": start + len(text), "severity": severity,
            "explanation": explanation, **more}  # fmt: skip


def _rows() -> list[dict[str, Any]]:
    errors = [
        _error(OUTPUT, "1998", 4, "The article says 1999.", confidence=0.3),
        _error(OUTPUT, "Zoë", 2, "The owner is Zoé."),
        _error(OUTPUT, "1998 😀", 3, "Overlaps the first span: listed, not marked."),
        {"location": "a missing fact", "start": None, "end": None, "severity": 3, "explanation": "Not found."},
    ]
    errors[2]["start"] += 2  # "98 😀": starts inside "1998"
    scored = {"id": "doc<1>", "task": "summeval", "aspect": "relevance", "output": OUTPUT,
              "evaluation": {"score": 40, "errors": errors}, "probabilities": {"expected_score": 47.5}}  # fmt: skip
    unscored = {"id": "doc-2", "task": "summeval", "aspect": "relevance", "output": "Short.",
                "evaluation": {"score": None, "errors": []}, "unscored_reason": "no parseable reply"}  # fmt: skip
    return [scored, unscored]


def _expected_marks(rows: list[dict[str, Any]]) -> list[list[tuple[int, int, str]]]:
    """What the page should highlight: each anchored span that does not overlap an earlier one."""
    expected = []
    for row in rows:
        marks, cursor = [], 0
        for error in sorted(
            (e for e in row["evaluation"]["errors"] if e["start"] is not None), key=lambda e: (e["start"], -e["end"])
        ):
            if error["start"] >= cursor:
                marks.append((error["start"], error["end"], row["output"][error["start"] : error["end"]]))
                cursor = error["end"]
        expected.append(marks)
    return expected


def _assert_highlights(shown: list[dict[str, Any]], rows: list[dict[str, Any]]) -> None:
    assert [s["text"] for s in shown] == [r["output"] for r in rows]
    assert [[(m["start"], m["end"], m["text"]) for m in s["marks"]] for s in shown] == _expected_marks(rows)


def test_spans_explanations_keyboard_offline_and_phone_width(tmp_path: Path) -> None:
    rows = _rows()
    page_file = tmp_path / "scores.html"
    page_file.write_text(render_html(rows, title="spanjudge: test"), encoding="utf-8")

    with opened(page_file) as desktop:
        _assert_highlights(desktop.spans(), rows)
        first, second = desktop.spans()[0]["marks"]
        assert "The article says 1999." in first["tip"] and "confidence 0.30" in first["tip"]
        # the screen reader's description of a span is its line in the error list
        described = desktop.page.inner_text(f"#{first['described']}")
        assert "The article says 1999." in described
        assert "not found in the output" in desktop.page.inner_text("body")  # the unanchored error is listed

        # keyboard: Tab reaches each span in order and shows its explanation
        assert desktop.after_content("mark[data-tip]") == "none"  # nothing shown before focus or hover
        desktop.page.keyboard.press("Tab")
        assert desktop.page.evaluate("() => document.activeElement.textContent") == "1998"
        assert "The article says 1999." in desktop.after_content("mark:focus")
        desktop.page.keyboard.press("Tab")
        assert desktop.page.evaluate("() => document.activeElement.textContent") == second["text"]
        assert "The owner is Zoé." in desktop.after_content("mark:focus")
        # the mouse: hovering a span shows its explanation
        desktop.page.mouse.click(1, 1)  # focus leaves the span
        desktop.page.hover("mark[data-tip]")
        assert "The article says 1999." in desktop.after_content("mark:hover")

        assert "expected 47.5" in desktop.page.inner_text("body") and "unscored" in desktop.page.inner_text("body")
        assert desktop.console_errors == [] and desktop.network == []
        desktop.page.screenshot(path=str(tmp_path / "scores-desktop.png"), full_page=True)

    with opened(page_file, viewport=PHONE) as phone:
        assert phone.horizontal_overflow() <= 0  # the long link wraps: no sideways scrolling
        _assert_highlights(phone.spans(), rows)
        phone.page.screenshot(path=str(tmp_path / "scores-phone.png"), full_page=True)
    assert (tmp_path / "scores-phone.png").stat().st_size > 0


@pytest.mark.parametrize("shift", [1, -1])
def test_a_page_whose_highlights_are_off_by_one_character_fails(tmp_path: Path, shift: int) -> None:
    rows = _rows()
    shifted = [
        dict(r, evaluation={**r["evaluation"], "errors": [dict(e) for e in r["evaluation"]["errors"]]}) for r in rows
    ]
    for error in shifted[0]["evaluation"]["errors"]:
        if error["start"] is not None:
            error["start"] += shift
            error["end"] += shift
    page_file = tmp_path / "scores.html"
    page_file.write_text(render_html(shifted), encoding="utf-8")
    with opened(page_file) as page, pytest.raises(AssertionError):
        _assert_highlights(page.spans(), rows)
