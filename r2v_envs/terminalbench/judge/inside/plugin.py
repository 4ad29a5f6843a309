"""The judge's pytest plugin: only the task's own test files and conftests run.

Copied into the offline test runtime as ``r2v_judge_plugin`` and loaded with ``-p r2v_judge_plugin``. Upstream
test scripts sometimes run pytest over the agent's working directory (``cd /app; cp $TEST_DIR/*_test.py .;
python -m pytest .``), where the agent could have planted a ``conftest.py`` or another ``test_*.py`` whose
import-time code rewrites every report to "passed". This plugin lets pytest import a ``.py`` file outside the
trusted tests folder (``$TEST_DIR``, a fresh root-owned copy) only when its bytes equal one of the trusted
files (the script copied it), and records what it refused in ``$R2V_JUDGE_OUT/judge-*.json``.
Standard library and pytest only: it runs inside the judge's isolated interpreter.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import types
from pathlib import Path

import pytest

_TRUSTED_DIR = Path(os.environ.get("R2V_TRUSTED_TESTS") or os.environ.get("TEST_DIR") or "/tests").resolve()
_refused: list[str] = []
_VERDICT_FD = os.environ.pop("R2V_VERDICT_FD", None)


def _send(**message) -> None:
    if _VERDICT_FD is None:
        return
    data = (json.dumps(message, default=str) + "\n").encode()
    while data:
        data = data[os.write(int(_VERDICT_FD), data):]


def _digest(path: Path) -> str | None:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


@functools.lru_cache(maxsize=1)
def _trusted_digests() -> frozenset[str]:
    return frozenset(d for p in _TRUSTED_DIR.rglob("*") if p.is_file() for d in [_digest(p)] if d)


def trusted(path: os.PathLike | str) -> bool:
    """A file inside the trusted tests folder, or a byte-identical copy of one."""
    path = Path(path).resolve()
    if path == _TRUSTED_DIR or _TRUSTED_DIR in path.parents:
        return True
    return _digest(path) in _trusted_digests()


def _refuse(path) -> None:
    name = os.path.basename(str(path))
    if not (name == "conftest.py" or name.startswith("test") or name.endswith("_test.py")):
        return  # a module no test collection would import anyway (e.g. the solution)
    _refused.append(str(path))
    _send(event="refused", path=str(path))
    out = os.environ.get("R2V_JUDGE_OUT")
    if out:
        with open(os.path.join(out, f"judge-{os.getpid()}.json"), "w") as f:
            json.dump({"refused": _refused}, f)


def pytest_addoption(parser, pluginmanager) -> None:
    # Called as soon as this plugin registers (before any conftest is imported): guard conftest imports.
    original = pluginmanager._importconftest

    def guarded(conftestpath, *args, **kwargs):
        if not trusted(conftestpath):
            _refuse(conftestpath)
            return types.ModuleType("r2v_refused_conftest")
        return original(conftestpath, *args, **kwargs)

    pluginmanager._importconftest = guarded


class _Refused(pytest.File):
    """What an untrusted test module collects: nothing (and it is never imported)."""

    def collect(self):
        return []


@pytest.hookimpl(tryfirst=True)
def pytest_pycollect_makemodule(module_path, parent):
    # Also for paths given on the command line, which pytest never passes to pytest_ignore_collect: anyone in
    # the test phase may ask the judge's daemon for a run of its own.
    if not trusted(module_path):
        _refuse(module_path)
        return _Refused.from_parent(parent, path=module_path)
    return None


def pytest_ignore_collect(collection_path, config):
    if collection_path.suffix == ".py" and collection_path.is_file() and not trusted(collection_path):
        _refuse(collection_path)
        return True
    return None


def pytest_configure(config) -> None:
    opt = config.option
    partial = [f"{flag} {value}" for flag, value in (("-k", getattr(opt, "keyword", "")),
                                                     ("-m", getattr(opt, "markexpr", "")),
                                                     ("--deselect", getattr(opt, "deselect", None)),
                                                     ("--ignore", getattr(opt, "ignore", None)),
                                                     ("--ignore-glob", getattr(opt, "ignore_glob", None))) if value]
    partial += [f"node id {a}" for a in config.args if "::" in a]
    _send(event="start", args=[str(a) for a in config.args], partial=partial)


def pytest_deselected(items) -> None:
    _send(event="deselected", n=len(items))


def pytest_collectreport(report) -> None:
    if report.failed:
        _send(event="collect_error", nodeid=report.nodeid or "<collection>")


def pytest_runtest_logreport(report) -> None:
    _send(event="report", nodeid=report.nodeid, when=report.when, outcome=report.outcome,
          xfail=hasattr(report, "wasxfail"))


def pytest_sessionfinish(session, exitstatus) -> None:
    _send(event="finish", exitstatus=int(exitstatus), collected=int(getattr(session, "testscollected", 0)))
