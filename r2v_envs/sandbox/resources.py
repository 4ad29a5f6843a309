"""What a sandboxed command may use: :class:`SandboxLimits`, and the kernel rlimits that enforce its per-process part.

Per process, always: CPU seconds, address space, file size, open files, processes (``RLIMIT_NPROC``, enforced for an
unprivileged uid only: the kernel exempts uid 0), no core dumps. For the whole process tree, where the host lets a
root caller make cgroups (:mod:`r2v_envs.sandbox.cgroups`): CPU bandwidth (``cpus``) and memory (``tree_memory_bytes``), so
one command that starts many busy processes cannot take every core from its neighbours; elsewhere the tree runs at
a lower CPU priority (``nice``), the documented next best.

The rlimits are set by util-linux ``prlimit``, exec'd first inside the sandbox, so the caller is ``vfork``-ed
whatever its size; a ``preexec_fn`` sets them where ``prlimit`` is missing.

Example:
    >>> import resource
    >>> dict((r, (s, h)) for r, s, h in rlimit_values(SandboxLimits(cpu_time_s=2.5), 64))[resource.RLIMIT_CPU]
    (3, 4)
    >>> prlimit_prefix("/usr/bin/prlimit", SandboxLimits(cpu_time_s=1), 8)[:2]
    ['/usr/bin/prlimit', '--cpu=1:2']
"""

from __future__ import annotations

import resource
from dataclasses import dataclass

# Under cgroups' fallback, the tree's CPU priority: below the caller's own work (a trainer stepping the env).
FALLBACK_NICE = 10


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed command (each is enforced by the kernel, not by polling)."""

    wall_time_s: float = 10.0  # wall-clock deadline; the whole process tree is killed after it
    cpu_time_s: float = 10.0  # RLIMIT_CPU (SIGXCPU, then SIGKILL one second later)
    memory_bytes: int = 1 << 30  # RLIMIT_AS, per process
    file_size_bytes: int = 64 << 20  # RLIMIT_FSIZE: largest file a process may write
    max_open_files: int = 256  # RLIMIT_NOFILE
    max_processes: int = 128  # RLIMIT_NPROC (enforced only for an unprivileged uid: see the module doc)
    network: bool = False  # keep the host network (otherwise a namespace without interfaces where available)
    cpus: float | None = None  # CPU bandwidth of the whole tree, in cores (a cgroup's quota); None: unbounded
    tree_memory_bytes: int | None = None  # memory of the whole tree (a cgroup's limit); None: per process only

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "cpu_time_s", "memory_bytes", "file_size_bytes", "max_open_files",
                     "max_processes"):
            if not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive, got {getattr(self, name)!r}")
        for name in ("cpus", "tree_memory_bytes"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"SandboxLimits.{name} must be positive or None, got {getattr(self, name)!r}")

    @property
    def bounds_tree(self) -> bool:
        """Whether the whole tree is bounded (CPU or memory), beyond each process."""
        return self.cpus is not None or self.tree_memory_bytes is not None


def rlimit_values(limits: SandboxLimits, nproc: int) -> list[tuple[int, int, int]]:
    """The ``(resource, soft, hard)`` triples a sandboxed tree runs under: :class:`SandboxLimits`, never above the
    caller's own hard limits (an unprivileged caller, or root inside a user namespace, cannot raise those)."""
    cpu = max(1, int(limits.cpu_time_s + 0.999))
    values = []
    for res, value in ((resource.RLIMIT_CPU, (cpu, cpu + 1)), (resource.RLIMIT_AS, limits.memory_bytes),
                       (resource.RLIMIT_FSIZE, limits.file_size_bytes), (resource.RLIMIT_CORE, 0),
                       (resource.RLIMIT_NOFILE, limits.max_open_files), (resource.RLIMIT_NPROC, nproc)):
        soft, hard = value if isinstance(value, tuple) else (value, value)
        cur_hard = resource.getrlimit(res)[1]
        if cur_hard != resource.RLIM_INFINITY:
            hard = min(hard, cur_hard)
        values.append((res, min(soft, hard), hard))
    return values


# prlimit's option for each limit (util-linux prlimit(1)).
_PRLIMIT_OPTIONS = {resource.RLIMIT_CPU: "--cpu", resource.RLIMIT_AS: "--as", resource.RLIMIT_FSIZE: "--fsize",
                    resource.RLIMIT_CORE: "--core", resource.RLIMIT_NOFILE: "--nofile",
                    resource.RLIMIT_NPROC: "--nproc"}


def prlimit_prefix(prlimit: str | None, limits: SandboxLimits, nproc: int) -> list[str]:
    """The util-linux prlimit prefix that sets the rlimits ([] where prlimit is missing).

    prlimit rather than a preexec_fn: a preexec_fn makes Python fork the caller (page tables and all) instead
    of vfork-ing it, which cost 2 ms per command from a bare interpreter and 80 ms from a caller holding 2 GB
    (a trainer with a model). prlimit exits 127 for a program that does not exist, like a shell."""
    if not prlimit:
        return []
    values = rlimit_values(limits, nproc)
    return [prlimit, *(f"{_PRLIMIT_OPTIONS[res]}={soft}:{hard}" for res, soft, hard in values), "--"]


def apply_rlimits(values: list[tuple[int, int, int]]) -> None:
    """Runs in the child between fork and exec when prlimit is missing (so only the sandboxed tree is limited)."""
    for res, soft, hard in values:
        resource.setrlimit(res, (soft, hard))
