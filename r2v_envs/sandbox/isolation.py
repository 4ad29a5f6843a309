"""The isolation levels of :mod:`r2v_envs.sandbox`: which ones this host supports, and the command-line prefix of
each (bubblewrap's namespaces and the mounts of a :class:`MountPlan`, ``unshare``'s namespaces).

Example:
    >>> available_isolations()[-1]
    'rlimit'
    >>> "--unshare-net" in bwrap_namespace_args(network=False), "--unshare-net" in bwrap_namespace_args(True)
    (True, False)
    >>> args = bwrap_mount_args("/srv/w", [], MountPlan(ro_binds=(("/srv/tests", "/tests"),), workdir_at="/app"))
    >>> args[args.index("--ro-bind", args.index("/app")) :][:3], args[-2:]
    (['--ro-bind', '/srv/tests', '/tests'], ['--chdir', '/app'])
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass

ISOLATIONS: tuple[str, ...] = ("bwrap", "unshare", "rlimit")  # strongest first
# System directories made visible (read-only) inside bwrap; symlinks (/bin -> usr/bin) are recreated as such.
SYSTEM_PATHS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


Mount = tuple[str, str]  # (host folder, mount point)


@dataclass(frozen=True)
class MountPlan:
    """What a bubblewrap sandbox shows beyond the system folders and the Python installation (read-only) and a
    private ``/proc``, ``/dev``, ``/dev/shm`` and ``/tmp``; the isolation module turns it into arguments.

    * ``tops``: writable, mounted right after the private ``/tmp`` and before the Python installation, so a task's
      writable root (``/root``, ``/opt``, ``/tmp``, ...) keeps an interpreter that lives under ``/root`` visible;
    * ``binds`` (writable) and ``ro_binds`` (read-only): mounted last, over everything else;
    * ``workdir_at``: where the working folder appears (its own path by default);
    * ``caps``: the capabilities the sandbox's first process keeps, every other one dropped (None: bubblewrap's
      default, all of a root caller's).
    """

    tops: tuple[Mount, ...] = ()
    binds: tuple[Mount, ...] = ()
    ro_binds: tuple[Mount, ...] = ()
    workdir_at: str | None = None
    caps: tuple[str, ...] | None = None

    def sources(self) -> list[str]:
        """Every host folder the plan mounts."""
        return [src for src, _dst in (*self.tops, *self.binds, *self.ro_binds)]


# ------------------------------------------------------------------------------------------- detection
def _probe(cmd: list[str]) -> bool:
    try:
        with tempfile.TemporaryDirectory(prefix="r2v-probe-") as d:
            return subprocess.run(cmd + ["true"], cwd=d, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.lru_cache(maxsize=1)
def available_isolations() -> list[str]:
    """The isolation levels this host supports, strongest first (probed once per process, then cached)."""
    levels = []
    bwrap = shutil.which("bwrap")
    if bwrap and _probe([bwrap, *bwrap_namespace_args(network=False),
                                *bwrap_mount_args("/tmp", default_readonly_paths()), "--"]):
        levels.append("bwrap")
    unshare = shutil.which("unshare")
    if unshare and _probe([unshare, *unshare_args(network=False), "--"]):
        levels.append("unshare")
    levels.append("rlimit")
    return levels


# ----------------------------------------------------------------------------------- command building
def bwrap_namespace_args(network: bool) -> list[str]:
    args = ["--die-with-parent", "--new-session", "--unshare-pid", "--unshare-ipc", "--unshare-uts",
            "--unshare-cgroup-try"]
    return args if network else [*args, "--unshare-net"]


def bwrap_mount_args(workdir: str, readonly: Sequence[str], plan: MountPlan = MountPlan()) -> list[str]:
    """bubblewrap's mounts and capabilities: the system read-only, ``plan.tops``, ``readonly`` read-only, ``workdir``
    writable at ``plan.workdir_at`` (its own path by default), then ``plan``'s binds; the working directory last."""
    at = plan.workdir_at or workdir
    args: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    # /dev/shm backs multiprocessing locks and shared values (EvalPlus uses them).
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "1777",
             "--tmpfs", "/tmp"]
    args += [x for src, dst in plan.tops for x in ("--bind", src, dst)]
    binds = [p for p in readonly if os.path.exists(p) and not _under(p, SYSTEM_PATHS)]
    made: set[str] = {"/", "/tmp"}
    args += _parents([*binds, at], made)
    for path in binds:
        args += ["--ro-bind", path, path]
    if at != "/":
        args += ["--bind", workdir, at]
    if plan.caps is not None:
        args += ["--cap-drop", "ALL", *(x for cap in plan.caps for x in ("--cap-add", cap))]
    args += _parents([dst for _src, dst in (*plan.binds, *plan.ro_binds)], made, under_system=True)
    args += [x for src, dst in plan.binds for x in ("--bind", src, dst)]
    args += [x for src, dst in plan.ro_binds for x in ("--ro-bind", src, dst)]
    return [*args, "--chdir", at]


def _parents(mount_points: Sequence[str], made: set[str], under_system: bool = False) -> list[str]:
    """bwrap creates a missing parent of a mount point 0700 (e.g. /root for a pyenv Python): an unprivileged uid
    could not reach the mount, so make every parent explicitly, world-traversable."""
    args: list[str] = []
    for path in mount_points:
        parents = []
        parent = os.path.dirname(path)
        while parent not in made and (under_system or not _under(parent, SYSTEM_PATHS)) and parent != "/":
            parents.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(parents):
            args += ["--perms", "0755", "--dir", d]
            made.add(d)
    return args


def _under(path: str, roots: Sequence[str]) -> bool:
    return any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots)


def unshare_args(network: bool) -> list[str]:
    rootless = ["--map-root-user"] if os.geteuid() != 0 else []
    net = [] if network else ["--net"]
    return [*rootless, "--pid", "--fork", "--kill-child", "--mount-proc", *net]


def default_readonly_paths() -> list[str]:
    """The Python installation (interpreter, stdlib, site-packages), which may live outside /usr."""
    paths = {sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable))}
    return sorted(os.path.realpath(p) for p in paths)
