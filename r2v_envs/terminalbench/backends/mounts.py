"""Where an episode's folders appear to the local backend's sandboxes: under bubblewrap at the task's own paths,
mounted folder by folder (:class:`r2v_envs.sandbox.isolation.MountPlan`); under the weaker levels at their host paths.

Under bubblewrap: the workdir at the task's ``WORKDIR`` (``/app``), the writable root at ``/opt``, ``/tmp``,
``/home``, ..., the tests at ``/tests``, the session folder at ``/.r2v-session``, the offline runtime read-only at its
mount and the host's ``/usr/local/bin`` read-only under ``/.r2v-host`` (the task's own ``/usr/local/bin`` links to
it). The copy itself is not mounted, so no command can rename or replace a mount's source.

Example:
    >>> import pathlib
    >>> from r2v_envs.terminalbench.task import load_suite
    >>> ws = Workspace("demo", uid=None)
    >>> paths = EpisodePaths(ws, load_suite()["greeting-cli"], pathlib.Path("/srv/rt"), mapped=True)
    >>> paths.app, paths.session, [dst for _src, dst in paths.agent_mounts().binds]
    ('/app', '/.r2v-session', ['/app', '/tests'])
    >>> ws.remove()
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from r2v_envs.sandbox.isolation import MountPlan
from r2v_envs.sandbox import minimal_env
from r2v_envs.terminalbench.backends.build import HOST_ALIAS, WRITABLE_SYSTEM, Layout
from r2v_envs.terminalbench.backends.workspace import Workspace
from r2v_envs.terminalbench.judge.phase import JUDGE_CAPS, JUDGE_DIR, JUDGE_SOCKET, VERDICT_MOUNT, TestPhase, TestView
from r2v_envs.terminalbench.judge.runtime import RUNTIME_MOUNT
from r2v_envs.terminalbench.task import HARBOR_SOLUTION_DIR, TerminalTask

SESSION_MOUNT = "/.r2v-session"  # the session folder (command file, saved cwd and variables) under bubblewrap


@dataclass(frozen=True)
class EpisodePaths:
    """An episode's folders as its sandboxes see them (``mapped``: bubblewrap's mounts, else host paths)."""

    workspace: Workspace
    task: TerminalTask
    runtime: Path  # the offline test runtime on the host
    mapped: bool

    @property
    def app(self) -> str:
        return self.task.workdir if self.mapped else str(self.workspace.app)

    @property
    def session(self) -> str:
        return SESSION_MOUNT if self.mapped else str(self.workspace.session)

    @property
    def runtime_at(self) -> str:
        return RUNTIME_MOUNT if self.mapped else str(self.runtime)

    @property
    def tests(self) -> str:
        return "/tests" if self.mapped else str(self.workspace.root / "tests")

    @property
    def home(self) -> str:
        """HOME as in the task's container (root's, in its writable root); elsewhere the scratch copy."""
        return "/root" if self.mapped else str(self.workspace.root)

    def base_path(self) -> str:
        return minimal_env(str(self.workspace.root))["PATH"]

    def layout(self) -> Layout:
        return Layout(self.workspace.app, self.workspace.writable_root, self.task.workdir, self.mapped)

    def _host(self) -> tuple[tuple[str, str], ...]:
        return ((str(self.runtime), RUNTIME_MOUNT),
                *((w, f"{HOST_ALIAS}{w}") for w in WRITABLE_SYSTEM if os.path.isdir(w)))

    def agent_mounts(self) -> MountPlan:
        """The agent's commands and the build's steps: the workdir, the writable root, the tests' and the solution's
        mount points (Harbor's oracle unpacks solution/ at /solution), the runtime."""
        if not self.mapped:
            return MountPlan()
        ws = self.workspace
        binds = [(str(ws.app), self.task.workdir), (str(ws.root / "tests"), "/tests")]
        if self.task.format == "harbor":
            binds.append((str(ws.root / "solution"), HARBOR_SOLUTION_DIR))
        return MountPlan(tops=tuple(self.layout().binds()), binds=tuple(binds), ro_binds=self._host(),
                         workdir_at=SESSION_MOUNT)

    def test_mounts(self, phase: TestPhase) -> MountPlan:
        """A test phase: the tests fresh and read-only, its report folders, and under the judge's daemon its verdict
        and socket folders and the capabilities it keeps."""
        if not self.mapped:
            return MountPlan()
        f, daemon = phase.folder, phase.view.daemon
        binds = [(str(self.workspace.app), self.task.workdir), (str(f / "home"), f"{JUDGE_DIR}/home"),
                 (str(f / "logs"), "/logs")]
        binds += ([(str(f / "verdict"), VERDICT_MOUNT), (str(f / "sock"), os.path.dirname(JUDGE_SOCKET))] if daemon
                  else [(str(f / "out"), f"{JUDGE_DIR}/out")])
        return MountPlan(tops=tuple(self.layout().binds()), binds=tuple(binds),
                         ro_binds=((str(f / "tests"), "/tests"), *self._host()), workdir_at=SESSION_MOUNT,
                         caps=JUDGE_CAPS if daemon else None)

    def test_view(self, folder: Path, env: dict[str, str], daemon: bool) -> TestView:
        """Where a test phase's folders appear (``daemon``: it runs under the judge's daemon)."""
        path = env.get("PATH") or self.base_path()
        if self.mapped:
            return TestView(tests="/tests", out=f"{JUDGE_DIR}/out", home=f"{JUDGE_DIR}/home", runtime=RUNTIME_MOUNT,
                            workdir=self.task.workdir, python=sys.executable, path=path, daemon=daemon, env=env)
        return TestView(tests=str(folder / "tests"), out=str(folder / "out"), home=str(folder / "home"),
                        runtime=str(self.runtime), workdir=str(self.workspace.app), python=sys.executable, path=path,
                        daemon=False, env=env)
