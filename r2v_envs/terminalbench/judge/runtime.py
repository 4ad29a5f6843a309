"""The offline test runtime: what a task's test phase runs with, on every backend.

:func:`build_test_runtime` builds (once, atomically, under ``$R2V_CACHE/terminalbench-runtime/<digest>``) a folder that
both backends mount read-only at :data:`RUNTIME_MOUNT`:

* ``build-bin/``: no-ops for image set-up a Dockerfile's ``RUN`` steps do (``useradd``, ``chown``, ...).
* ``bin/``: ``uv``, ``uvx``, ``pytest``, ``python``/``python3``, ``pip``/``pip3``, ``curl``/``wget``, ``apt-get`` (see
  :mod:`.inside.shim`): upstream test scripts' network bootstrap maps onto the judge's pytest and says what it
  skipped; ``curl ... astral.sh/uv ... | sh`` gets a no-op installer.
* ``lib/``: the shim and the judge's daemon (:mod:`.inside.daemon`), run with ``python -I``.
* ``site/``: a copy of the host's pytest and its pure-Python dependencies plus the judge plugin
  (:mod:`.inside.plugin`), put first on ``sys.path`` of ``python -I``: the same pytest serves a task container whose
  image has none (the Docker backend).
* ``pytest.ini``: the judge's (empty) configuration, so ini files and ``addopts`` in the agent's folder are
  never read.

Example:
    >>> rt = build_test_runtime()
    >>> sorted(p.name for p in rt.iterdir())
    ['bin', 'build-bin', 'complete', 'lib', 'pytest.ini', 'site']
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from r2v_envs.core import cache_dir
from r2v_envs.terminalbench.judge.inside.shim import NOOPS

RUNTIME_MOUNT = "/opt/r2v-test-runtime"
COMMANDS = ("uv", "uvx", "pytest", "py.test", "python", "python3", "pip", "pip3", "curl", "wget", "apt-get", "apt")
# pytest and what it imports at run time (pure Python, so the copy also runs on a container's interpreter).
SITE_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments", "exceptiongroup", "tomli")
_INSIDE = Path(__file__).parent / "inside"  # stdlib-only programs copied into the runtime
_FILES = {"shim.py": "lib/r2v_shim.py", "daemon.py": "lib/r2v_judged.py", "plugin.py": "site/r2v_judge_plugin.py"}
_WRAPPER = """#!/bin/sh
# r2v offline test runtime: {name} (see r2v_envs/terminalbench/judge/inside/shim.py)
RT=$(CDPATH= cd -- "$(dirname -- "$0")/.." && pwd)
# Start the interpreter in the read-only runtime, not the agent's folder: a relative sys.path entry (an
# editable install's path hook) would otherwise import a sitecustomize.py the agent planted there.
R2V_CWD=$PWD; export R2V_CWD
cd "$RT" || exit 1
exec "${{R2V_TEST_PYTHON:-python3}}" -I "$RT/lib/r2v_shim.py" {name} "$@"
"""


def _dist_files(name: str) -> list[tuple[Path, str]]:
    """(absolute source, path relative to site-packages) of an installed distribution's importable files."""
    try:
        dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
        return []
    out = []
    for f in dist.files or ():
        rel = str(f)
        if rel.startswith("..") or ".dist-info" in rel.split("/")[0] or rel.endswith(".pyc") or "/bin/" in rel:
            continue
        out.append((Path(dist.locate_file(f)), rel))
    return out


@functools.cache  # once per process: it reads package metadata, ~7 ms, and a reset asked for it twice
def _digest() -> str:
    h = hashlib.sha256()
    for name in _FILES:
        h.update((_INSIDE / name).read_bytes())
    h.update(_WRAPPER.encode())
    for name in SITE_DISTRIBUTIONS:
        try:
            h.update(f"{name}={importlib.metadata.version(name)}".encode())
        except importlib.metadata.PackageNotFoundError:
            pass
    return h.hexdigest()[:16]


def build_test_runtime(root: str | os.PathLike | None = None) -> Path:
    """The runtime folder (built on first use; rebuilt when the shim, the plugin, the daemon or pytest changes).

    Files are read-only (0444/0555) and the backends only ever mount the folder read-only, so neither the
    agent nor a test script can change it.
    """
    base = Path(root) if root is not None else cache_dir("terminalbench-runtime")
    target = base / _digest()
    if (target / "complete").is_file():
        return target
    base.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".build-", dir=base))
    try:
        (tmp / "bin").mkdir()
        (tmp / "lib").mkdir()
        (tmp / "site").mkdir()
        for name, rel in _FILES.items():
            shutil.copy2(_INSIDE / name, tmp / rel)
        for name in COMMANDS:
            (tmp / "bin" / name).write_text(_WRAPPER.format(name=name))
        (tmp / "build-bin").mkdir()
        for name in NOOPS:  # first on PATH for a Dockerfile's RUN steps only (see backends.build)
            (tmp / "build-bin" / name).write_text(_WRAPPER.format(name=name))
        for dist in SITE_DISTRIBUTIONS:
            for src, rel in _dist_files(dist):
                if src.is_file():
                    dst = tmp / "site" / rel
                    dst.parent.mkdir(parents=True, exist_ok=True)
                    shutil.copyfile(src, dst)
        if not (tmp / "site" / "pytest").is_dir():
            raise RuntimeError("the offline test runtime needs pytest installed on the host (pip install pytest)")
        (tmp / "pytest.ini").write_text("[pytest]\n# the judge's configuration: nothing from the task folder\n")
        (tmp / "complete").write_text(_digest() + "\n")
        for path in [*tmp.rglob("*")]:
            if path.is_dir():
                path.chmod(0o555)
            else:
                path.chmod(0o555 if path.parent.name in ("bin", "build-bin") else 0o444)
        tmp.chmod(0o555)
        try:
            tmp.rename(target)
        except OSError:  # another process finished first: use its copy
            _rmtree(tmp)
    except BaseException:
        _rmtree(tmp)
        raise
    return target


def _rmtree(path: Path) -> None:
    def unlock(func, p, _exc):
        os.chmod(os.path.dirname(p), 0o755)
        os.chmod(p, stat.S_IWUSR | stat.S_IRUSR | stat.S_IXUSR)
        func(p)

    if sys.version_info >= (3, 12):
        shutil.rmtree(path, onexc=unlock)
    else:
        shutil.rmtree(path, onerror=unlock)
