"""Isolation for untrusted code and shells: one :class:`Sandbox` with the strongest isolation the host offers.

Levels, strongest first (detected at run time by :func:`r2v_envs.sandbox.isolation.available_isolations`):

* ``"bwrap"`` — bubblewrap: new PID, IPC, UTS and (unless ``limits.network``) network namespaces; a fresh
  root with the system directories and the Python prefix bind-mounted read-only, a private ``/tmp``, ``/proc``
  and ``/dev``; everything else (``/root``, ``/home``, ``/work``, ...) hidden. ``workdir`` is the only
  writable host path. When the caller is root the command also drops to a throw-away unprivileged uid inside
  the sandbox, because ``RLIMIT_NPROC`` is not enforced for root (the kernel exempts uid 0): that is what
  stops a fork bomb.
* ``"unshare"`` — util-linux ``unshare``: PID namespace with ``--kill-child`` (the whole tree dies with it),
  network namespace unless ``limits.network``; the filesystem is the host's (not read-only).
* ``"rlimit"`` — resource limits and a new session only; the tree is killed with ``killpg``. A child that
  calls ``setsid`` escapes ``killpg`` (measured: it held the pipe 303 s): output is read with a bounded
  reader that stops at the deadline, so an escaped child can never block :meth:`Sandbox.run`, and after the
  run every process whose environment carries the run's marker (``R2V_SANDBOX_RUN``) is killed too.

:data:`ISOLATION_GUARANTEES` lists what each level contains; tests check exactly those.

Every level applies the rlimits of :class:`SandboxLimits` (CPU time, address space, file size, open files,
processes; core dumps off; :mod:`r2v_envs.sandbox.resources`), a wall-clock deadline after which the process tree is killed,
and a minimal environment (no host secrets) unless ``env`` adds variables. Where a root caller can make cgroups
(:mod:`r2v_envs.sandbox.cgroups`), each run's tree lives in one: its process count, and its CPU bandwidth and memory when
the limits ask (``cpus``, ``tree_memory_bytes``), are bounded for the tree as a whole, and a run ends only once
every process of its tree has exited; elsewhere a tree with such limits runs at a lower CPU priority.

Under bubblewrap a :class:`~r2v_envs.sandbox.isolation.MountPlan` (``mounts=``) adds mounts and keeps capabilities; a
caller that gives ``uid=`` runs the command as that unprivileged uid (its own files are its business), else each
run gets a throw-away uid and the workdir is handed to it; ``as_root=True`` shows that uid to the command as root, in
a user namespace that maps it to 0 (as in a container: ``ls -l`` says ``root``, and the command may write its own
read-only files), while the host still sees the unprivileged uid; ``launcher=`` starts a program of the caller's in
place of the uid drop (one that drops to ``{uid}`` itself).

:meth:`Sandbox.prepare` sets a command's sandbox up ahead, held at a gate before its first instruction, for a
later :meth:`Sandbox.run` of the same command to skip the set-up (``prepared=``); :meth:`Sandbox.start` and
:meth:`Sandbox.finish` are the two halves of a run, for work to be done while a command runs.

Example:
    >>> import sys, tempfile
    >>> sb = Sandbox()
    >>> sb.isolation in available_isolations()
    True
    >>> with tempfile.TemporaryDirectory() as d:
    ...     r = sb.run([sys.executable, "-c", "print(6 * 7)"], workdir=d)
    >>> r.returncode, r.stdout, r.timed_out
    (0, '42\\n', False)
"""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from r2v_envs.sandbox.cgroups import TreeGroup, cgroup_version
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.sandbox.isolation import (
    ISOLATIONS,
    MountPlan,
    available_isolations,
    bwrap_mount_args,
    bwrap_namespace_args,
    default_readonly_paths,
    unshare_args,
)
from r2v_envs.sandbox.processes import chown_tree, communicate, kill_marked, kill_tree
from r2v_envs.sandbox.resources import FALLBACK_NICE, SandboxLimits, apply_rlimits, prlimit_prefix, rlimit_values

__all__ = ["ISOLATION_GUARANTEES", "MountPlan", "PreparedRun", "Sandbox", "SandboxLimits", "SandboxProcess",
           "SandboxResult", "available_isolations", "minimal_env"]

