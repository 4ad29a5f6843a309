"""The offline test runtime and the judge's report: how a task's tests run after an episode, and how they are read.

:func:`build_test_runtime` builds (once, atomically, under ``$R2V_CACHE/terminalbench-runtime/<digest>``) a folder that
both backends mount read-only at :data:`RUNTIME_MOUNT` for the test phase only:

* ``build-bin/``: no-ops for image set-up a Dockerfile's ``RUN`` steps do (``useradd``, ``chown``, ...).
* ``bin/``: ``uv``, ``uvx``, ``pytest``, ``python``/``python3``, ``pip``/``pip3``, ``curl``/``wget``, ``apt-get`` (see
  :mod:`r2v_envs.terminalbench.shim`): upstream test scripts' network bootstrap maps onto the judge's pytest and
  says what it skipped; ``curl ... astral.sh/uv ... | sh`` gets a no-op installer.
* ``site/``: a copy of the host's pytest and its pure-Python dependencies plus the judge plugin
  (:mod:`r2v_envs.terminalbench.judge_plugin`), put first on ``sys.path`` of ``python -I``: the same pytest
  serves a task container whose image has none (the Docker backend).
* ``pytest.ini``: the judge's (empty) configuration, so ini files and ``addopts`` in the agent's folder are
  never read.

The verdict comes from the judge's own record of its pytest runs: under bubblewrap the verdict file that the
judge's daemon writes where no test-phase process can reach (:func:`read_verdict`, see
:mod:`r2v_envs.terminalbench.judge_daemon`), elsewhere pytest's JUnit XML in a folder created for the test
phase (:func:`read_junit`). Text the test script or the agent prints is never parsed. Statuses follow pytest:
``passed``, ``failed``, ``error``, ``skipped``, ``xfailed``, ``xpassed``.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "junit-1.xml").write_text('<testsuites><testsuite name="pytest">'
    ...     '<testcase classname="test_outputs" name="test_a"/>'
    ...     '<testcase classname="test_outputs" name="test_b"><failure message="x"/></testcase>'
    ...     '</testsuite></testsuites>')
    >>> read_junit(d)
    {'test_outputs::test_a': 'passed', 'test_outputs::test_b': 'failed'}
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from r2v_envs.core import cache_dir
from r2v_envs.terminalbench.shim import NOOPS

RUNTIME_MOUNT = "/opt/r2v-test-runtime"
COMMANDS = ("uv", "uvx", "pytest", "py.test", "python", "python3", "pip", "pip3", "curl", "wget", "apt-get", "apt")
# pytest and what it imports at run time (pure Python, so the copy also runs on a container's interpreter).
SITE_DISTRIBUTIONS = ("pytest", "pluggy", "iniconfig", "packaging", "pygments", "exceptiongroup", "tomli")
_HERE = Path(__file__).parent
_MAX_REPORT_BYTES = 20 << 20
_WRAPPER = """#!/bin/sh
# r2v offline test runtime: {name} (see r2v_envs/terminalbench/shim.py)
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
    for name in ("shim.py", "judge_plugin.py", "judge_daemon.py"):
        h.update((_HERE / name).read_bytes())
    h.update(_WRAPPER.encode())
    for name in SITE_DISTRIBUTIONS:
        try:
            h.update(f"{name}={importlib.metadata.version(name)}".encode())
        except importlib.metadata.PackageNotFoundError:
            pass
    return h.hexdigest()[:16]


