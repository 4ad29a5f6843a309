"""The isolation levels of :mod:`r2v_envs.sandbox`: which ones this host supports, and the command-line prefix of
each (bubblewrap's namespaces and mounts, ``unshare``'s namespaces).

Example:
    >>> available_isolations()[-1]
    'rlimit'
    >>> "--unshare-net" in bwrap_namespace_args(network=False), "--unshare-net" in bwrap_namespace_args(True)
    (True, False)
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence

ISOLATIONS: tuple[str, ...] = ("bwrap", "unshare", "rlimit")  # strongest first
# System directories made visible (read-only) inside bwrap; symlinks (/bin -> usr/bin) are recreated as such.
SYSTEM_PATHS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


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


def bwrap_mount_args(workdir: str, readonly: Sequence[str], at: str | None = None) -> list[str]:
    """bubblewrap's mounts: the system read-only, ``readonly`` read-only, ``workdir`` writable at ``at`` (its own
    path by default) and the working directory."""
    at = at or workdir
    args: list[str] = []
    for path in SYSTEM_PATHS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    # /dev/shm backs multiprocessing locks and shared values (EvalPlus uses them).
    args += ["--proc", "/proc", "--dev", "/dev", "--perms", "1777", "--tmpfs", "/dev/shm", "--perms", "1777",
             "--tmpfs", "/tmp"]
    binds = [p for p in readonly if os.path.exists(p) and not _under(p, SYSTEM_PATHS)]
    # bwrap creates missing parents of a mount point 0700 (e.g. /root for a pyenv Python): an unprivileged uid
    # could not reach the mount, so make every parent explicitly, world-traversable.
    made: set[str] = {"/", "/tmp"}
    for path in [*binds, at]:
        parents = []
        parent = os.path.dirname(path)
        while parent not in made and not _under(parent, SYSTEM_PATHS) and parent != "/":
            parents.append(parent)
            parent = os.path.dirname(parent)
        for d in reversed(parents):
            args += ["--perms", "0755", "--dir", d]
            made.add(d)
    for path in binds:
        args += ["--ro-bind", path, path]
    if at != "/":
        args += ["--bind", workdir, at]
    return [*args, "--chdir", at]


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
