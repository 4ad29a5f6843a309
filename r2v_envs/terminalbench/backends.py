"""Where a terminal task runs: a Docker container (Terminal-Bench's way) or the local sandbox.

Both backends give the same persistent-shell semantics on top of one-shot command execution: each command
runs in a fresh ``bash`` that first restores the session (working directory and exported variables, saved by
the previous command on exit), so ``cd`` and ``export`` carry over as in Terminal-Bench's tmux session, while
every command keeps its own deadline and whole-tree kill. Output is stdout and stderr interleaved.

* :class:`LocalBackend` — :class:`r2v_envs.sandbox.Sandbox` (bubblewrap, else ``unshare``, else rlimits) over
  a scratch copy of the task. The task's Dockerfile is interpreted by :mod:`r2v_envs.terminalbench.build`
  (``ENV``/``ARG`` expanded as Docker does, files copied or written anywhere but the system folders, every
  ``RUN`` step run in the sandbox with installs mapped offline) and cached per task. Under bubblewrap the
  scratch workdir is mounted at the task's ``WORKDIR`` (``/app``), its writable root at ``/opt``, ``/tmp``,
  ``/home``, ..., the tests at ``/tests``, the session folder at ``/.r2v-session`` and the offline runtime
  read-only at its mount (the scratch copy itself is not mounted: no command can replace a mount's source);
  under the weaker levels commands see the scratch path instead (``$APP_DIR``) and writes outside it fail the
  load. Each sandbox is set up while the command before it runs (``hold_ahead``).
* :class:`r2v_envs.terminalbench.docker_backend.DockerBackend` — a container built from the task's Dockerfile;
  ``backend="auto"`` (:func:`r2v_envs.terminalbench.env.make_backend`) chooses it only when an engine answers.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import shlex
import shutil
import stat
import sys
import tempfile
import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_envs.sandbox import PreparedRun, Sandbox, SandboxLimits, minimal_env
from r2v_envs.terminalbench.build import HOST_ALIAS, WRITABLE_SYSTEM, BuildCache, Layout, build_key, interpret
from r2v_envs.terminalbench.runtime import (RUNTIME_MOUNT, build_test_runtime, named_test_files, read_junit,
                                            read_verdict)
from r2v_envs.terminalbench.tasks import HARBOR_SOLUTION_DIR, TerminalTask, parse_pytest_summary

BACKENDS = ("auto", "local", "docker")
JUDGE_DIR = "/r2v-judge"  # the test phase's report folder and HOME, created fresh for it
CWD_SENTINEL = "__R2V_CWD__:"
_MAX_CAPTURE = 2_000_000  # bytes kept per command before the env's own (smarter) truncation
_HIDDEN_VARS = "R2V_SANDBOX_RUN|PWD|OLDPWD|SHLVL|_"
_JUDGE_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_KILL")  # all the judge's daemon keeps (see _TaskSandbox)
VERDICT_MOUNT = "/.r2v-verdict"  # root-only (0700): the daemon's verdict file, out of the test phase's reach
SESSION_MOUNT = "/.r2v-session"  # the session folder (command file, saved cwd and variables) under bubblewrap
JUDGE_SOCKET = f"{JUDGE_DIR}/sock/judge.sock"  # in a root-owned folder: test processes may call, not replace it


@dataclass(frozen=True)
class CommandResult:
    output: str
    exit_code: int | None  # None when killed at the deadline
    timed_out: bool
    wall_time_s: float
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
    """One task episode's machine: ``start`` a fresh copy, ``run`` commands, ``run_tests``, ``close``."""

    name = "backend"

    @abstractmethod
    def start(self, task: TerminalTask) -> None: ...

    @abstractmethod
    def run(self, command: str, timeout_s: float) -> CommandResult: ...

    @abstractmethod
    def run_tests(self) -> TestRun: ...

    @abstractmethod
    def close(self) -> None: ...


