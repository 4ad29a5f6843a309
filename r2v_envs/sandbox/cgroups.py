"""A cgroup around one sandboxed process tree: the number of its processes, and the CPU bandwidth and the memory
of all of them together; and a way to know that every process of the tree is gone.

rlimits bound each process; a tree of many busy processes still takes every core (measured: a hack that left a
loop behind in every script of a real Terminal-Bench task held a 2-core machine at load ~190 for minutes). A cgroup
bounds the tree as a container's ``--pids-limit``/``--cpus``/``--memory`` do, and its ``cgroup.procs`` says when the
last process of a killed tree has exited: a PID namespace dies asynchronously after its sandbox's first process is
reaped, and until then the dying processes still count against their uid's ``RLIMIT_NPROC`` (measured: the command
after a fork bomb, under the same uid, printed ``fork: retry: Resource temporarily unavailable``). Where a root
caller can make one:

* ``"v2"``: the unified hierarchy with the ``pids``, ``cpu`` and ``memory`` controllers delegated to this process's
  cgroup (``pids.max``, ``cpu.max``, ``memory.max``);
* ``"v1"``: the ``pids``, ``cpu`` and ``memory`` hierarchies (``pids.max``, ``cpu.cfs_quota_us``,
  ``memory.limit_in_bytes``), as on hosts that mount cgroup v1 (this project's CI machines do);
* neither (an unprivileged caller, or a host that delegates nothing): :func:`cgroup_version` is None and the
  sandbox falls back to ``nice`` (:mod:`r2v_envs.sandbox.resources`).

The tree's first process joins the group before it execs anything (:meth:`TreeGroup.join_prefix`: a ``/bin/sh``
that writes its pid into ``cgroup.procs``), so every process of the tree is born inside it.

Example:
    >>> cgroup_version() in ("v2", "v1", None)
    True
"""

from __future__ import annotations

import functools
import os
import secrets
import signal
import threading
import time
from pathlib import Path

from r2v_envs.sandbox.resources import SandboxLimits

CONTROLLERS = ("pids", "cpu", "memory")
_PERIOD_US = 100_000  # the CFS period: a quota of 1.5 cores is 150 ms of CPU per 100 ms
_REMOVE_FOR_S = 30.0  # how long a group whose last processes are still exiting is retried


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, hierarchy root, fs type, super options) of every cgroup mount of this process."""
    out = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        left, _, right = line.partition(" - ")
        fields, rfields = left.split(), right.split()
        if len(fields) >= 5 and len(rfields) >= 3 and rfields[0] in ("cgroup", "cgroup2"):
            out.append((fields[4], fields[3], rfields[0], set(rfields[2].split(","))))
    return out


def _own_paths() -> dict[str, str]:
    """This process's cgroup per controller (``""`` is the unified hierarchy), from /proc/self/cgroup."""
    out: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        _n, controllers, path = line.split(":", 2)
        for c in controllers.split(",") if controllers else [""]:
            out[c] = path
    return out


def _base(mount: str, root: str, path: str) -> Path:
    rel = os.path.relpath(path, root) if path.startswith(root) else path.lstrip("/")
    return Path(mount) / ("" if rel == "." else rel)


def _candidates() -> list[tuple[str, dict[str, Path]]]:
    """The interfaces to try, best first, each with the folder per controller new groups are made in (this
    process's own group)."""
    if os.geteuid() != 0:
        return []
    own, mounts, out = _own_paths(), _mounts(), []
    for mount, root, fstype, _opts in mounts:
        if fstype == "cgroup2" and "" in own:
            base = _base(mount, root, own[""])
            if set(CONTROLLERS) <= set(_read(base / "cgroup.controllers").split()):
                try:  # delegate the controllers to the groups made below this one
                    (base / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in CONTROLLERS))
                except OSError:
                    pass
                out.append(("v2", dict.fromkeys(CONTROLLERS, base)))
    bases = {}
    for mount, root, fstype, opts in mounts:
        for controller in CONTROLLERS:
            if fstype == "cgroup" and controller in opts and controller in own:
                bases[controller] = _base(mount, root, own[controller])
    return out + ([("v1", bases)] if "pids" in bases else [])


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def _working() -> tuple[str, dict[str, Path]] | None:
    for version, bases in _candidates():  # probed by making (and removing) a group with both limits
        group = TreeGroup._make(version, bases, SandboxLimits(cpus=1.0, tree_memory_bytes=1 << 30))
        if group is not None and len(group.paths) < len(set(bases.values())):
            group.remove()  # a controller is there but refuses its limits
            group = None
        if group is not None:
            group.remove()
            return version, bases
    return None


