"""The ``r2v serve`` server: OpenEnv's own FastAPI app (``create_fastapi_app``) around :class:`R2VEnvironment`.

OpenEnv gives the protocol: ``POST /reset``, ``POST /step`` and ``GET /state`` (stateless: a fresh env per call),
``GET /schema``, ``GET /health``, ``GET /metadata`` and the session endpoint ``/ws`` (one env per WebSocket, run on a
thread of its own; an idle session is reaped, a dropped connection frees its env). r2v adds:

* the sessions' envs live in env worker processes (:mod:`r2v_envs.serving.pool`), never on the server's threads;

* typed JSON errors on the HTTP endpoints (``{"error": {"kind", "message"}}``, 4xx for a bad request, never a bare
  500 page);
* a bearer token on every endpoint but ``/health`` when one is set (``--token`` or ``$R2V_SERVE_TOKEN``);
* ``GET /r2v/sessions``: live, opened and closed envs (a freed env shows up here);
* ``GET /r2v/info``: what the server's env is: its id, its ``--env-kwargs``, the perturbations they build
  (``perturbations``: the effective specification, null = clean), whether oracle keys are served, its step cap and
  the task ids of each split. :func:`r2v_envs.resolve.open_env` reads it to check that a URL serves the env a
  caller asks for (``r2v eval --envs URL``).

:func:`serve` runs it in the foreground (the command); :func:`serve_in_thread` runs it on a background thread of
the calling process (tests, benchmarks, notebooks).
"""

from __future__ import annotations

import functools
import hmac
import socket
import sys
import threading
import time
from dataclasses import dataclass, replace
from typing import Any

import gymnasium as gym
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

import r2v_envs
from r2v_envs.core import DEFAULT
from r2v_envs.serving.config import ServeConfig
from r2v_envs.serving.environment import R2VEnvironment, SessionBook
from r2v_envs.serving.errors import BadRequestError, EpisodeOverError, ResetNeededError, ServedError, SessionClosedError
from r2v_envs.serving.jsonvalues import jsonable
from r2v_envs.serving.openenv_api import ConcurrencyConfig, create_fastapi_app
from r2v_envs.serving.pool import EnvWorkerPool
from r2v_envs.serving.wire import TextAction, TextEnvState, TextObservation

OPEN_PATHS = ("/health",)  # liveness probes need no token
_CONFLICT = {EpisodeOverError.__name__, ResetNeededError.__name__, SessionClosedError.__name__}


class BearerAuth:
    """ASGI middleware: every HTTP request and WebSocket handshake but :data:`OPEN_PATHS` must carry
    ``Authorization: Bearer <token>`` (compared in constant time); otherwise 401 (HTTP) or a refused handshake."""

    def __init__(self, app: Any, token: str):
        self.app, self._expected = app, f"Bearer {token}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket") or scope.get("path") in OPEN_PATHS:
            return await self.app(scope, receive, send)
        given = dict(scope.get("headers") or ()).get(b"authorization", b"")
        if hmac.compare_digest(given, self._expected):
            return await self.app(scope, receive, send)
        if scope["type"] == "websocket":
            await receive()  # websocket.connect; closing before accept refuses the handshake (HTTP 403)
            await send({"type": "websocket.close", "code": 1008, "reason": "missing or wrong bearer token"})
            return None
        response = JSONResponse({"error": {"kind": "Unauthorized", "message": "missing or wrong bearer token"}},
                                status_code=401, headers={"WWW-Authenticate": "Bearer"})
        return await response(scope, receive, send)


def build_app(config: ServeConfig, book: SessionBook | None = None, pool: EnvWorkerPool | None = None) -> FastAPI:
    """OpenEnv's app for ``config.env`` (one :class:`R2VEnvironment` per session, its env in one of ``pool``'s
    worker processes), with r2v's errors, token and ``/r2v/sessions``. Raises :class:`BadRequestError` for bad
    ``--env-kwargs``. The caller closes ``pool`` (``app.state.r2v_pool``) when the server stops."""
    book = book or SessionBook()
    pool = pool or open_pool(config)
    factory = functools.partial(R2VEnvironment, pool, oracle=config.oracle, book=book)
    app = create_fastapi_app(
        factory, TextAction, TextObservation, env_name=config.env.replace("/", "-"), state_cls=TextEnvState,
        concurrency_config=ConcurrencyConfig(max_concurrent_envs=config.max_sessions,
                                             session_timeout=config.idle_timeout_s))

    @app.exception_handler(ServedError)
    async def _served(request: Request, exc: ServedError) -> JSONResponse:
        status = 409 if exc.kind in _CONFLICT else 400
        return JSONResponse({"error": {"kind": exc.kind, "message": exc.detail}}, status_code=status)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        cause = exc.__cause__ if type(exc).__name__ == "EnvironmentFactoryError" and exc.__cause__ else exc
        return JSONResponse({"error": {"kind": type(cause).__name__, "message": str(cause)}}, status_code=500)

    @app.get("/r2v/sessions", tags=["r2v"], summary="live, opened and closed env sessions")
    async def sessions() -> dict[str, Any]:
        return {"env_id": config.env, "max_sessions": config.max_sessions, "oracle": config.oracle,
                **book.summary()}

    described: list[dict[str, Any]] = []  # built once, on the first request (a server's setting is fixed)

    @app.get("/r2v/info", tags=["r2v"], summary="the served env: id, env kwargs, perturbations, task ids per split")
    def info() -> dict[str, Any]:  # sync: FastAPI runs it on its thread pool while a worker builds the env
        if not described:
            described.append(server_info(config, pool))
        return described[0]

    app.state.r2v_book, app.state.r2v_pool = book, pool
    token = config.bearer_token()
    if token:
        app.add_middleware(BearerAuth, token=token)
    return app


