"""Where a Terminal-Bench task runs: the local sandbox (:mod:`.local`, over a scratch copy of the task's build,
:mod:`.build`, :mod:`.workspace`, :mod:`.ahead`) or a Docker container (:mod:`.docker`). Every backend starts a
fresh copy, runs the agent's commands in one session protocol (:mod:`.base`), and runs and copies for the judge;
none reads a verdict."""

from typing import Any

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.terminalbench.backends.base import Backend, CommandResult
from r2v_envs.terminalbench.backends.build import TaskLoadError
from r2v_envs.terminalbench.backends.docker import DockerBackend, docker_available
from r2v_envs.terminalbench.backends.local import LocalBackend

BACKENDS = ("auto", "local", "docker")

__all__ = ["BACKENDS", "Backend", "CommandResult", "DockerBackend", "LocalBackend", "TaskLoadError",
           "docker_available", "make_backend"]


def make_backend(backend: str | Backend = "auto", isolation: str = "auto",
                 docker_options: dict[str, Any] | None = None) -> Backend:
    """``"local"``, ``"docker"`` or ``"auto"`` (Docker when an engine answers, else local);
    ``docker_options`` are keyword arguments of :class:`DockerBackend`."""
    if isinstance(backend, Backend):
        return backend
    if backend not in BACKENDS:
        raise UnknownChoiceError("terminal backend", backend, BACKENDS)
    if backend == "docker" or (backend == "auto" and docker_available()):
        return DockerBackend(**(docker_options or {}))
    return LocalBackend(isolation=isolation)