def cgroup_version() -> str | None:
    """``"v2"``, ``"v1"`` or None: how this process can bound a tree (probed once, then cached)."""
    working = _working()
    return working[0] if working else None


class TreeGroup:
    """The cgroup(s) of one sandboxed tree: made with its limits (:meth:`create`), joined by its first process
    (:meth:`join_prefix`), its processes killed and the group removed once the tree is done (:meth:`remove`)."""

    def __init__(self, version: str, paths: list[Path]):
        self.version, self.paths = version, paths

    @classmethod
    def create(cls, limits: SandboxLimits) -> TreeGroup | None:
        """A group bounding ``limits.max_processes``, ``limits.cpus`` and ``limits.tree_memory_bytes``; None where
        the host gives none."""
        working = _working()
        return cls._make(*working, limits) if working else None

    @classmethod
    def _make(cls, version: str, bases: dict[str, Path], limits: SandboxLimits) -> TreeGroup | None:
        name = f"r2v-{os.getpid()}-{secrets.token_hex(4)}"
        settings: dict[Path, list[tuple[str, str]]] = {bases["pids"] / name: [("pids.max", str(limits.max_processes))]}
        if limits.cpus is not None and "cpu" in bases:
            quota = max(1000, int(limits.cpus * _PERIOD_US))
            settings.setdefault(bases["cpu"] / name, []).extend(
                [("cpu.max", f"{quota} {_PERIOD_US}")] if version == "v2" else
                [("cpu.cfs_period_us", str(_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))])
        if limits.tree_memory_bytes is not None and "memory" in bases:
            settings.setdefault(bases["memory"] / name, []).append(
                ("memory.max" if version == "v2" else "memory.limit_in_bytes", str(limits.tree_memory_bytes)))
        group = cls(version, list(settings))
        try:
            for path, values in settings.items():
                path.mkdir()
                for key, value in values:
                    (path / key).write_text(value)
        except OSError:
            group.remove()
            return None
        return group if group.paths else None

    def join_prefix(self) -> list[str]:
        """An argv prefix whose shell moves itself into the group, then execs the rest (``/bin/sh``: ~1 ms)."""
        n = len(self.paths)
        script = " && ".join([*(f'echo $$ > "${i + 1}"' for i in range(n)), f'shift {n}', 'exec "$@"'])
        return ["/bin/sh", "-c", script, "r2v-cgroup", *(str(p / "cgroup.procs") for p in self.paths)]

    def pids(self) -> list[int]:
        """The processes in the group (dying ones included)."""
        return sorted({int(x) for p in self.paths for x in _read(p / "cgroup.procs").split() if x.isdigit()})

    def remove(self, wait_s: float = 5.0) -> None:
        """Kill what is left in the group, wait up to ``wait_s`` until it has all exited, and remove the group (in
        the background, if a process is still exiting then). Idempotent."""
        deadline = time.monotonic() + wait_s
        while self.paths and (pids := self.pids()):
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            if time.monotonic() > deadline:
                break
            time.sleep(0.002)
        paths, self.paths = self.paths, []
        left = [p for p in paths if not _rmdir(p)]
        if left:
            threading.Thread(target=_remove_when_empty, args=(left,), name="r2v-cgroup-reaper", daemon=True).start()


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:  # EBUSY: a process of the tree is still exiting
        return False
    return True


def _remove_when_empty(paths: list[Path]) -> None:
    deadline = time.monotonic() + _REMOVE_FOR_S
    while paths and time.monotonic() < deadline:
        time.sleep(0.02)
        paths = [p for p in paths if not _rmdir(p)]