@dataclass(frozen=True)
class TestRun(CommandResult):
    """The test phase: the script's output (display only) and the verdict's source, the judge's report."""

    results: Mapping[str, str] = field(default_factory=dict)  # test -> status, from the judge's record
    judge: Mapping[str, Any] = field(default_factory=dict)  # how it was judged (report, refused files, ...)


class _TaskSandbox(Sandbox):
    """The shared sandbox plus bind mounts (bubblewrap only): the scratch copy appears at the task's
    WORKDIR (``/app``) and the tests at ``/tests``, as in the task's container; ``ro_binds`` are read-only.

    ``judge`` (the test phase, root callers only): given the unprivileged uid, the command that starts the
    judge's daemon in place of the plain uid drop; it keeps uid 0 with only the capabilities to change uids
    and signal, and drops to the uid itself for the script and each pytest run."""

    binds: Sequence[tuple[str, str]] = ()
    ro_binds: Sequence[tuple[str, str]] = ()
    tops: Sequence[tuple[str, str]] = ()  # the task's writable root: mounted before the system's own binds
    judge: Callable[[int], list[str]] | None = None
    owned: str | None = None  # the scratch copy: all of it is the run's uid's, though only its folders are mounted
    # One unprivileged uid for all of an episode's commands (None: one per run). Commands run one at a time, each
    # in its own PID namespace, so none can reach another's processes; the scratch copy is then handed over once
    # (and again after this process made files in it: ``owner = None``), not at every command.
    episode_uid: int | None = None
    owner: int | None = None  # the uid the scratch copy was last handed to

    def _drop_to(self, uid: int) -> list[str]:
        return self.judge(uid) if self.judge is not None else super()._drop_to(uid)

    def _pick_uid(self) -> int | None:
        return self.episode_uid if self.episode_uid is not None and self.drops_privileges else super()._pick_uid()

    def _hand_over(self, workdir: str, uid: int) -> None:
        if self.owner != uid:
            super()._hand_over(self.owned or workdir, uid)
            self.owner = uid

    def _command(self, argv: list[str], workdir: str, limits: SandboxLimits, uid: int | None,
                 nproc: int) -> list[str]:
        cmd = super()._command(argv, workdir, limits, uid, nproc)
        if self.isolation != "bwrap" or not (self.binds or self.ro_binds or self.tops):
            return cmd
        if self.tops:
            # Right after the private /tmp, before the interpreter's read-only binds and the scratch folder's
            # own bind (which may live under /tmp or /root): those stay visible inside the task's folders.
            t = next(k for k in range(len(cmd) - 1) if cmd[k:k + 2] == ["--tmpfs", "/tmp"]) + 2
            cmd[t:t] = [x for src, dst in self.tops for x in ("--bind", src, dst)]
        i = cmd.index("--")  # end of bubblewrap's own options
        extra: list[str] = []
        if self.judge is not None and self.drops_privileges:
            extra += ["--cap-drop", "ALL", *(x for cap in _JUDGE_CAPS for x in ("--cap-add", cap))]
        for parent in sorted({os.path.dirname(dst) for _, dst in [*self.binds, *self.ro_binds]} - {"/"}):
            # bubblewrap would create a missing parent 0700: the unprivileged test process could not enter it
            extra += ["--perms", "0755", "--dir", parent]
        extra += [x for src, dst in self.binds for x in ("--bind", src, dst)]
        extra += [x for src, dst in self.ro_binds for x in ("--ro-bind", src, dst)]
        return [*cmd[:i], *extra, *cmd[i:]]


@dataclass
class _TestPhase:
    """A test phase set up (and maybe started, held at its gate) before it runs."""

    root: Path  # the judge's folder on the host, removed after the phase
    tests: Path
    script_name: str
    script: str
    env: dict[str, str]
    daemon: bool  # the verdict comes from the judge's daemon (bubblewrap started by root)
    prepared: PreparedRun | None = None


