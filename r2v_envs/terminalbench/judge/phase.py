"""The test phase, one for every backend: what runs after an episode and how its verdict is read.

As Harbor's verifier does, the judge grades every backend the same way and asks each only to run and to copy
(:class:`TestHost`): the backend ends the agent's turn, shows the phase's folders where the test script expects
them (:class:`TestView`), runs the script, and brings the report folder back. The judge itself:

1. makes a fresh host folder (:func:`plan_test_phase`): a root-owned, read-only copy of the task's tests (never the
   agent's), fresh report folders (``out``, ``home``, ``logs/verifier``, ``logs/agent``) and, under the judge's
   daemon, a root-only ``verdict`` folder and the daemon's socket folder;
2. writes the script (``cd`` to the task's workdir, ``bash /tests/<script>``) and the harness' environment, with the
   offline runtime (:mod:`.runtime`) first on ``PATH``;
3. reads the verdict from the judge's own record (:mod:`.verdict`), never from what anyone printed: the daemon's
   verdict file where the backend runs the phase under the daemon (``view.daemon``), else pytest's JUnit XML.

Example:
    >>> import types
    >>> from r2v_envs.terminalbench.task import load_suite
    >>> task = load_suite()["greeting-cli"]
    >>> host = types.SimpleNamespace(test_view=lambda folder: TestView(
    ...     tests="/tests", out="/r2v-judge/out", home="/r2v-judge/home", runtime="/opt/rt", workdir="/app",
    ...     python="python3", path="/usr/bin:/bin", daemon=False))
    >>> phase = plan_test_phase(task, host)
    >>> phase.script.splitlines()[1:], phase.env["PATH"], (phase.folder / "tests" / "run-tests.sh").is_file()
    (['cd /app', 'bash /tests/run-tests.sh'], '/opt/rt/bin:/usr/bin:/bin', True)
    >>> phase.remove()
"""

from __future__ import annotations

import shlex
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from r2v_envs.terminalbench.judge.runtime import RUNTIME_MOUNT
from r2v_envs.terminalbench.judge.verdict import (
    ScriptRun,
    TestRun,
    junit_info,
    named_test_files,
    parse_pytest_summary,
    read_junit,
    read_verdict,
)
from r2v_envs.terminalbench.task import TerminalTask

JUDGE_DIR = "/r2v-judge"  # the test phase's report folder and HOME, made fresh for it
VERDICT_MOUNT = "/.r2v-verdict"  # root-only (0700): the daemon's verdict file, out of the test phase's reach
JUDGE_SOCKET = f"{JUDGE_DIR}/sock/judge.sock"  # in a root-owned folder: test processes may call, not replace it
JUDGE_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")  # all the judge's daemon keeps of root's capabilities
_FOLDERS = ("out", "home", "logs/verifier", "logs/agent", "verdict", "sock")
_TEST_PROCESS_FOLDERS = ("out", "home", "logs", "logs/verifier", "logs/agent")  # written by the test process only


@dataclass(frozen=True)
class TestView:
    """Where a backend shows a test phase's folders to the test script, and what the script runs with."""

    tests: str  # the trusted tests (``$TEST_DIR``)
    out: str  # the JUnit report folder (``$R2V_JUDGE_OUT``; unused under the daemon)
    home: str  # ``$HOME``
    runtime: str  # the offline test runtime
    workdir: str  # where the script starts (the task's WORKDIR)
    python: str  # the interpreter the runtime's pytest runs on
    path: str  # the image's ``PATH`` (the runtime's ``bin`` goes first)
    daemon: bool  # the phase runs under the judge's daemon: the verdict file, not JUnit, decides
    env: Mapping[str, str] = field(default_factory=dict)  # the image's environment, under the harness' variables


class TestHost(Protocol):
    """What a backend does for the judge: run and copy, nothing about verdicts."""

    task: TerminalTask

    def test_view(self, folder: Path) -> TestView:
        """Where this backend will show ``folder``'s parts to the test script."""

    def begin_tests(self) -> TestPhase | None:
        """End the agent's turn (its processes, its sandbox set up ahead); a phase planned ahead, if any."""

    def run_test_script(self, phase: TestPhase) -> ScriptRun:
        """Run ``phase.script`` with ``phase.env`` (the tests in place, read-only to the test processes)."""

    def fetch_reports(self, phase: TestPhase) -> None:
        """Bring the report folder back to ``phase.folder / "out"`` (nothing to do where it is the host's)."""


