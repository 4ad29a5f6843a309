"""The local backend: a task in :class:`r2v_envs.sandbox.Sandbox` (bubblewrap, else ``unshare``, else rlimits) over
a scratch copy of its build.

The task's Dockerfile is interpreted by :mod:`.build` (``ENV``/``ARG`` expanded as Docker does, files copied or
written anywhere but the system folders, every ``RUN`` step run in the sandbox with installs mapped offline) and
cached per task. The copy (:mod:`.workspace`) appears to the sandbox folder by folder at the task's own paths under
bubblewrap, at its host paths under the weaker levels (``$APP_DIR``), where writes outside the workdir fail the
load (:mod:`.mounts`).

Every command of an episode, its build's steps and its test phase run as one unprivileged uid (bubblewrap started
by root) that owns the whole copy; the commands and the steps see it as root (a user namespace maps it to 0), as in
the task's container, so the same seed shows the same bytes whatever uid an episode drew. Each tree is bounded as the
task declares (``[environment] cpus`` and ``memory_mb``: a cgroup where the host gives one, see
:mod:`r2v_envs.sandbox.cgroups`) and ends only once all its processes are gone. Each sandbox is set up while the command
before it runs (:mod:`.ahead`).

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend=LocalBackend(),
    ...                task_id="word-frequency")
    >>> obs, info = env.reset()
    >>> obs, *_ = env.step("run cd /tmp && export X=7")
    >>> env.step("run pwd; echo $X")[0].splitlines()[2:4]
    ['/tmp', '7']
    >>> env.close()
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from r2v_envs.sandbox.isolation import MountPlan
from r2v_envs.sandbox import PreparedRun, Sandbox, SandboxLimits
from r2v_envs.terminalbench.backends.ahead import HeldSandboxes
from r2v_envs.terminalbench.backends.base import MAX_CAPTURE, Backend, CommandResult, session_script, split_cwd
from r2v_envs.terminalbench.backends.build import BuildCache, TaskLoadError, build_key, interpret
from r2v_envs.terminalbench.backends.mounts import EpisodePaths
from r2v_envs.terminalbench.backends.workspace import Workspace
from r2v_envs.terminalbench.judge.phase import TestPhase, TestView, daemon_launcher, plan_test_phase
from r2v_envs.terminalbench.judge.runtime import build_test_runtime
from r2v_envs.terminalbench.judge.verdict import ScriptRun
from r2v_envs.terminalbench.task import TerminalTask

_BUILD_STEP_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class Call:
    """One script for the sandbox: what :meth:`LocalBackend._run` runs (commands, build steps and the tests)."""

    script: str
    timeout_s: float
    env: dict[str, str]
    mounts: MountPlan = field(default_factory=MountPlan)
    launcher: tuple[str, ...] = ()  # the judge's daemon, in place of the uid drop (the test phase)


class LocalBackend(Backend):
    """Runs a task in the local sandbox over a scratch copy (see the module docstring). ``cpus`` and
    ``memory_bytes`` override what the task declares."""

    name = "local"

    def __init__(self, isolation: str = "auto", memory_bytes: int | None = None, max_processes: int = 256,
                 file_size_bytes: int = 256 << 20, hold_ahead: bool = True, cpus: float | None = None):
        self.sandbox = Sandbox(isolation)
        self.isolation = self.sandbox.isolation
        self.hold_ahead = hold_ahead
        self._memory_bytes, self._cpus = memory_bytes, cpus
        self._limits = dict(max_processes=max_processes, file_size_bytes=file_size_bytes, max_open_files=1024)
        self.workspace: Workspace | None = None
        self.paths: EpisodePaths | None = None
        self._env: dict[str, str] = {}
        self.builds = BuildCache()
        self.held = HeldSandboxes()
        self._agent_mounts = MountPlan()  # fixed once the episode's copy is set up
        self._timeout_s: float | None = None  # the last command's deadline

    @property
    def scratch(self) -> Path | None:
        return self.workspace.root if self.workspace is not None else None

    def start(self, task: TerminalTask) -> None:
        """A fresh copy of the task: its build from the cache, else the Dockerfile interpreted (and cached), then
        given to the episode's uid; raises :class:`.build.TaskLoadError` naming the step that cannot run locally."""
        self.close()
        if self.isolation != "bwrap":
            _check_unmapped(task)
        self.task, self.workspace = task, Workspace(task.task_id, self.sandbox.fresh_uid())
        runtime = build_test_runtime()
        self.paths = paths = EpisodePaths(self.workspace, task, runtime, mapped=self.isolation == "bwrap")
        # The host's pytest plugins are not the task's: a Terminal-Bench image installs pytest alone (and plugin
        # autoloading costs ~1.5 s per pytest run here).
        self._env = {"APP_DIR": paths.app, "TEST_DIR": paths.tests, "TERM": "dumb", "HOME": paths.home,
                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "R2V_TEST_PYTHON": sys.executable}
        layout, key = paths.layout(), build_key(task, self.isolation, runtime)
        image_env = self.builds.restore(task.task_id, key, layout)
        if image_env is None:
            image_env = interpret(task, layout, self._build_step, self._build_path())
            self.builds.save(task.task_id, key, layout, image_env)
        self._env.update(image_env)
        self._agent_mounts = paths.agent_mounts()
        self.workspace.ensure_layout(self._agent_mounts.sources())
        self.workspace.give()  # the host's last write of the set-up: from here on the copy is the uid's
        # The test phase is set up ahead only under the judge's daemon: its folders are out of the agent's sight
        # (elsewhere the agent could write the report folder of a test phase set up before it acts).
        self.held.tests_wanted = self.hold_ahead and paths.mapped and self.sandbox.drops_privileges
        if self._timeout_s is not None:  # the first command's sandbox, with the deadline the last one had
            self.held.command = self._prepare(self._command_call(self._timeout_s))

    def _build_path(self) -> str:
        return self.paths.base_path() + ":/usr/local/sbin:/usr/sbin:/sbin"

    def _build_step(self, command: str, cwd: str, env: dict[str, str]) -> tuple[str, int | None]:
        """One ``RUN`` step: the image's environment so far, the offline runtime's build no-ops and installers
        first on PATH, in the step's WORKDIR, as the episode's uid (given the files the build wrote so far)."""
        mounts = self.paths.agent_mounts()
        self.workspace.ensure_layout(mounts.sources())  # a step may have put a link where a folder is
        self.workspace.give()
        if not self.paths.mapped:
            host = self.paths.layout().host_path(cwd)
            cwd = str(host) if host is not None else str(self.workspace.app)
        rt = self.paths.runtime_at
        path = f"{rt}/build-bin:{rt}/bin:{env.get('PATH') or self._build_path()}"
        script = f"exec 2>&1\ncd {shlex.quote(cwd)} || exit 1\n{command}\n"
        r = self._run(Call(script, _BUILD_STEP_TIMEOUT_S, {**self._env, **env, "PATH": path}, mounts))
        return r.output + (f"\n[timed out after {_BUILD_STEP_TIMEOUT_S:g} s]" if r.timed_out else ""), r.exit_code

    def run(self, command: str, timeout_s: float) -> CommandResult:
        """One agent command in the session; the next command's sandbox is set up while it runs."""
        self.workspace.ensure_layout(self._agent_mounts.sources())
        self.workspace.write_command(command + "\n")
        self._timeout_s = timeout_s
        call = self._command_call(timeout_s)
        r = self._run(call, self.held.take_command(), meanwhile=lambda: self._set_up_ahead(call))
        out, cwd = split_cwd(r.output)
        return CommandResult(out, r.exit_code, r.timed_out, r.wall_time_s, cwd)

    def _command_call(self, timeout_s: float) -> Call:
        return Call(session_script(self.paths.session, self.paths.app), timeout_s, self._env, self._agent_mounts)

    def _set_up_ahead(self, call: Call) -> None:
        """While a command runs: the next command's sandbox (only the command file changes, and no command sees
        the path of any mount source, so what it mounts is what a fresh one would), and once the test phase's."""
        self.held.command = self._prepare(call)
        if self.held.tests_wanted:
            self.held.tests_wanted = False
            self.held.tests = plan_test_phase(self.task, self)
            self.held.test_run = self._prepare(self._test_call(self.held.tests))

    # ------------------------------------------------------------------------------- the judge's side
    def test_view(self, folder: Path) -> TestView:
        return self.paths.test_view(folder, dict(self._env), daemon=self.paths.mapped and self.sandbox.drops_privileges)

    def begin_tests(self) -> TestPhase | None:
        """The agent's processes all died with its last command (PID namespace); no command follows the tests."""
        self.workspace.ensure_layout(self._agent_mounts.sources())
        command = self.held.take_command()
        if command is not None:
            command.discard()
        self.held.tests_wanted = False
        return self.held.take_tests()

    def run_test_script(self, phase: TestPhase) -> ScriptRun:
        """The test phase as the episode's uid, under the judge's daemon where it runs (it keeps uid 0 with only
        the capabilities to change uids and signal, and drops to the uid for the script and each pytest run);
        returns once the script has exited and the sandbox's whole PID namespace is killed: only then is the
        verdict read, so no process of the test phase is left to change it."""
        if phase.view.daemon:  # the daemon (uid 0 without CAP_DAC_*) starts in the scratch folder: let it traverse
            self.scratch.chmod(0o711)
        return self._run(self._test_call(phase), self.held.take_test_run())

    def _test_call(self, phase: TestPhase) -> Call:
        return Call(phase.script, self.task.max_test_timeout_s, phase.env, self.paths.test_mounts(phase),
                    tuple(daemon_launcher()) if phase.view.daemon else ())

    # ------------------------------------------------------------------------------------ the sandbox
    def _limits_for(self, timeout_s: float) -> SandboxLimits:
        """A tree's limits: the task's CPUs and memory (per process too), the deadline as the CPU-time limit."""
        memory = self._memory_bytes or self.task.memory_mb << 20
        return SandboxLimits(wall_time_s=timeout_s, cpu_time_s=timeout_s, memory_bytes=memory,
                             tree_memory_bytes=memory, cpus=self._cpus or self.task.cpus, **self._limits)

    def _prepare(self, call: Call) -> PreparedRun | None:
        if not (self.hold_ahead and self.paths.mapped):  # elsewhere there is no set-up to save
            return None
        return self.sandbox.prepare(_shell(call.script), workdir=self.workspace.session, env=call.env,
                                    limits=self._limits_for(call.timeout_s), mounts=call.mounts,
                                    uid=self.workspace.uid, launcher=call.launcher, as_root=True)

    def _run(self, call: Call, prepared: PreparedRun | None = None,
             meanwhile: Callable[[], None] | None = None) -> ScriptRun:
        """The one place a script runs (commands, build steps, the tests): ``meanwhile`` is called once it has
        started, before it is waited for. The sandbox's working folder is the session folder: the rest of the
        copy is mounted folder by folder, so no command can reach, rename or replace a mount's source."""
        started = self.sandbox.start(_shell(call.script), workdir=self.workspace.session, env=call.env,
                                     limits=self._limits_for(call.timeout_s), prepared=prepared, mounts=call.mounts,
                                     uid=self.workspace.uid, launcher=call.launcher, as_root=True)
        if meanwhile is not None:
            meanwhile()
        r = self.sandbox.finish(started, max_output_bytes=MAX_CAPTURE)
        return ScriptRun(r.stdout + r.stderr, r.returncode, r.timed_out, r.wall_time_s)

    def close(self) -> None:
        self.held.discard()
        if self.workspace is not None:
            self.workspace.remove()
            self.workspace = None

    def __del__(self) -> None:
        # An env dropped without close() must not leave its waiting sandboxes (and the judge's daemon, ~40 MB)
        # until the interpreter exits. Not close(): that may start a thread, which hangs at interpreter exit.
        try:
            self.held.discard()
        except Exception:  # noqa: BLE001 - at collection or interpreter exit nothing can be reached
            pass


def _shell(script: str) -> list[str]:
    return ["bash", "--noprofile", "--norc", "-c", script]


_CONTAINER_PATH = r"(?<![\w./$-])({})(?=/|\s|$|;|\)|\"|')"


def _check_unmapped(task: TerminalTask) -> None:
    """Under ``unshare`` or ``rlimit`` a task's folders keep their host paths: a test script that names the
    container's own (its WORKDIR, ``/tests``, ``/logs``, as every Harbor task's does) would find nothing there and
    score the episode ``no_test_results``. Such a task fails to load instead, saying what it needs."""
    script = task.run_tests_script.read_text(errors="replace") if task.run_tests_script.is_file() else ""
    paths = sorted({m.group(1) for m in re.finditer(_CONTAINER_PATH.format("|".join(
        map(re.escape, {task.workdir, "/tests", "/logs"}))), script)})
    if paths:
        raise TaskLoadError(task.task_id, 0, task.run_tests_script.name, (
            f"its test script names the container's paths {', '.join(paths)}, which only bubblewrap maps on the "
            "local backend (install bubblewrap: apt-get install bubblewrap; or use the docker backend)"))