class LocalBackend(Backend):
    """Runs a task in the local sandbox over a scratch copy (see the module docstring)."""

    name = "local"

    def __init__(self, isolation: str = "auto", memory_bytes: int = 2 << 30, max_processes: int = 256,
                 file_size_bytes: int = 256 << 20, hold_ahead: bool = True):
        self.sandbox = _TaskSandbox(isolation)  # the agent's commands and the Dockerfile's steps
        self._judge_sandbox = _TaskSandbox(isolation)  # the test phase, with its own mounts
        self.isolation = self.sandbox.isolation
        if self._mapped:  # at a fixed path: a random host path would show in error messages ("<path>/cmd.sh: ...")
            self.sandbox.workdir_at = self._judge_sandbox.workdir_at = SESSION_MOUNT
        # Set up each sandbox before it is needed (Sandbox.prepare), while the command before it runs: the next
        # command's, and during the first command the test phase's. bubblewrap's set-up is ~7 ms per command and
        # the judge's daemon, which imports pytest, ~0.2 s of CPU; ahead, they are off the path the agent waits on.
        # Costs two waiting sandboxes per episode (and the daemon's CPU where an episode ends without its tests).
        self.hold_ahead = hold_ahead
        self._limits = dict(memory_bytes=memory_bytes, max_processes=max_processes,
                            file_size_bytes=file_size_bytes, max_open_files=1024)
        self.scratch: Path | None = None
        self.task: TerminalTask | None = None
        self._env: dict[str, str] = {}
        self._runtime: Path | None = None
        self.builds = BuildCache()
        self._held: PreparedRun | None = None  # the next command's sandbox, set up ahead
        self._held_tests: _TestPhase | None = None  # the test phase, set up ahead (under the judge's daemon)
        self._tests_ahead = False  # set it up during the next command
        self._timeout_s: float | None = None  # the last command's deadline

    # paths as the commands see them
    @property
    def _mapped(self) -> bool:
        return self.isolation == "bwrap"

    def _app(self) -> str:
        return self.task.workdir if self._mapped else str(self.scratch / "app")

    def _session(self) -> str:
        return SESSION_MOUNT if self._mapped else str(self.scratch / ".r2v")

    def _tests(self) -> str:
        return "/tests" if self._mapped else str(self.scratch / "tests")

    def start(self, task: TerminalTask) -> None:
        """A fresh copy of the task: its build from the cache, else the Dockerfile interpreted (and cached);
        raises :class:`TaskLoadError` naming the step that cannot run locally."""
        self.close()
        self.task = task
        self.scratch = Path(tempfile.mkdtemp(prefix=f"r2v-tb-{task.task_id}-"))
        for sub in ("app", "tests", ".r2v", "solution", "root"):
            (self.scratch / sub).mkdir()
        self._runtime = build_test_runtime()
        self.sandbox.ro_binds = self._episode_ro_binds()
        self.sandbox.owned = self._judge_sandbox.owned = str(self.scratch)
        self.sandbox.episode_uid = self.sandbox.owner = None
        self.sandbox.episode_uid = self.sandbox._pick_uid()  # a new one per episode
        # The host's pytest plugins are not the task's: a Terminal-Bench image installs pytest alone (and
        # plugin autoloading costs ~1.5 s per pytest run here).
        self._env = {"APP_DIR": self._app(), "TEST_DIR": self._tests(), "TERM": "dumb",
                     "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "R2V_TEST_PYTHON": sys.executable}
        # HOME as in the task's container (root's), in the task's writable root; elsewhere the scratch copy
        self._env["HOME"] = "/root" if self._mapped else str(self.scratch)
        layout = self._layout()
        key = build_key(task, self.isolation, self._runtime)
        image_env = self.builds.restore(task.task_id, key, layout)
        if image_env is None:
            self._refresh_binds()
            image_env = interpret(task, layout, self._build_step, self._base_path())
            self.builds.save(task.task_id, key, layout, image_env)
        self._env.update(image_env)
        self._refresh_binds()
        # The test phase is set up ahead only under the judge's daemon: its folders are out of the agent's sight
        # (elsewhere the agent could write the report folder of a test phase set up before it acts).
        self._tests_ahead = self.hold_ahead and self._mapped and self.sandbox.drops_privileges
        if self._timeout_s is not None:  # the first command's sandbox, with the deadline the last one had
            self._held = self._prepare(self.sandbox, session_script(self._session(), self._app()),
                                       self._timeout_s, self._env)

    def _base_path(self) -> str:
        return minimal_env(str(self.scratch))["PATH"] + ":/usr/local/sbin:/usr/sbin:/sbin"

    def _rt(self) -> str:
        return RUNTIME_MOUNT if self._mapped else str(self._runtime)

    def _episode_ro_binds(self) -> list[tuple[str, str]]:
        if not self._mapped:
            return []
        return [(str(self._runtime), RUNTIME_MOUNT),
                *((w, f"{HOST_ALIAS}{w}") for w in WRITABLE_SYSTEM if os.path.isdir(w))]

    def _episode_binds(self) -> list[tuple[str, str]]:
        binds = [(str(self.scratch / "app"), self.task.workdir), (str(self.scratch / "tests"), "/tests")]
        if self.task.format == "harbor":  # where Harbor's oracle puts solution/ (an empty folder until then)
            binds.append((str(self.scratch / "solution"), HARBOR_SOLUTION_DIR))
        return binds

    def _layout(self) -> Layout:
        return Layout(self.scratch / "app", self.scratch / "root", self.task.workdir, self._mapped)

    def _refresh_binds(self) -> None:
        self.sandbox.tops = self._layout().binds()
        self.sandbox.binds = self._episode_binds()

    def _build_step(self, command: str, cwd: str, env: dict[str, str]) -> tuple[str, int | None]:
        """One ``RUN`` step: the image's environment so far, the offline runtime's build no-ops and installers
        first on PATH, in the step's WORKDIR."""
        self._refresh_binds()
        self._ensure_layout()  # a step may have put a link where the writable root has a folder
        self.sandbox.owner = None  # the build wrote files (COPY) since the last step: hand the copy over again
        if not self._mapped:
            host = self._layout().host_path(cwd)
            cwd = str(host) if host is not None else str(self.scratch / "app")
        rt = self._rt()
        path = f"{rt}/build-bin:{rt}/bin:{env.get('PATH') or self._base_path()}"
        script = f"exec 2>&1\ncd {shlex.quote(cwd)} || exit 1\n{command}\n"
        out, code, timed_out, _wall = self._exec(script, 600.0, {**self._env, **env, "PATH": path})
        return out + ("\n[timed out after 600 s]" if timed_out else ""), code

    def _exec(self, script: str, timeout_s: float, env: dict[str, str], ahead: bool = False
              ) -> tuple[str, int | None, bool, float]:
        """Run ``script`` in the agent's sandbox (in the one held ready, when it was set up for this very
        command); ``ahead``: set up the same one for the next command (only the command file changes) while this
        one runs. That is safe because no command sees the path of any mount source (:meth:`_workdir`): what the
        next sandbox mounts is what a fresh one would, whatever this command does."""
        held, self._held = self._held, None
        meanwhile = (lambda: self._set_up_ahead(script, timeout_s, env)) if ahead else None
        return self._run(self.sandbox, script, timeout_s, env, held, meanwhile)

    def _set_up_ahead(self, script: str, timeout_s: float, env: dict[str, str]) -> None:
        self._held = self._prepare(self.sandbox, script, timeout_s, env)
        if self._tests_ahead:  # the test phase too, once, while the episode's first command runs
            self._tests_ahead = False
            phase = self._held_tests = self._test_phase()
            phase.prepared = self._prepare(self._judge_sandbox, phase.script, self.task.max_test_timeout_s, phase.env)

    def _run(self, sandbox: Sandbox, script: str, timeout_s: float, env: dict[str, str],
             prepared: PreparedRun | None = None, meanwhile: Callable[[], None] | None = None
             ) -> tuple[str, int | None, bool, float]:
        """The one place a script runs: ``meanwhile`` is called once it has started, before it is waited for."""
        started = sandbox.start(_shell(script), workdir=self._workdir(), env=env,
                                limits=self._sandbox_limits(timeout_s), prepared=prepared)
        if meanwhile is not None:
            meanwhile()
        r = sandbox.finish(started, max_output_bytes=_MAX_CAPTURE)
        return r.stdout + r.stderr, r.returncode, r.timed_out, r.wall_time_s

    def _workdir(self) -> Path:
        # The sandbox's own working folder is the session folder: the rest of the scratch copy is mounted folder by
        # folder (/app, /tests, the writable root), so no command can reach, rename or replace a mount's source.
        return self.scratch / ".r2v"

    def _prepare(self, sandbox: Sandbox, script: str, timeout_s: float, env: dict[str, str]) -> PreparedRun | None:
        if not (self.hold_ahead and self._mapped):  # elsewhere there is no set-up to save
            return None
        return sandbox.prepare(_shell(script), workdir=self._workdir(), env=env, limits=self._sandbox_limits(timeout_s))

    def _sandbox_limits(self, timeout_s: float) -> SandboxLimits:
        return SandboxLimits(wall_time_s=timeout_s, cpu_time_s=timeout_s, **self._limits)

    def _ensure_layout(self) -> None:
        # Every mount source and the session folder is a real folder: made again where missing, and a symlink or
        # file in its place removed (bubblewrap follows a source's links: `ln -s / $SCRATCH/root/srv` would mount
        # the host's root at /srv, and this process writes the command file into .r2v). Commands cannot reach
        # these paths (see _workdir), a Dockerfile's steps and the weaker isolation levels can.
        made = [real_folder(self.scratch / sub, self.scratch) for sub in ("app", "tests", ".r2v", "solution", "root")]
        made += [real_folder(Path(src), self.scratch) for src, _dst in self.sandbox.tops]
        if any(made):  # root's: hand the copy over again
            self.sandbox.owner = None

    def run(self, command: str, timeout_s: float) -> CommandResult:
        self._ensure_layout()
        state = self.scratch / ".r2v"
        _write_new(state / "cmd.sh", command + "\n")
        self._timeout_s = timeout_s
        out, code, timed_out, wall = self._exec(session_script(self._session(), self._app()), timeout_s, self._env,
                                                ahead=True)
        out, cwd = split_cwd(out)
        return CommandResult(out, code, timed_out, wall, cwd)

    def run_tests(self) -> TestRun:
        """The judge: a fresh root-owned copy of the tests (never writable by the agent), the offline test
        runtime, a fresh shell with the harness' environment, and the verdict from the judge's own record.

        Under bubblewrap started by root, the agent's processes all died with its last command (PID
        namespace), the copy is mounted read-only at ``/tests``, and the test phase runs under the judge's
        daemon (:mod:`r2v_envs.terminalbench.judge_daemon`): pytest's reports reach a root-only verdict file
        through a pipe no other test-phase process can reach, and the file is read once the whole PID
        namespace is dead. Elsewhere the verdict is the JUnit XML in a folder the test phase can write:
        ``judge["tamper_proof"]`` is False.
        """
        self._ensure_layout()
        if self._held is not None:  # no command follows the tests
            self._held.discard()
            self._held = None
        phase, self._held_tests = self._held_tests, None
        if phase is None:
            phase = self._test_phase()
        try:
            return self._judged(phase)
        finally:
            if phase.prepared is not None:
                phase.prepared.discard()
            shutil.rmtree(phase.root, ignore_errors=True)

    def _test_phase(self) -> _TestPhase:
        """The judge's folder (a fresh root-owned copy of the tests, the report and verdict folders) and the test
        phase's sandbox mounts, environment and script."""
        task = self.task
        judge = Path(tempfile.mkdtemp(prefix=f"r2v-tb-judge-{task.task_id}-"))
        runtime = self._runtime
        tests = judge / "tests"
        shutil.copytree(task.tests_dir, tests, symlinks=False)
        script_name = "test.sh" if task.format == "harbor" else "run-tests.sh"
        if task.format != "harbor":
            shutil.copy2(task.run_tests_script, tests / "run-tests.sh")
        for sub in ("out", "home", "logs/verifier", "logs/agent", "verdict", "sock"):
            (judge / sub).mkdir(parents=True)
        judge.chmod(0o755)
        (judge / "verdict").chmod(0o700)  # root's alone: the daemon writes here, no test-phase process can
        for path in [tests, *tests.rglob("*")]:  # readable by the test process, writable by no one but root
            path.chmod(0o755 if path.is_dir() else 0o644 | (path.stat().st_mode & 0o111))
        for sub in ("out", "home", "logs", "logs/verifier", "logs/agent"):  # fresh, for the test process only
            (judge / sub).chmod(0o1777)
        daemon = self._mapped and self._judge_sandbox.drops_privileges
        sandbox = self._judge_sandbox
        sandbox.tops, sandbox.judge = self.sandbox.tops, None
        if self._mapped:
            paths = {"tests": "/tests", "out": f"{JUDGE_DIR}/out", "home": f"{JUDGE_DIR}/home", "rt": RUNTIME_MOUNT}
            sandbox.ro_binds = [(str(tests), "/tests"), (str(runtime), RUNTIME_MOUNT)]
            sandbox.binds = [(str(self.scratch / "app"), task.workdir), (str(judge / "home"), paths["home"]),
                             (str(judge / "logs"), "/logs")]
            sandbox.binds += ([(str(judge / "verdict"), VERDICT_MOUNT),
                               (str(judge / "sock"), os.path.dirname(JUDGE_SOCKET))] if daemon
                              else [(str(judge / "out"), paths["out"])])
        else:
            paths = {"tests": str(tests), "out": str(judge / "out"), "home": str(judge / "home"),
                     "rt": str(runtime)}
        base_path = self._env.get("PATH") or minimal_env(str(self.scratch))["PATH"]
        env = {**self._env, "TEST_DIR": paths["tests"], "R2V_TRUSTED_TESTS": paths["tests"], "HOME": paths["home"],
               "R2V_TEST_PYTHON": sys.executable, "PATH": f"{paths['rt']}/bin:{base_path}",
               "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
        if daemon:
            env["R2V_JUDGE_SOCKET"] = JUDGE_SOCKET
            sandbox.judge = lambda uid: [
                sys.executable, "-I", f"{RUNTIME_MOUNT}/lib/r2v_judged.py", str(uid), f"{VERDICT_MOUNT}/verdict.jsonl",
                JUDGE_SOCKET, f"{RUNTIME_MOUNT}/site", "/tests", f"{RUNTIME_MOUNT}/pytest.ini", "--"]
        else:
            env["R2V_JUDGE_OUT"] = paths["out"]
        script = (f"exec 2>&1\ncd {shlex.quote(self._app())}\n"
                  f"bash {shlex.quote(paths['tests'])}/{script_name}\n")
        return _TestPhase(judge, tests, script_name, script, env, daemon)

    def _judged(self, phase: _TestPhase) -> TestRun:
        if phase.daemon:  # the daemon (uid 0 without CAP_DAC_*) starts in the scratch folder: let it traverse
            self.scratch.chmod(0o711)
        # Returns once the script has exited and the sandbox's whole PID namespace is killed: only then is the
        # verdict read, so no process of the test phase is left to change it.
        held, phase.prepared = phase.prepared, None
        out, code, timed_out, wall = self._run(self._judge_sandbox, phase.script, self.task.max_test_timeout_s,
                                               phase.env, held)
        self.sandbox.owner = None  # the test phase's uid has the copy now
        judge, tests, script_name = phase.root, phase.tests, phase.script_name
        if phase.daemon:
            named = named_test_files((tests / script_name).read_text(errors="replace"), tests)
            results, runs = read_verdict(judge / "verdict" / "verdict.jsonl", expected_files=named)
            results = {} if timed_out else results
            info = {"report": "verdict", "tamper_proof": True, "printed_summary": parse_pytest_summary(out),
                    **runs}
            return TestRun(out, code, timed_out, wall, results=results, judge=info)
        results = {} if timed_out else read_junit(judge / "out")
        return TestRun(out, code, timed_out, wall, results=results,
                       judge=_judge_info(judge / "out", results, out, tamper_proof=False))

    def close(self) -> None:
        self._end_held()
        if self.scratch is not None:
            _remove_later(self.scratch)
            self.scratch = None

    def _end_held(self) -> None:
        if self._held is not None:
            self._held.discard()
            self._held = None
        phase, self._held_tests = self._held_tests, None
        if phase is not None:
            if phase.prepared is not None:
                phase.prepared.discard()
            shutil.rmtree(phase.root, ignore_errors=True)

    def __del__(self) -> None:
        # An env dropped without close() must not leave its waiting sandboxes (and the judge's daemon, ~40 MB)
        # until the interpreter exits. Not close(): that may start a thread, which hangs at interpreter exit.
        try:
            self._end_held()
        except Exception:  # noqa: BLE001 - at collection or interpreter exit nothing can be reported
            pass


def _shell(script: str) -> list[str]:
    return ["bash", "--noprofile", "--norc", "-c", script]


def real_folder(path: Path, top: Path) -> bool:
    """Make ``path`` (inside ``top``, a folder the agent can write) and every folder between them real folders:
    a symlink or a file in their place is removed first, a missing one made. Whether anything was made.

    Example:
        >>> import tempfile
        >>> top = Path(tempfile.mkdtemp())
        >>> (top / "root").symlink_to("/")
        >>> real_folder(top / "root" / "srv", top), real_folder(top / "root" / "srv", top)
        (True, False)
        >>> (top / "root").is_symlink(), (top / "root" / "srv").is_dir()
        (False, True)
    """
    cur, made = top, False
    for part in path.relative_to(top).parts:
        cur = cur / part
        try:
            mode = os.lstat(cur).st_mode
        except FileNotFoundError:
            cur.mkdir()
            made = True
            continue
        if not stat.S_ISDIR(mode):  # a symlink (to a folder or not) or a file: never followed
            cur.unlink()
            cur.mkdir()
            made = True
    return made


def _write_new(path: Path, text: str) -> None:
    """Write ``path`` as a new file: whatever the agent left there (a symlink to a host file, a folder) is
    removed, not written through."""
    try:
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path)
        else:
            path.unlink()
    except FileNotFoundError:
        pass
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        f.write(text)


_TRASH: queue.SimpleQueue = queue.SimpleQueue()
_SWEEPER: list[threading.Thread] = []


def _remove_later(path: Path) -> None:
    """Delete a finished episode's folder in a background thread: a directory removal costs ~3 ms on this
    kind of disk and a task's writable root has a few dozen, which a reset should not wait for. Whatever is
    queued at exit is removed then."""
    _TRASH.put(path)
    if not _SWEEPER:
        worker = threading.Thread(target=_sweep, name="r2v-tb-sweeper", daemon=True)
        _SWEEPER.append(worker)
        worker.start()
        atexit.register(_sweep_now)


def _sweep() -> None:
    while True:
        shutil.rmtree(_TRASH.get(), ignore_errors=True)


def _sweep_now() -> None:
    while not _TRASH.empty():
        shutil.rmtree(_TRASH.get_nowait(), ignore_errors=True)


def _judge_info(out_dir: Path, results: Mapping[str, str], output: str, tamper_proof: bool) -> dict[str, Any]:
    refused: list[str] = []
    for path in sorted(out_dir.glob("judge-*.json")):
        try:
            refused += json.loads(path.read_text()).get("refused", [])
        except (OSError, ValueError, AttributeError):
            pass
    return {"report": "junit", "reports": len(list(out_dir.glob("junit-*.xml"))), "tamper_proof": tamper_proof,
            "refused_files": sorted(set(map(str, refused))),
            # what the script printed, for comparison only (never the verdict: anything can print it)
            "printed_summary": parse_pytest_summary(output)}