@dataclass
class TestPhase:
    """A test phase planned on the host: its folder, the view the backend gave of it, its script and environment."""

    task: TerminalTask
    folder: Path
    view: TestView
    script: str
    env: dict[str, str]

    @property
    def script_name(self) -> str:
        return "test.sh" if self.task.format == "harbor" else "run-tests.sh"

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)


def plan_test_phase(task: TerminalTask, host: TestHost) -> TestPhase:
    """The phase's host folder (a fresh root-owned copy of the tests, the report folders), script and environment."""
    folder = Path(tempfile.mkdtemp(prefix=f"r2v-tb-judge-{task.task_id}-"))
    tests = folder / "tests"
    shutil.copytree(task.tests_dir, tests, symlinks=False)
    if task.format != "harbor":
        shutil.copy2(task.run_tests_script, tests / "run-tests.sh")
    for sub in _FOLDERS:
        (folder / sub).mkdir(parents=True)
    folder.chmod(0o755)
    (folder / "verdict").chmod(0o700)  # root's alone: the daemon writes here, no test-phase process can
    for path in [tests, *tests.rglob("*")]:  # readable by the test process, writable by no one but root
        path.chmod(0o755 if path.is_dir() else 0o644 | (path.stat().st_mode & 0o111))
    for sub in _TEST_PROCESS_FOLDERS:
        (folder / sub).chmod(0o1777)
    view = host.test_view(folder)
    env = {**view.env, "TEST_DIR": view.tests, "R2V_TRUSTED_TESTS": view.tests, "HOME": view.home,
           "R2V_TEST_PYTHON": view.python, "PATH": f"{view.runtime}/bin:{view.path}",
           "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if view.daemon:
        env["R2V_JUDGE_SOCKET"] = JUDGE_SOCKET
    else:
        env["R2V_JUDGE_OUT"] = view.out
    phase = TestPhase(task, folder, view, "", env)
    phase.script = f"exec 2>&1\ncd {shlex.quote(view.workdir)}\nbash {shlex.quote(view.tests)}/{phase.script_name}\n"
    return phase


def daemon_launcher() -> list[str]:
    """The judge's daemon as a sandbox's launcher (``{uid}``: the uid it drops the test processes to)."""
    return [sys.executable, "-I", f"{RUNTIME_MOUNT}/lib/r2v_judged.py", "{uid}", f"{VERDICT_MOUNT}/verdict.jsonl",
            JUDGE_SOCKET, f"{RUNTIME_MOUNT}/site", "/tests", f"{RUNTIME_MOUNT}/pytest.ini", "--"]


def run_tests(host: TestHost) -> TestRun:
    """The judge: end the agent's turn on ``host``, run the task's tests there, and read the verdict."""
    phase = host.begin_tests() or plan_test_phase(host.task, host)
    try:
        script = host.run_test_script(phase)
        host.fetch_reports(phase)
        return read_phase(phase, script)
    finally:
        phase.remove()


def read_phase(phase: TestPhase, script: ScriptRun) -> TestRun:
    """The verdict of a finished phase (a timed-out phase has no results: a slow test suite is not a pass)."""
    if phase.view.daemon:
        named = named_test_files((phase.folder / "tests" / phase.script_name).read_text(errors="replace"),
                                 phase.folder / "tests")
        results, runs = read_verdict(phase.folder / "verdict" / "verdict.jsonl", expected_files=named)
        info = {"report": "verdict", "tamper_proof": True, "printed_summary": parse_pytest_summary(script.output),
                **runs}
    else:
        results = read_junit(phase.folder / "out")
        info = junit_info(phase.folder / "out", script.output)
    return TestRun(script.output, script.exit_code, script.timed_out, script.wall_time_s,
                   results={} if script.timed_out else results, judge=info)
