"""Shared test support, one module per concept: paths (here), miniature runs, tiny models, router rows, the
runner tests' scripted runs, a stand-in sampler, perturbation traces, an OpenAI-compatible test server and process
helpers. Test modules import helpers from here, never from one another."""

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
ROOT = TESTS.parent
DATA = TESTS / "data"
