"""The verdict: which tests passed, read from the judge's own record of its pytest runs, never from what anyone
printed, and pytest's semantics over it (:func:`tests_passed`).

Two records, one reader per record: the verdict file that the judge's daemon writes where no test-phase process can
reach it (:func:`read_verdict`, under bubblewrap started by root; see :mod:`.inside.daemon`), and elsewhere pytest's
JUnit XML in a folder made fresh for the test phase (:func:`read_junit`). Statuses follow pytest: ``passed``,
``failed``, ``error``, ``skipped``, ``xfailed``, ``xpassed``. :func:`parse_pytest_summary` reads pytest's printed
"short test summary info" (``-rA``), for display only: printed text can be forged.

Example:
    >>> import tempfile, pathlib
    >>> d = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (d / "junit-1.xml").write_text('<testsuites><testsuite name="pytest">'
    ...     '<testcase classname="test_outputs" name="test_a"/>'
    ...     '<testcase classname="test_outputs" name="test_b"><failure message="x"/></testcase>'
    ...     '</testsuite></testsuites>')
    >>> read_junit(d)
    {'test_outputs::test_a': 'passed', 'test_outputs::test_b': 'failed'}
    >>> out = '''=== short test summary info ===
    ... PASSED tests/test_outputs.py::test_a
    ... FAILED tests/test_outputs.py::test_b - assert 1 == 2
    ... === 1 failed, 1 passed in 0.1s ==='''
    >>> parse_pytest_summary(out)
    {'test_outputs.py::test_a': 'passed', 'test_outputs.py::test_b': 'failed'}
    >>> tests_passed(parse_pytest_summary(out)), tests_passed({})
    (False, False)
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_MAX_REPORT_BYTES = 20 << 20
_SUMMARY_HEADER = re.compile(r"=+ short test summary info =+")
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")


@dataclass(frozen=True)
class ScriptRun:
    """How a script ended (its output is for display only)."""

    output: str
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool
    wall_time_s: float


@dataclass(frozen=True)
class TestRun(ScriptRun):
    """The test phase: how the script ended, and the verdict's source, the judge's record."""

    results: Mapping[str, str] = field(default_factory=dict)  # test -> status, from the judge's record
    judge: Mapping[str, Any] = field(default_factory=dict)  # how it was judged (report, refused files, ...)


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


def parse_pytest_summary(output: str) -> dict[str, str]:
    """Test name -> status from pytest's ``-rA`` short summary (the last one in ``output``)."""
    parts = _SUMMARY_HEADER.split(output)
    if len(parts) < 2:
        return {}
    results: dict[str, str] = {}
    for line in parts[-1].splitlines():
        m = _SUMMARY_LINE.match(line.strip())
        if m:
            name = m.group(2).split("/")[-1]
            results[name] = m.group(1).lower()
    return results


def tests_passed(results: Mapping[str, str]) -> bool:
    """pytest's own verdict (exit status 0 with tests run): resolved when at least one test ran (passed,
    xfailed or xpassed) and none failed or errored; skipped tests neither fail nor resolve a task. An empty
    report fails. ``xpass`` under ``strict`` arrives as ``failed``, as pytest reports it.

    Example:
        >>> tests_passed({"a": "passed", "b": "skipped"}), tests_passed({"a": "skipped"})
        (True, False)
        >>> tests_passed({"a": "passed", "b": "xfailed", "c": "xpassed"}), tests_passed({"a": "passed", "b": "error"})
        (True, False)
    """
    statuses = {_ALIASES.get(s, s) for s in results.values()}
    return bool(statuses & {"passed", "xfailed", "xpassed"}) and not statuses & {"failed", "error"}


_ALIASES = {"xfail": "xfailed", "xpass": "xpassed"}  # parse_pytest_summary's words


def junit_info(out_dir: Path, output: str) -> dict[str, Any]:
    """How a JUnit verdict was reached: the reports read, the files the judge's plugin refused to import, and what
    the script printed (for comparison only, never the verdict: anything can print it)."""
    refused: list[str] = []
    for path in sorted(out_dir.glob("judge-*.json")):
        try:
            refused += json.loads(path.read_text()).get("refused", [])
        except (OSError, ValueError, AttributeError):
            pass
    return {"report": "junit", "reports": len(list(out_dir.glob("junit-*.xml"))), "tamper_proof": False,
            "refused_files": sorted(set(map(str, refused))), "printed_summary": parse_pytest_summary(output)}