def build_test_runtime(root: str | os.PathLike | None = None) -> Path:
    """The runtime folder (built on first use; rebuilt when the shim, the plugin or pytest changes).

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
        shutil.copy2(_HERE / "shim.py", tmp / "lib" / "r2v_shim.py")
        shutil.copy2(_HERE / "judge_daemon.py", tmp / "lib" / "r2v_judged.py")
        shutil.copy2(_HERE / "judge_plugin.py", tmp / "site" / "r2v_judge_plugin.py")
        for name in COMMANDS:
            (tmp / "bin" / name).write_text(_WRAPPER.format(name=name))
        (tmp / "build-bin").mkdir()
        for name in NOOPS:  # first on PATH for a Dockerfile's RUN steps only (see backends.LocalBackend)
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


def read_junit(folder: str | os.PathLike) -> dict[str, str]:
    """Test -> status (``passed``/``failed``/``error``/``skipped``) from every ``junit-*.xml`` in ``folder``
    (one per pytest run of the test script). A report that is not valid XML counts as one ``error``."""
    import xml.etree.ElementTree as ET

    results: dict[str, str] = {}
    for path in sorted(Path(folder).glob("junit-*.xml")):
        try:
            if path.stat().st_size > _MAX_REPORT_BYTES:
                raise ValueError("report too large")
            root = ET.fromstring(path.read_bytes())
        except (OSError, ValueError, ET.ParseError):
            results[f"{path.name}::<unreadable report>"] = "error"
            continue
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '')}::{case.get('name', '')}".lstrip(":")
            kinds = {child.tag: child for child in case}
            xfail = "skipped" in kinds and kinds["skipped"].get("type") == "pytest.xfail"
            status = ("failed" if "failure" in kinds else "error" if "error" in kinds
                      else "xfailed" if xfail else "skipped" if "skipped" in kinds else "passed")
            _merge(results, name, status)
    return results


_BAD = ("failed", "error")


def _merge(results: dict[str, str], name: str, status: str) -> None:
    """The same test run twice (two pytest runs of the script): any failure counts."""
    if results.get(name) not in _BAD:
        results[name] = status


def _test_status(reports: list[tuple[str, str, bool]]) -> str:
    """One test's status from its (phase, outcome, wasxfail) reports, as pytest's summary counts it."""
    if any(outcome == "failed" and when != "call" for when, outcome, _ in reports):
        return "error"
    call = [(outcome, xfail) for when, outcome, xfail in reports if when == "call"]
    if call:
        outcome, xfail = call[-1]
        return {"failed": "failed", "skipped": "xfailed" if xfail else "skipped",
                "passed": "xpassed" if xfail else "passed"}.get(outcome, "error")
    skipped = [xfail for _when, outcome, xfail in reports if outcome == "skipped"]
    return ("xfailed" if skipped[-1] else "skipped") if skipped else "error"


_PY_WORD = re.compile(r"[\w./${}-]*\.py\b")


def named_test_files(script: str, tests_dir: str | os.PathLike) -> list[str]:
    """The pytest files (``test_*.py``, ``*_test.py``) the task's test script names that its tests folder
    holds, relative to that folder (as the judge's node ids are: its rootdir is the tests folder).

    A script names them as ``/tests/x.py``, ``$TEST_DIR/x.py`` or ``x.py``; each must then be run by the judge
    (:func:`read_verdict`), so a trojan cannot ask for one file of several and leave out the one that fails.

    Example:
        >>> import tempfile, pathlib
        >>> d = pathlib.Path(tempfile.mkdtemp()); _ = [(d / n).write_text("") for n in ("test_a.py", "b_test.py")]
        >>> named_test_files("pytest /tests/test_a.py ${TEST_DIR}/b_test.py /app/test_c.py helper.py", d)
        ['b_test.py', 'test_a.py']
    """
    root, named = Path(tests_dir), set()
    for word in _PY_WORD.findall(script):
        rel = word.split("/tests/")[-1] if "/tests/" in word else re.sub(r"^\$\{?TEST_DIR\}?/", "", word)
        name = os.path.basename(rel)
        if (name.startswith("test_") or name.endswith("_test.py")) and not rel.startswith(("/", "$")) \
                and (root / rel).is_file():
            named.add(rel)
    return sorted(named)


def read_verdict(path: str | os.PathLike,
                 expected_files: Sequence[str] = ()) -> tuple[dict[str, str], dict[str, Any]]:
    """``(test -> status, about the runs)`` from the judge daemon's verdict file.

    Every pytest run the daemon started counts: a run that did not finish (killed, crashed, left running
    when the script ended) and a run that selected a subset of the tests add an ``error`` entry, so neither
    can hide a failing test; collection errors are errors too. Each of ``expected_files`` (the test files the
    task's script names, :func:`named_test_files`) that no finished run collected is an error as well.

    Example:
        >>> import json, tempfile, os
        >>> f = os.path.join(tempfile.mkdtemp(), "verdict.jsonl")
        >>> lines = [dict(run=1, event="start", partial=[]),
        ...          dict(run=1, event="report", nodeid="t.py::a", when="call", outcome="passed", xfail=False),
        ...          dict(run=1, event="report", nodeid="t.py::b", when="setup", outcome="skipped", xfail=False),
        ...          dict(run=1, event="finish", exitstatus=0), dict(run=1, event="exit", code=0)]
        >>> _ = open(f, "w").write("".join(json.dumps(x) + "\\n" for x in lines))
        >>> read_verdict(f)[0]
        {'t.py::a': 'passed', 't.py::b': 'skipped'}
    """
    runs: dict[int, dict[str, Any]] = {}
    try:
        text = Path(path).read_bytes()[:_MAX_REPORT_BYTES * 5].decode("utf-8", errors="replace")
    except OSError:
        text = ""
    for line in text.splitlines():
        try:
            msg = json.loads(line)
            n = int(msg.get("run", 0))
        except (ValueError, TypeError, AttributeError):
            continue
        if not n:
            continue
        run = runs.setdefault(n, {"tests": {}, "partial": [], "finished": False, "exit": None, "refused": [],
                                  "errors": []})
        event = msg.get("event")
        if event == "report":
            run["tests"].setdefault(str(msg.get("nodeid")), []).append(
                (str(msg.get("when")), str(msg.get("outcome")), bool(msg.get("xfail"))))
        elif event == "start":
            run["partial"] += [str(p) for p in msg.get("partial") or []]
        elif event == "deselected" and msg.get("n"):
            run["partial"].append(f"{msg['n']} test(s) deselected")
        elif event == "collect_error":
            run["errors"].append(str(msg.get("nodeid")))
        elif event == "refused":
            run["refused"].append(str(msg.get("path")))
        elif event == "finish":
            run["finished"] = True
        elif event == "exit":
            run["exit"] = msg.get("code")
    results: dict[str, str] = {}
    for n, run in sorted(runs.items()):
        for nodeid, reports in run["tests"].items():
            _merge(results, nodeid, _test_status(reports))
        for nodeid in run["errors"]:
            _merge(results, f"{nodeid}::<collection error>", "error")
        if not run["finished"] or run["exit"] is None:
            _merge(results, f"<pytest run {n}>::<did not finish>", "error")
        if run["partial"]:
            _merge(results, f"<pytest run {n}>::<partial selection: {'; '.join(run['partial'])}>", "error")
    whole = [r for r in runs.values() if r["finished"] and not r["partial"]]
    ran = {nodeid.split("::")[0] for r in whole for nodeid in r["tests"]}
    missing = [f for f in expected_files if f not in ran]
    for f in missing:
        _merge(results, f"{f}::<named by the test script, never run>", "error")
    info = {"runs": len(runs), "missing_files": missing,
            "refused_files": sorted({f for r in runs.values() for f in r["refused"]}),
            "partial_runs": [n for n, r in runs.items() if r["partial"]],
            "unfinished_runs": [n for n, r in runs.items() if not r["finished"] or r["exit"] is None]}
    return results, info
