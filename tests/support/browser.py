"""Opening spanjudge's HTML pages in a real headless Chromium (Debian's `chromium`, driven by
Playwright; nothing is downloaded at run time), offline, and reading back what a reader sees.

`.ci/run` installs Chromium where it is missing; `SPANJUDGE_CHROMIUM` points at another build.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

PHONE = {"width": 375, "height": 740}
DESKTOP = {"width": 1280, "height": 900}

# Each highlighted span of each output: where it sits in the output's text as the browser shows
# it, counted in Unicode code points as Python counts offsets (a JS string counts UTF-16 units).
SPANS_JS = """() => [...document.querySelectorAll('.output')].map(output => {
  const marks = [...output.querySelectorAll('mark')];
  return {
    text: output.textContent,
    marks: marks.map(mark => {
      const before = document.createRange();
      before.setStart(output, 0);
      before.setEndBefore(mark);
      const start = Array.from(before.toString()).length;
      return {start, end: start + Array.from(mark.textContent).length, text: mark.textContent,
              tip: mark.dataset.tip, described: mark.getAttribute('aria-describedby')};
    }),
  };
})"""


def chromium_executable() -> str:
    found = os.environ.get("SPANJUDGE_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if not found:
        pytest.fail(
            "the page tests need Chromium: `apt-get install chromium` (.ci/run installs it where missing), "
            "or point SPANJUDGE_CHROMIUM at a Chromium executable"
        )
    return found


@dataclass
class OpenedPage:
    page: Any  # playwright.sync_api.Page
    console_errors: list[str] = field(default_factory=list)
    network: list[str] = field(default_factory=list)  # requests that left the file itself

    def spans(self) -> list[dict[str, Any]]:
        return self.page.evaluate(SPANS_JS)

    def horizontal_overflow(self) -> int:
        """Pixels the page is wider than the window (a reader would have to scroll sideways)."""
        return self.page.evaluate("() => document.documentElement.scrollWidth - window.innerWidth")

    def after_content(self, selector: str) -> str:
        """The CSS ::after text of the first element matching `selector` ('none' when not shown)."""
        return self.page.evaluate("(s) => getComputedStyle(document.querySelector(s), '::after').content", selector)


@contextmanager
def opened(path: Path, viewport: dict[str, int] = DESKTOP) -> Iterator[OpenedPage]:
    """`path` opened from disk in headless Chromium with every network request refused."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium_executable(), args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport=viewport)
            result = OpenedPage(page)
            page.on("console", lambda m: result.console_errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: result.console_errors.append(str(e)))

            def refuse(route: Any) -> None:
                url = route.request.url
                if url.startswith(("file:", "data:")):
                    route.continue_()
                else:
                    result.network.append(url)
                    route.abort()

            page.route("**/*", refuse)
            page.goto(path.resolve().as_uri())
            yield result
        finally:
            browser.close()
