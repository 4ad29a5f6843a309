"""What every Terminal-Bench backend does: start a fresh copy of a task, run the agent's commands in a persistent
shell session, run and copy for the judge, close.

The session protocol is the same on every backend, on top of one-shot command execution: each command runs in a
fresh ``bash`` that first restores the session (working directory and exported variables, saved by the previous
command on exit), so ``cd`` and ``export`` carry over as in Terminal-Bench's tmux session, while every command keeps
its own deadline and whole-tree kill. Output is stdout and stderr interleaved.

Example:
    >>> split_cwd("hello\\n\\n" + CWD_SENTINEL + "/app/sub\\n")
    ('hello\\n', '/app/sub')
"""

from __future__ import annotations

import shlex
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from r2v_envs.terminalbench.judge.phase import TestPhase, TestView
from r2v_envs.terminalbench.judge.verdict import ScriptRun
from r2v_envs.terminalbench.task import TerminalTask

CWD_SENTINEL = "__R2V_CWD__:"
MAX_CAPTURE = 2_000_000  # bytes kept per command before the env's own (smarter) truncation
_HIDDEN_VARS = "R2V_SANDBOX_RUN|PWD|OLDPWD|SHLVL|_"


@dataclass(frozen=True)
class CommandResult(ScriptRun):
    """One agent command: how it ended, and the session's working directory after it."""

    cwd: str | None = None


def session_script(state_dir: str, start_dir: str) -> str:
    """Bash that restores the session, sources the command file, and saves the session on any exit."""
    s = shlex.quote(state_dir)
    return (f"exec 2>&1\ncd \"$(cat {s}/cwd 2>/dev/null || echo {shlex.quote(start_dir)})\" 2>/dev/null "
            f"|| cd {shlex.quote(start_dir)}\n[ -f {s}/env ] && . {s}/env\n"
            f"__r2v_save() {{ __r2v_rc=$?; pwd > {s}/cwd; "
            f"export -p | grep -Ev '^declare -x ({_HIDDEN_VARS})=' > {s}/env; "
            f"printf '\\n{CWD_SENTINEL}%s\\n' \"$(pwd)\"; exit $__r2v_rc; }}\n"
            f"trap __r2v_save EXIT\n. {s}/cmd.sh\n")


def split_cwd(output: str) -> tuple[str, str | None]:
    """Strip the session's trailing cwd sentinel from ``output``."""
    head, sep, tail = output.rpartition("\n" + CWD_SENTINEL)
    if not sep:
        return output, None
    return head, tail.strip() or None


class Backend(ABC):
    """One task episode's machine: :meth:`start` a fresh copy, :meth:`run` the agent's commands, :meth:`close`; and
    for the judge (:class:`r2v_envs.terminalbench.judge.phase.TestHost`), run and copy, nothing about verdicts."""

    name = "backend"
    task: TerminalTask | None = None

    @abstractmethod
    def start(self, task: TerminalTask) -> None: ...

    @abstractmethod
    def run(self, command: str, timeout_s: float) -> CommandResult: ...

    @abstractmethod
    def close(self) -> None: ...

    # the judge's side
    @abstractmethod
    def test_view(self, folder: Path) -> TestView: ...

    @abstractmethod
    def begin_tests(self) -> TestPhase | None: ...

    @abstractmethod
    def run_test_script(self, phase: TestPhase) -> ScriptRun: ...

    def fetch_reports(self, phase: TestPhase) -> None:
        """Nothing to fetch where the report folder is the host's own (the local backend)."""
