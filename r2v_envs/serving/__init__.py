"""r2v envs as services: ``r2v serve`` puts any registered id behind OpenEnv's server protocol, so OpenEnv's own
clients, TRL and other languages play it over the network (docs/serving.md).

Modules: :mod:`~r2v_envs.serving.config` (the command's settings), :mod:`~r2v_envs.serving.errors` (typed errors
and their wire form), :mod:`~r2v_envs.serving.openenv_api` (OpenEnv's names, imported without its web UI),
:mod:`~r2v_envs.serving.wire` (OpenEnv action/observation/state models),
:mod:`~r2v_envs.serving.environment` (one session's env), :mod:`~r2v_envs.serving.app` (the server) and
:mod:`~r2v_envs.serving.client` (OpenEnv's client and :class:`~r2v_envs.serving.client.RemoteEnv`). The server stack
(FastAPI, uvicorn, openenv) loads only when a server or client is made: this package itself is light. A server's URL
is opened like any env spec by :func:`r2v_envs.resolve.open_env`, the one resolver of env specs.
"""