# Unprivileged uids a root caller drops to: one per run, so concurrent sandboxes do not share an NPROC count.
_UID_RANGE = (200_000, 900_000)
MARKER_VAR = "R2V_SANDBOX_RUN"
# What each level contains ("processes": fork bombs stopped by RLIMIT_NPROC needs an unprivileged uid, see
# Sandbox.limits_processes; "tree_kill": escaped setsid children die; "filesystem": only workdir writable,
# host files outside the read-only system paths hidden; "network": no reachable interfaces).
ISOLATION_GUARANTEES: dict[str, frozenset[str]] = {
    "bwrap": frozenset({"rlimits", "tree_kill", "filesystem", "network", "environment"}),
    "unshare": frozenset({"rlimits", "tree_kill", "network", "environment"}),
    "rlimit": frozenset({"rlimits", "tree_kill", "environment"}),
}


@dataclass(frozen=True)
class SandboxResult:
    """What came back from one sandboxed command. ``returncode`` is None when it was killed at the deadline;
    a negative value -N means it died of signal N (e.g. -24 SIGXCPU for the CPU limit, -9 SIGKILL)."""

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_time_s: float
    isolation: str
    output_truncated: bool

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def minimal_env(workdir: str) -> dict[str, str]:
    """The environment a sandboxed command gets: no host variables (tokens, keys) leak in."""
    path = os.pathsep.join(dict.fromkeys([os.path.dirname(sys.executable), "/usr/local/bin", "/usr/bin", "/bin"]))
    return {"PATH": path, "HOME": workdir, "TMPDIR": "/tmp", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONHASHSEED": "0", "PYTHONUNBUFFERED": "1"}


def _user_process_count() -> int:
    uid, n = os.getuid(), 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                n += os.stat(f"/proc/{pid}").st_uid == uid
            except OSError:
                pass
    return n


@dataclass(frozen=True)
class _Spec:
    """Everything a command's sandbox is set up from (what a held one must match to be used)."""

    argv: tuple[str, ...]
    workdir: str
    env: tuple[tuple[str, str], ...]
    limits: SandboxLimits
    mounts: MountPlan
    uid: int | None  # the caller's uid for the command (None: a throw-away one per run, given the workdir)
    launcher: tuple[str, ...]
    as_root: bool


class Sandbox:
    """Runs commands under the chosen isolation level (``"auto"``: the strongest available).

    ``readonly_paths`` are extra host paths visible read-only under bwrap (the Python prefix is always in).

    Raises:
        UnknownChoiceError: an isolation name that is not a level, or one this host does not support.
    """

    def __init__(self, isolation: str = "auto", limits: SandboxLimits = SandboxLimits(),
                 readonly_paths: Sequence[str] = ()):
        levels = available_isolations()
        if isolation == "auto":
            isolation = levels[0]
        elif isolation not in levels:
            choices = [*ISOLATIONS, "auto"] if isolation not in ISOLATIONS else [*levels, "auto"]
            raise UnknownChoiceError("sandbox isolation" + (" on this host" if isolation in ISOLATIONS else ""),
                                     isolation, choices)
        self.isolation = isolation
        self.limits = limits
        self.readonly_paths = [*default_readonly_paths(), *(os.path.realpath(p) for p in readonly_paths)]
        # Root is exempt from RLIMIT_NPROC; bwrap can drop to an unprivileged uid after mounting (module doc).
        self.drops_privileges = isolation == "bwrap" and os.geteuid() == 0
        self._setpriv = shutil.which("setpriv")
        self._prlimit = shutil.which("prlimit")
        self._nice = shutil.which("nice")
        self._unshare = shutil.which("unshare")
        self._wrapper = shutil.which(isolation) if isolation in ("bwrap", "unshare") else None  # once: ~0.1 ms

    def __repr__(self) -> str:
        return f"Sandbox(isolation={self.isolation!r}, limits={self.limits})"

    @property
    def guarantees(self) -> frozenset[str]:
        """What this sandbox contains (:data:`ISOLATION_GUARANTEES`, plus "processes" when NPROC holds)."""
        extra = {"processes"} if self.limits_processes else set()
        return ISOLATION_GUARANTEES[self.isolation] | extra

    @property
    def limits_processes(self) -> bool:
        """Whether ``max_processes`` is enforced (a fork bomb is stopped by the kernel, not only the deadline): by
        RLIMIT_NPROC for an unprivileged uid, or by the tree's cgroup (``pids.max``) for any uid."""
        return os.geteuid() != 0 or self.drops_privileges or cgroup_version() is not None

    def fresh_uid(self) -> int | None:
        """A throw-away unprivileged uid for a caller that runs several commands as one (``uid=``); None when this
        sandbox does not drop privileges."""
        if not self.drops_privileges:
            return None
        return _UID_RANGE[0] + secrets.randbelow(_UID_RANGE[1] - _UID_RANGE[0])

    # ------------------------------------------------------------------------------------------ run
    def run(self, argv: Sequence[str], *, workdir: str | os.PathLike, stdin: str | None = None,
            env: Mapping[str, str] | None = None, limits: SandboxLimits | None = None,
            max_output_bytes: int = 1_000_000, prepared: PreparedRun | None = None,
            mounts: MountPlan = MountPlan(), uid: int | None = None, launcher: Sequence[str] = (),
            as_root: bool = False) -> SandboxResult:
        """Run ``argv`` in ``workdir`` (the only writable place, with ``mounts``' binds) and return its output and
        status.

        ``env`` adds to (and overrides) :func:`minimal_env`. Output beyond ``max_output_bytes`` per stream is
        dropped (``output_truncated``). ``prepared`` (from :meth:`prepare`) is used when it was started for this
        very command and is still waiting, else ended and replaced by a fresh start: the result is the same
        either way. Never raises for anything the command does. ``start`` then ``finish`` do the same in two
        halves, for work to be done while the command runs.
        """
        return self.finish(self.start(argv, workdir=workdir, stdin=stdin, env=env, limits=limits, prepared=prepared,
                                      mounts=mounts, uid=uid, launcher=launcher, as_root=as_root),
                           max_output_bytes=max_output_bytes)

    def start(self, argv: Sequence[str], *, workdir: str | os.PathLike, stdin: str | None = None,
              env: Mapping[str, str] | None = None, limits: SandboxLimits | None = None,
              prepared: PreparedRun | None = None, mounts: MountPlan = MountPlan(), uid: int | None = None,
              launcher: Sequence[str] = (), as_root: bool = False) -> Started:
        """The first half of :meth:`run`: the command is running when this returns."""
        spec = self._spec(argv, workdir, env, limits, mounts, uid, launcher, as_root)
        start = time.monotonic()
        if prepared is not None:
            proc = prepared.take(self, spec)
            if proc is not None:
                start = time.monotonic()
                try:
                    os.write(proc.popen.stdin.fileno(), _GO.encode())  # the gate's line: the command starts now
                except OSError:  # it is gone: finish() reports how it ended
                    pass
                return Started(proc, stdin, start + spec.limits.wall_time_s, start)
            prepared.discard()
        try:
            proc = self._spawn(spec, gated=False)
        except OSError as exc:  # e.g. the program does not exist (rlimit level execs it directly)
            return Started(None, None, 0.0, start, f"sandbox: {exc}\n")
        return Started(proc, stdin, start + spec.limits.wall_time_s, start)

    def finish(self, started: Started, max_output_bytes: int = 1_000_000) -> SandboxResult:
        """The second half of :meth:`run`: its output and status, once it has ended (or its deadline passed) and
        every process of its tree is gone."""
        proc = started.proc
        if proc is None:
            return SandboxResult(127, "", started.error, False, time.monotonic() - started.at, self.isolation, False)
        out, err, truncated, timed_out = communicate(proc.popen, started.stdin, started.deadline, max_output_bytes)
        proc.kill()
        return SandboxResult(None if timed_out else proc.popen.returncode, out, err, timed_out,
                             time.monotonic() - started.at, self.isolation, truncated)

    def prepare(self, argv: Sequence[str], *, workdir: str | os.PathLike, env: Mapping[str, str] | None = None,
                limits: SandboxLimits | None = None, mounts: MountPlan = MountPlan(), uid: int | None = None,
                launcher: Sequence[str] = (), as_root: bool = False) -> PreparedRun:
        """Start the sandbox of ``argv`` now, held at a gate before the command's first instruction, for a later
        :meth:`run` of the same command (``prepared=``) to skip the set-up.

        The set-up (bubblewrap's namespaces and mounts, the limits, the uid drop) costs about 7 ms, most of a
        short command's time; started ahead, e.g. while an agent chooses its next command, it is off the path
        the command waits on. The held process has run nothing of the command: a throw-away uid is given the
        workdir and the gate opened only by that :meth:`run`, and bind-mount sources that were replaced in the
        meantime (a folder deleted and made again) make the run start afresh.
        """
        spec = self._spec(argv, workdir, env, limits, mounts, uid, launcher, as_root)
        return PreparedRun(self._spawn(spec, gated=True), spec)

    def spawn(self, argv: Sequence[str], *, workdir: str | os.PathLike, env: Mapping[str, str] | None = None,
              limits: SandboxLimits | None = None, mounts: MountPlan = MountPlan(),
              uid: int | None = None) -> SandboxProcess:
        """Start ``argv`` in the sandbox with stdin/stdout/stderr pipes and return at once (for long-lived
        servers). ``limits.wall_time_s`` is not applied: the caller owns the deadline and must call
        :meth:`SandboxProcess.kill`, which takes the whole tree down."""
        return self._spawn(self._spec(argv, workdir, env, limits, mounts, uid, (), False), gated=False)

    # -------------------------------------------------------------------------------------- set-up
    def _spec(self, argv: Sequence[str], workdir: str | os.PathLike, env: Mapping[str, str] | None,
              limits: SandboxLimits | None, mounts: MountPlan, uid: int | None, launcher: Sequence[str],
              as_root: bool) -> _Spec:
        if isinstance(argv, (str, bytes)) or not argv:
            raise ValueError("argv must be a non-empty sequence of strings (not one shell string)")
        workdir = os.path.realpath(os.fspath(workdir))
        if not os.path.isdir(workdir):
            raise FileNotFoundError(f"sandbox workdir {workdir!r} is not a directory")
        return _Spec(tuple(argv), workdir, tuple(sorted((env or {}).items())), limits or self.limits, mounts,
                     uid if self.drops_privileges else None, tuple(launcher), as_root)

    def _spawn(self, spec: _Spec, gated: bool) -> SandboxProcess:
        """Start ``spec``'s command (held at its gate when ``gated``) in a tree group of its own."""
        uid = spec.uid if spec.uid is not None else self.fresh_uid()
        if uid is not None and spec.uid is None and not gated:
            chown_tree(spec.workdir, uid)  # a throw-away uid: the workdir is its (a held one's: at its run)
        nproc = spec.limits.max_processes + (_user_process_count() if os.geteuid() != 0 else 0)
        group = TreeGroup.create(spec.limits)
        argv = _gated(list(spec.argv)) if gated else list(spec.argv)
        cmd = self._command(spec, argv, uid, nproc, group)
        marker = secrets.token_hex(8)
        env = {**minimal_env(spec.workdir), **dict(spec.env), MARKER_VAR: marker}
        preexec = None
        if not self._prlimit:  # set between fork and exec, which forks the caller (see resources.prlimit_prefix)
            preexec = functools.partial(apply_rlimits, rlimit_values(spec.limits, nproc))
        try:
            popen = subprocess.Popen(cmd, cwd=spec.workdir, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, start_new_session=True, preexec_fn=preexec)
        except BaseException:
            if group is not None:
                group.remove()
            raise
        return SandboxProcess(popen, self.isolation, marker, group, uid)

    def _command(self, spec: _Spec, argv: list[str], uid: int | None, nproc: int, group: TreeGroup | None
                 ) -> list[str]:
        # The tree group is joined first, outside everything; prlimit runs first inside the wrapper (whose own
        # set-up is not limited), and under bwrap before the uid drop, which then cannot raise the limits.
        outer = group.join_prefix() if group is not None else []
        if group is None and spec.limits.bounds_tree and self._nice:  # no cgroup: the documented next best
            outer = [self._nice, "-n", str(FALLBACK_NICE)]
        limited = prlimit_prefix(self._prlimit, spec.limits, nproc)
        if self.isolation == "bwrap":
            cmd = [self._wrapper or "bwrap", *bwrap_namespace_args(spec.limits.network),
                   *bwrap_mount_args(spec.workdir, self.readonly_paths, spec.mounts), "--", *limited]
            if uid is not None:
                cmd += [a.replace("{uid}", str(uid)) for a in spec.launcher] or self._drop_to(uid, spec.as_root)
            return outer + cmd + argv
        if self.isolation == "unshare":
            return [*outer, self._wrapper or "unshare", *unshare_args(spec.limits.network), "--", *limited, *argv]
        return [*outer, *limited, *argv]

    def _drop_to(self, uid: int, as_root: bool) -> list[str]:
        # As root: util-linux unshare makes a user namespace owned by the uid with itself as 0 (RLIMIT_NPROC still
        # counts the uid: capabilities inside a user namespace do not exempt it); without unshare the uid shows.
        root = [self._unshare, "--user", "--map-root-user", "--"] if as_root and self._unshare else []
        if self._setpriv:
            return [self._setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--", *root]
        code = ("import os,sys;u=int(sys.argv[1]);os.setgroups([]);os.setgid(u);os.setuid(u);"
                "os.execvp(sys.argv[2],sys.argv[2:])")
        return [sys.executable, "-S", "-c", code, str(uid), *root]


class SandboxProcess:
    """A running sandboxed command (from :meth:`Sandbox.spawn`); :meth:`kill` ends its whole process tree."""

    def __init__(self, popen: subprocess.Popen, isolation: str, marker: str, group: TreeGroup | None = None,
                 uid: int | None = None):
        self.popen, self.isolation, self.marker, self.group, self.uid = popen, isolation, marker, group, uid

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def kill(self) -> None:
        """SIGKILL the process group (bwrap/unshare then take their PID namespace down), reap, and under
        ``rlimit`` also kill escaped processes that carry this run's marker; return once every process of the
        tree group (where there is one) has exited. Idempotent."""
        if self.popen.poll() is None:  # once reaped, its pid (= pgid) may be reused: never signal it again
            kill_tree(self.popen)
        try:
            self.popen.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL does not fail
            pass
        if self.isolation == "rlimit":  # no namespace kills escaped children: find them by the marker
            kill_marked(f"{MARKER_VAR}={self.marker}".encode())
        if self.group is not None:
            self.group.remove()
        for f in (self.popen.stdin, self.popen.stdout, self.popen.stderr):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass


@dataclass
class Started:
    """A command :meth:`Sandbox.start` has started (``proc`` None: it could not start, ``error`` says why)."""

    proc: SandboxProcess | None
    stdin: str | None  # still to be written
    deadline: float  # time.monotonic() at which it is killed
    at: float  # when it started
    error: str = ""


class PreparedRun:
    """A sandboxed command started ahead by :meth:`Sandbox.prepare`, held at its gate; give it to
    :meth:`Sandbox.run` (``prepared=``) or :meth:`discard` it. It runs at most once."""

    def __init__(self, proc: SandboxProcess, spec: _Spec):
        self.proc, self.spec = proc, spec
        self.sources = _sources(spec)
        self.used = False

    def take(self, sandbox: Sandbox, spec: _Spec) -> SandboxProcess | None:
        """The held process if it was started for exactly this command (the same spec but the wall-clock
        deadline, which starts at the gate, over the same folders) and is still waiting; a throw-away uid is then
        given its workdir. None otherwise."""
        if self.used or not self.proc.alive():
            return None
        limits = dataclasses.replace(spec.limits, wall_time_s=self.spec.limits.wall_time_s)
        if dataclasses.replace(spec, limits=limits) != self.spec or _sources(spec) != self.sources:
            return None
        self.used = True
        if self.spec.uid is None and self.proc.uid is not None:
            chown_tree(spec.workdir, self.proc.uid)
        return self.proc

    def discard(self) -> None:
        """End the held process (its whole tree). Idempotent."""
        self.used = True
        self.proc.kill()


# The gate: the first line of stdin opens it; EOF (the caller gone, or a discard) ends the run unstarted.
_GO = "\n"
_GATE = "read -r _ || exit 125"


def _gated(argv: list[str]) -> list[str]:
    """``argv`` held until its stdin's first line. A shell's ``-c`` script takes the gate as its first line (no
    extra exec: measured 1.2 ms from the gate to the end of ``echo hi``, against 2.9 ms through ``sh``'s
    ``exec "$@"``); anything else runs behind ``/bin/sh``'s gate."""
    if len(argv) >= 3 and os.path.basename(argv[0]) in ("bash", "sh", "dash") and argv[-2] == "-c":
        return [*argv[:-1], f"{_GATE}\n{argv[-1]}"]
    return ["/bin/sh", "-c", f'{_GATE}; exec "$@"', "r2v-gate", *argv]


def _sources(spec: _Spec) -> tuple:
    """Which inode the working directory and each bind mount's source are: a folder deleted and made again since
    the sandbox was set up would leave the held process in (or showing) the deleted one."""
    ids = []
    for path in (spec.workdir, *spec.mounts.sources()):
        try:
            st = os.stat(path)
            ids.append((path, st.st_dev, st.st_ino))
        except OSError:
            ids.append((path, None, None))
    return tuple(ids)
