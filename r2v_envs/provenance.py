"""Where a run's outputs came from: package versions and the git revision, recorded in every manifest; the
machine and its load, recorded with every benchmark's figures.

Example:
    >>> v = package_versions(); "python" in v and "gymnasium" in v
    True
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any


def package_versions() -> dict[str, str]:
    from importlib import metadata

    out = {"python": sys.version.split()[0]}
    for pkg in ("r2v", "torch", "transformers", "trl", "peft", "datasets", "tokenizers", "textworld", "gymnasium",
                "pyarrow", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def git_revision() -> str | None:
    here = os.path.dirname(os.path.abspath(__file__))
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    if rev.returncode != 0:
        return None
    return rev.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def machine_load() -> dict[str, Any]:
    """The cores and the load average now, to open a benchmark's results (:func:`write_benchmark` closes them)."""
    return {"cores": os.cpu_count(), "load_before": os.getloadavg()}


def write_benchmark(results: dict[str, Any], out: str | None) -> dict[str, Any]:
    """Close a benchmark's results: the load average after, and ``loaded`` when the 1-minute load before or after
    was over half the cores (machines here differ up to 2x, and a loaded one more: compare only unloaded figures).
    Prints them as JSON and writes them to ``out`` if given."""
    results["load_after"] = os.getloadavg()
    results["loaded"] = max(results["load_before"][0], results["load_after"][0]) > 0.5 * (os.cpu_count() or 1)
    print(json.dumps(results, indent=1))
    if out:
        with open(out, "w") as fh:
            json.dump(results, fh, indent=1)
    return results
