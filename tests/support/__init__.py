"""Shared test support: paths, miniature runs, tiny models, router rows, an OpenAI-compatible test server and
process helpers (one module each)."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"
