"""The scripts under ``examples/`` (not a package: a user runs them as files) loaded as modules for a test."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> ModuleType:
    """``examples/<name>.py`` as a module (loaded once per process)."""
    key = f"r2v_examples.{name}"
    if key not in sys.modules:
        spec = importlib.util.spec_from_file_location(key, EXAMPLES / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[key] = module  # dataclasses resolve their module's annotations through sys.modules
        spec.loader.exec_module(module)
    return sys.modules[key]