def server_info(config: ServeConfig, pool: EnvWorkerPool) -> dict[str, Any]:
    """``GET /r2v/info``'s answer: built from one env in a worker, as a session's env is built."""
    env = pool.open()
    try:
        facts = env.describe()
    finally:
        env.close()
    kwargs = config.kwargs()
    given = kwargs.get("perturbations", DEFAULT)
    return {"env_id": config.env, "env_kwargs": jsonable(kwargs), "oracle": config.oracle,
            "perturbations": facts["default_perturbations"] if given == DEFAULT else jsonable(given),
            "version": r2v_envs.__version__, **facts}


def open_pool(config: ServeConfig) -> EnvWorkerPool:
    """The env worker processes of a server for ``config`` (started when the first env is opened)."""
    try:
        gym.spec(config.env)
    except gym.error.Error as e:  # an unregistered id
        raise BadRequestError(f"--env {config.env!r}: {e}") from None
    return EnvWorkerPool(config.env, config.kwargs(), config.worker_count())


def check_env(pool: EnvWorkerPool) -> None:
    """Build (and close) one env as a session would, in a worker, so a bad id or argument fails before the server
    listens (and the first worker is warm when the first client comes)."""
    pool.open().close()


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as e:  # a port in use, an address this machine does not have: say which, no traceback
        sock.close()
        raise BadRequestError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


def _server(config: ServeConfig, book: SessionBook, pool: EnvWorkerPool) -> uvicorn.Server:
    app = build_app(config, book, pool)
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", ws_max_size=int(config.max_message_mb * 2 ** 20),
                                         timeout_graceful_shutdown=5, lifespan="on"))


def serve(config: ServeConfig) -> None:
    """Run the server in the foreground until interrupted; prints its URL on stderr once it listens."""
    pool = open_pool(config)
    try:
        _serve(config, pool)
    finally:
        pool.close()


def _serve(config: ServeConfig, pool: EnvWorkerPool) -> None:
    if config.check_env:
        check_env(pool)
    sock = _bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    server = _server(config, SessionBook(), pool)
    if config.host not in ("127.0.0.1", "localhost", "::1") and not config.bearer_token():
        print(f"r2v serve: warning: listening on {config.host} without a token", file=sys.stderr)
    print(f"r2v serve: {config.env} on http://{host}:{port} (sessions: ws://{host}:{port}/ws, at most "
          f"{config.max_sessions}, envs in {config.worker_count()} worker processes)", file=sys.stderr, flush=True)
    try:
        server.run(sockets=[sock])
    except KeyboardInterrupt:  # uvicorn shuts down gracefully on Ctrl-C, then re-raises it: a clean stop
        pass
    print("r2v serve: stopped", file=sys.stderr, flush=True)


@dataclass
class RunningServer:
    """A server on a background thread: ``url``, its :class:`SessionBook`, its env workers, and :meth:`stop`."""

    url: str
    book: SessionBook
    server: uvicorn.Server
    thread: threading.Thread
    pool: EnvWorkerPool

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.pool.close()

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def serve_in_thread(config: ServeConfig, timeout_s: float = 60.0) -> RunningServer:
    """Start the server on a free port (``config.port`` 0) or the given one, on a daemon thread; returns once it
    accepts connections."""
    pool = open_pool(config)
    try:
        if config.check_env:
            check_env(pool)
        sock = _bind(config.host, config.port)
    except BaseException:
        pool.close()
        raise
    host, port = sock.getsockname()[:2]
    book = SessionBook()
    server = _server(replace(config, port=port), book, pool)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name=f"r2v-serve-{port}")
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError(f"the server on port {port} did not start")
        time.sleep(0.01)
    return RunningServer(url=f"http://{host}:{port}", book=book, server=server, thread=thread, pool=pool)
