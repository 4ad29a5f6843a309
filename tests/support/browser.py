"""Headless Chromium through Playwright for the viewer's browser tests and benchmark.

Playwright's own browser downloads are not reachable from every machine (nor needed): it launches the system
Chromium (Debian's ``chromium`` package, which scripts/install.sh installs) through ``executable_path``.
:func:`skip_reason` says why the tests cannot run here (no ``playwright`` package, no Chromium binary), and
:class:`PageLog` keeps what a page reported that a test must see empty: console errors, uncaught exceptions and
JavaScript dialogs (an injected ``alert`` that ran would open one).
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

BROWSERS = ("chromium", "chromium-browser", "google-chrome", "chrome")
# no GPU, a small /dev/shm in containers, and root without a user namespace: Chromium's usual container flags
CHROMIUM_ARGS = ("--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage")


def find_chromium() -> str | None:
    return next((p for b in BROWSERS if (p := shutil.which(b))), None)


def skip_reason() -> str | None:
    """Why the browser tests cannot run here, or None when they can."""
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[test]')"
    if find_chromium() is None:
        return ("no Chromium binary on PATH (Debian: apt-get install -y chromium; scripts/install.sh does it as "
                "root); Playwright launches the system browser, it downloads none")
    return None


class PageLog:
    """Console errors, uncaught exceptions and dialogs of one page since the last :meth:`clear`."""

    def __init__(self, page: Any):
        self.errors: list[str] = []
        self.dialogs: list[str] = []
        page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error", "assert") else None)
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("dialog", self._dialog)

    def _dialog(self, dialog: Any) -> None:
        self.dialogs.append(f"{dialog.type}: {dialog.message}")
        dialog.dismiss()

    def clear(self) -> None:
        self.errors.clear()
        self.dialogs.clear()


@contextmanager
def chromium() -> Iterator[Any]:
    """A Playwright browser on the system Chromium (``with chromium() as browser: page = browser.new_page()``)."""
    from playwright.sync_api import sync_playwright

    binary = find_chromium()
    if binary is None:
        raise FileNotFoundError("no chromium binary on PATH")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=binary, headless=True, args=list(CHROMIUM_ARGS))
        try:
            yield browser
        finally:
            browser.close()
