"""The env worker processes behind ``r2v serve``: each session's env lives in one of them, never on a server thread.

OpenEnv's server runs each WebSocket session's calls on a thread of its own. Engines are not thread-safe: 32
TextWorld clients resetting at once lost 18 of 32 resets (``IndexError: pop from empty list``), and 16 threads making
TextWorld envs in one process crashed 16 of 16 on a cold start inside TextWorld's logic parser (tatsu); ALFWorld's
planner swaps ``sys.argv`` and ``sys.stdout`` (issue 45, shared/NOTES.md). So a server keeps ``workers`` processes
(forked from :func:`r2v_envs.forkserver.env_context`, the runner's context); a session's env is made, reset, stepped
and closed in the one worker it was placed on (the least loaded), and each worker runs one call at a time. It also lets
CPU-bound engines use more than one core behind one server.

A worker that dies (killed, out of memory) fails its sessions' calls with ``[EnvWorkerDied]``, an infrastructure
error apart from the env's own; the next session opened starts a fresh worker in its place.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from r2v_envs.core import SPLITS
from r2v_envs.forkserver import env_context, stop_worker
from r2v_envs.serving.errors import ServedError
from r2v_envs.serving.jsonvalues import jsonable


def _rearm_env_checker(env: gym.Env) -> None:
    """Gymnasium 1.4's ``PassiveEnvChecker`` marks its first reset as checked before the reset runs: when that
    reset raises (an unknown task id), the next first step fails on the missing reset data (``TypeError: cannot
    unpack``). Re-arm it so the next reset is checked again and the session stays usable."""
    while isinstance(env, gym.Wrapper):
        if isinstance(env, gym.wrappers.PassiveEnvChecker) and not env.checked_step and env._previous_data is None:
            env.checked_reset = False
        env = env.env


def _worker_main(conn, env_id: str, env_kwargs: dict[str, Any]) -> None:
    """One worker: envs by session key (infos cross the pipe as JSON types, what the client gets anyway). Messages ``(op, key, *args)`` with op ``open``/``reset``/``step``/``describe``/``close``
    are answered ``("ok", value)`` or ``("err", kind, message)``; ``None`` (or a closed pipe) ends the worker."""
    os.environ["OMP_NUM_THREADS"] = "1"  # envs only; keep BLAS from oversubscribing the cores
    envs: dict[int, gym.Env] = {}
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # the server is gone
                break
            if msg is None:
                break
            op, key, *args = msg
            try:
                conn.send(("ok", _call(envs, env_id, env_kwargs, op, key, args)))
            except Exception as e:  # noqa: BLE001 - the env's own error: typed, for that session only
                conn.send(("err", type(e).__name__, str(e)))
    finally:
        for env in envs.values():
            try:
                env.close()
            except Exception:  # noqa: BLE001, S110 - the worker is exiting; one env's close must not keep the others open
                pass


def _call(envs: dict[int, gym.Env], env_id: str, env_kwargs: dict[str, Any], op: str, key: int, args: list) -> Any:
    if op == "open":
        envs[key] = gym.make(env_id, **env_kwargs)
        return None
    if op == "close":
        env = envs.pop(key, None)
        if env is not None:
            env.close()
        return None
    env = envs[key]
    if op == "reset":
        try:
            obs, info = env.reset(seed=args[0], options=args[1])
        except Exception:
            _rearm_env_checker(env)
            raise
        return obs, jsonable(info)
    if op == "step":
        obs, reward, terminated, truncated, info = env.step(args[0])
        return obs, float(reward), bool(terminated), bool(truncated), jsonable(info)
    if op == "describe":
        return describe(env)
    raise ValueError(f"unknown env worker call {op!r}")


def describe(env: gym.Env) -> dict[str, Any]:
    """What a client needs to run this env's tasks (``GET /r2v/info``): its benchmark, step cap, default
    perturbations and the task ids of each split."""
    base = env.unwrapped
    task_ids = getattr(base, "task_ids", None)
    return jsonable({"benchmark": getattr(base, "benchmark", None),
                     "max_episode_steps": env.spec.max_episode_steps if env.spec else None,
                     "default_perturbations": getattr(base, "default_perturbations", None),
                     "task_ids": {s: list(task_ids(s)) for s in SPLITS} if callable(task_ids) else {}})


class EnvWorker:
    """One worker process and the pipe to it; :meth:`call` is one request and its answer, one caller at a time."""

    def __init__(self, ctx, env_id: str, env_kwargs: Mapping[str, Any]):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child, env_id, dict(env_kwargs)), daemon=True,
                                name=f"r2v-env-worker[{env_id}]")
        self.proc.start()
        child.close()
        self.lock = threading.Lock()
        self.sessions = 0
        self.dead = False

    def call(self, op: str, key: int, *args: Any) -> Any:
        with self.lock:
            if self.dead:
                raise self._died()
            try:
                self.conn.send((op, key, *args))
                reply = self.conn.recv()
            except (EOFError, OSError) as e:
                self.dead = True
                raise self._died() from e
        if reply[0] == "err":
            raise ServedError(reply[1], reply[2])
        return reply[1]

    def _died(self) -> ServedError:
        self.proc.join(timeout=1)
        return ServedError("EnvWorkerDied", f"the env worker process {self.proc.pid} holding this session's env died "
                                            f"(exit code {self.proc.exitcode}): open a new session")

    def stop(self) -> None:
        with self.lock:  # after the call in flight, if any
            stop_worker(self.conn, self.proc)


class EnvWorkerPool:
    """``workers`` env worker processes for one env id and its kwargs, started on demand; thread-safe."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], workers: int):
        if workers < 1:
            raise ValueError(f"an env worker pool needs at least one worker, got {workers}")
        self.env_id, self.env_kwargs = env_id, dict(env_kwargs)
        self._slots: list[EnvWorker | None] = [None] * workers
        self._lock = threading.Lock()
        self._keys = itertools.count(1)
        self._ctx = None

    def open(self) -> PooledEnv:
        """A new env on the least loaded live worker (a dead or missing one is started afresh)."""
        with self._lock:
            if self._ctx is None:
                self._ctx = env_context(self.env_id, imports=(__name__,))  # this module: the worker loop
            for i, w in enumerate(self._slots):
                if w is None or w.dead or not w.proc.is_alive():
                    if w is not None:
                        w.stop()
                    self._slots[i] = EnvWorker(self._ctx, self.env_id, self.env_kwargs)
            worker = min(self._slots, key=lambda w: w.sessions)
            worker.sessions += 1
            key = next(self._keys)
        try:
            worker.call("open", key)
        except BaseException:
            with self._lock:
                worker.sessions -= 1
            raise
        return PooledEnv(self, worker, key)

    def _release(self, worker: EnvWorker) -> None:
        with self._lock:
            worker.sessions -= 1

    @property
    def worker_count(self) -> int:
        return len(self._slots)

    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._slots if w is not None and w.proc.pid is not None]

    def close(self) -> None:
        with self._lock:
            workers, self._slots = [w for w in self._slots if w is not None], [None] * len(self._slots)
        for w in workers:
            w.stop()


class PooledEnv:
    """A session's env inside a worker: ``reset``, ``step`` and ``close`` as on the env itself (errors come as
    :class:`~r2v_envs.serving.errors.ServedError` with the env's own error class as kind)."""

    def __init__(self, pool: EnvWorkerPool, worker: EnvWorker, key: int):
        self._pool, self._worker, self._key = pool, worker, key
        self._closed = False

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        return self._worker.call("reset", self._key, seed, options)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return self._worker.call("step", self._key, action)

    def describe(self) -> dict[str, Any]:
        return self._worker.call("describe", self._key)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if not self._worker.dead:
                self._worker.call("close", self._key)
        except ServedError:  # the worker died meanwhile: its envs are gone with it
            pass
        finally:
            self._pool._release(self._worker)
