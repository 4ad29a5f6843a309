"""r2v envs as services: ``r2v serve`` puts any registered id behind OpenEnv's server protocol, so OpenEnv's own
clients, TRL and other languages play it over the network (docs/serving.md).

Modules: :mod:`~r2v_envs.serving.config` (the command's settings), :mod:`~r2v_envs.serving.errors` (typed errors
and their wire form), :mod:`~r2v_envs.serving.wire` (OpenEnv action/observation/state models),
:mod:`~r2v_envs.serving.environment` (one session's env), :mod:`~r2v_envs.serving.app` (the server) and
:mod:`~r2v_envs.serving.client` (OpenEnv's client and :class:`~r2v_envs.serving.client.RemoteEnv`). The server stack
(FastAPI, uvicorn, openenv) loads only when a server or client is made: this package itself is light.

Example:
    >>> is_url("http://127.0.0.1:8000"), is_url("R2V/TextWorld-v0")
    (True, False)
    >>> env = open_env("R2V/Scripted-v0", task_id="scripted-1")   # an id: gym.make
    >>> type(env.unwrapped).__name__
    'ScriptedTextEnv'
"""

from __future__ import annotations

import importlib.util
from typing import Any

import gymnasium as gym

from r2v_envs.errors import BackendUnavailableError

URL_SCHEMES = ("http://", "https://", "ws://", "wss://")


def is_url(spec: str) -> bool:
    """Whether an env spec names a server (a URL) rather than a registered id."""
    return isinstance(spec, str) and spec.lower().startswith(URL_SCHEMES)


def require_server_stack() -> None:
    """Raise a :class:`~r2v_envs.errors.BackendUnavailableError` naming the extra when openenv is missing."""
    if importlib.util.find_spec("openenv") is None:
        raise BackendUnavailableError("serve", "install the serve extra: pip install -e '.[serve]' (openenv)")


def open_env(spec: str, **kwargs: Any) -> gym.Env:
    """``gym.make(spec, **kwargs)`` for a registered id; a :class:`~r2v_envs.serving.client.RemoteEnv` session for a
    server URL (``kwargs`` then go to ``RemoteEnv``: ``token``, ``reset_options``...; the env's own arguments are
    the server's ``--env-kwargs``)."""
    if is_url(spec):
        require_server_stack()
        from r2v_envs.serving.client import RemoteEnv

        return RemoteEnv(spec, **kwargs)
    return gym.make(spec, **kwargs)
