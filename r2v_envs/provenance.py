"""Where a run's outputs came from: package versions and the git revision, recorded in every manifest.

Example:
    >>> v = package_versions(); "python" in v and "gymnasium" in v
    True
"""

from __future__ import annotations

import os
import subprocess
import sys


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
