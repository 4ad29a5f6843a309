"""Collection rules for the whole tree (``--doctest-modules`` imports every module of the packages).

Modules of optional extras that need their package at import time are left out of collection where that extra is not
installed, instead of failing the run: the tests of those extras skip with a reason of their own.
"""

from __future__ import annotations

import importlib.util

# module -> the package it needs at import time (its extra)
_NEEDS = {"r2v_eval/inspect_tasks.py": "inspect_ai"}

collect_ignore = [path for path, package in _NEEDS.items() if importlib.util.find_spec(package) is None]
