"""The sandboxes a local backend sets up before they are needed, each held at its gate (:meth:`Sandbox.prepare`):
the next command's, set up while the current command runs, and once per episode, during its first command, the
test phase's (under the judge's daemon, which imports pytest: ~0.2 s of CPU off the path the agent waits on).

bubblewrap's set-up is ~7 ms per command; ahead, it overlaps the command before it. A held sandbox is used only if it
was set up for exactly the command that then runs (the sandbox checks), else discarded and a fresh one started, with
the same result. It costs two waiting sandboxes per episode, and the daemon's CPU where an episode ends without its
tests.

Example:
    >>> held = HeldSandboxes()
    >>> held.take_command() is None and held.take_tests() is None and held.take_test_run() is None
    True
"""

from __future__ import annotations

from r2v_envs.sandbox import PreparedRun
from r2v_envs.terminalbench.judge.phase import TestPhase


class HeldSandboxes:
    """At most one held command sandbox and one held test phase (its folder, planned, and its sandbox)."""

    def __init__(self) -> None:
        self.command: PreparedRun | None = None
        self.tests: TestPhase | None = None
        self.test_run: PreparedRun | None = None
        self.tests_wanted = False  # set the test phase up during the next command

    def take_command(self) -> PreparedRun | None:
        held, self.command = self.command, None
        return held

    def take_tests(self) -> TestPhase | None:
        """The held test phase: the caller owns (and removes) its folder; its sandbox stays held until
        :meth:`take_test_run`."""
        phase, self.tests = self.tests, None
        return phase

    def take_test_run(self) -> PreparedRun | None:
        held, self.test_run = self.test_run, None
        return held

    def discard(self) -> None:
        """End every held sandbox (their whole trees) and remove a held test phase's folder. Idempotent."""
        for held in (self.take_command(), self.take_test_run()):
            if held is not None:
                held.discard()
        phase = self.take_tests()
        if phase is not None:
            phase.remove()
        self.tests_wanted = False
