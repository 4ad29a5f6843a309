"""Isolation for untrusted code and shells: one :class:`Sandbox` with the strongest isolation the host offers
(bubblewrap > unshare > rlimits, chosen at run time). HumanEval+'s judge and Terminal-Bench's local backend run
every command through it.

Modules, each one part of a sandbox:

* :mod:`~r2v_envs.sandbox.core`: the :class:`Sandbox` (a command run, or set up ahead and held at a gate) and what
  each isolation level guarantees;
* :mod:`~r2v_envs.sandbox.isolation`: which levels this host supports, each one's command-line prefix, mounts;
* :mod:`~r2v_envs.sandbox.resources`: :class:`SandboxLimits` and the rlimits that enforce its per-process part;
* :mod:`~r2v_envs.sandbox.cgroups`: a cgroup around each sandboxed tree (its processes, CPUs and memory as a whole);
* :mod:`~r2v_envs.sandbox.processes`: the tree from the caller's side (bounded output, tree kill, files handed to a
  uid).

Example:
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as work:
    ...     result = Sandbox().run(["echo", "hi"], workdir=work)
    >>> result.returncode, result.stdout, result.isolation == available_isolations()[0]
    (0, 'hi\\n', True)
"""

from r2v_envs.sandbox.cgroups import TreeGroup, cgroup_version
from r2v_envs.sandbox.core import (
    ISOLATION_GUARANTEES,
    PreparedRun,
    Sandbox,
    SandboxProcess,
    SandboxResult,
    minimal_env,
)
from r2v_envs.sandbox.isolation import MountPlan, available_isolations
from r2v_envs.sandbox.resources import SandboxLimits

__all__ = [
    # running a command
    "Sandbox", "SandboxResult", "SandboxProcess", "PreparedRun", "minimal_env",
    # what contains it
    "SandboxLimits", "MountPlan", "available_isolations", "ISOLATION_GUARANTEES", "TreeGroup", "cgroup_version",
]
