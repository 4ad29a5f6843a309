"""The env side of the rollout runner: env slots, worker processes, a fork server and a warm worker pool.

A worker hosts ``envs_per_worker`` env slots (:class:`EnvSlots`) and answers batches of reset/step commands
from the runner, or (``policy_in_workers``) drives whole episodes itself with its own copy of the policy.
Workers are forked from a ``forkserver`` that preloaded the env's modules, and kept in :class:`WorkerPool`
between runs with the same env setting, so a worker's engine caches stay warm.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.episodes import Episode, LocalHost, RunConfig, RunContext, drive
from r2v_envs.forkserver import env_context, stop_worker
from r2v_envs.resolve import is_url, open_env


def _is_plain_json(v: Any) -> bool:
    if v is None or isinstance(v, (str, int, float, bool)):
        return True
    if isinstance(v, (list, tuple)):
        return all(_is_plain_json(x) for x in v)
    if isinstance(v, dict):
        return all(isinstance(k, str) and _is_plain_json(x) for k, x in v.items())
    return False


def _clean_info(info: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in info.items() if _is_plain_json(v)}


class EnvSlots:
    """The env side of the runner (in a worker or in-process): slots that reset and step on command.

    An r2v env made without ``seed`` takes its perturbation seed z from each seeded reset (``r2v_envs.core``:
    ``reset(seed=z)`` is a fresh env made with ``seed=z``), so one env serves every z: a run whose z counts up per
    episode (``r2v drrn``, ``r2v rl``) no longer builds an env per episode; a ScienceWorld env is a JVM, and a
    fresh JVM per episode cost its start and an unwarmed engine on every step. Envs whose z is fixed at make (a
    served env's session, a user's callable that does not follow reset seeds) are kept per z, as before.
    """

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], max_steps: int | None,
                 wrappers: tuple[str, ...] = (), idle_cap: int = 4):
        self.env_id, self.env_kwargs, self.max_steps, self.idle_cap = env_id, dict(env_kwargs), max_steps, idle_cap
        self.wrappers = tuple(wrappers)
        self.active: dict[int, tuple[int | None, Any]] = {}
        self.idle: dict[int | None, list[Any]] = {}  # key None: envs that follow each reset's seed
        self.follows_reset_seed: bool | None = None if not is_url(env_id) else False  # None: not known yet

    def _make(self, z: int) -> tuple[int | None, Any]:
        kw = dict(self.env_kwargs)
        if self.max_steps is not None:
            kw["max_episode_steps"] = self.max_steps
        if self.follows_reset_seed is not False:
            try:
                env = open_env(self.env_id, **kw)
            except TypeError:  # a user's callable that requires seed: its z is fixed at make
                env = None
            self.follows_reset_seed = env is not None and getattr(env.unwrapped, "z_from_reset", False) is True
            if self.follows_reset_seed:
                return None, self._wrap(env)
            if env is not None:
                env.close()  # its z is its own: make it per z below
        return z, self._wrap(open_env(self.env_id, seed=z, **kw))  # an id, module:Id or a server URL (a session)

    def _wrap(self, env: Any) -> Any:
        for path in self.wrappers:  # extra wrappers on top of the registered stack, innermost first
            env = load_callable(path)(env)
        return env

    def _env_for(self, slot: int, z: int) -> tuple[int | None, Any]:
        old = self.active.pop(slot, None)
        if old is not None:
            self.idle.setdefault(old[0], []).append(old[1])
        key = None if self.follows_reset_seed else z
        pool = self.idle.get(key)
        made = (key, pool.pop()) if pool else self._make(z)
        while sum(map(len, self.idle.values())) > self.idle_cap:
            z_old = next(k for k, v in self.idle.items() if v)
            self.idle[z_old].pop(0).close()
        self.active[slot] = made
        return made

    def handle(self, cmds: list[tuple]) -> list[tuple]:
        """``("reset", slot, task_id, z)`` or ``("step", slot, action)`` -> (slot, obs, reward, terminated,
        truncated, info, error). An env error ends the episode with ``error`` set instead of crashing."""
        out = []
        for cmd in cmds:
            slot = cmd[1]
            try:
                if cmd[0] == "reset":
                    key, env = self._env_for(slot, cmd[3])
                    seed = {} if key is not None else {"seed": cmd[3]}  # an env of every z is seeded per episode
                    obs, info = env.reset(**seed, options={"task_id": cmd[2], "episode_index": 0})
                    out.append((slot, obs, 0.0, False, False, _clean_info(info), None))
                else:
                    obs, r, term, trunc, info = self.active[slot][1].step(cmd[2])
                    out.append((slot, obs, float(r), bool(term), bool(trunc), _clean_info(info), None))
            except Exception as e:  # noqa: BLE001 - recorded in the episode row, the run goes on
                self.active.pop(slot, None)
                out.append((slot, "", 0.0, True, False, {}, f"{type(e).__name__}: {e}"))
        return out

    def close(self) -> None:
        for _, env in self.active.values():
            env.close()
        for pool in self.idle.values():
            for env in pool:
                env.close()


def load_callable(path: str) -> Any:
    """``"package.module:name"`` -> the object (wrappers are named by import path so workers can build them)."""
    import importlib

    module, _, name = path.partition(":")
    if not name:
        raise ValueError(f"expected 'module:callable', got {path!r}")
    return getattr(importlib.import_module(module), name)


def _worker_main(conn, env_id: str, env_kwargs: dict, max_steps: int | None, imports: tuple[str, ...],
                 wrappers: tuple[str, ...] = ()) -> None:
    """An env worker. Messages: a list of reset/step commands (answered with results), ``"cpu"`` (answered
    with its CPU seconds), ``("drive", policy, run_context)`` (run whole episodes with
    this copy of the policy, asking the parent for episodes) and ``None`` (exit)."""
    os.environ["OMP_NUM_THREADS"] = "1"  # envs only; keep torch/BLAS from oversubscribing the cores
    import importlib
    import sys

    for module in imports:
        importlib.import_module(module)
    slots = EnvSlots(env_id, env_kwargs, max_steps, wrappers)
    try:
        while True:
            try:
                msg = conn.recv()
            except (EOFError, OSError):  # parent gone (e.g. SIGKILL): exit quietly
                break
            if msg is None:
                break
            if msg == "cpu":  # CPU seconds this worker spent (the runner reports utilisation)
                conn.send(time.process_time())
            elif isinstance(msg, tuple) and msg[0] == "drive":
                if "torch" in sys.modules:
                    sys.modules["torch"].set_num_threads(1)
                _drive_in_worker(conn, slots, *msg[1:])
            else:
                conn.send(slots.handle(msg))
    finally:
        slots.close()


def _drive_in_worker(conn, slots: EnvSlots, policy, run: RunContext) -> None:
    def next_episode() -> Episode | None:
        conn.send(("next",))
        job = conn.recv()
        return None if job is None else Episode.start(*job)

    drive([LocalHost(slots)], policy, run, next_episode, lambda rec, idx: conn.send(("done", idx, rec)))
    conn.send(("end",))


class ProcessHost:
    def __init__(self, cfg: RunConfig, ctx):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, daemon=True,
                                args=(child, cfg.env_id, cfg.env_kwargs, cfg.max_steps, cfg.imports, cfg.wrappers))
        self.proc.start()
        child.close()

    def send(self, cmds):
        self.conn.send(cmds)

    def recv(self):
        try:
            return self.conn.recv()
        except (EOFError, OSError) as e:
            self.proc.join(timeout=1)
            raise RuntimeError(f"env worker {self.proc.pid} died (exit code {self.proc.exitcode}); scripts that "
                               "run workers need an `if __name__ == '__main__':` guard (spawned workers "
                               "re-import the main module)") from e

    def cpu_seconds(self) -> float:
        self.send("cpu")
        return float(self.recv())

    def close(self):
        stop_worker(self.conn, self.proc)


class WorkerPool:
    """Env workers kept alive between :func:`run` calls with the same env setting (``keep_workers=True``):
    a warm worker has its engine's caches filled (TextWorld parses each game family's logic once per process,
    ~0.2-0.3 s) and its envs open. Closed at interpreter exit, or with :meth:`close_all`."""

    _pools: dict[str, list[ProcessHost]] = {}

    @staticmethod
    def key(cfg: RunConfig) -> str:
        return json.dumps([cfg.env_id, cfg.env_kwargs, cfg.max_steps, list(cfg.imports), list(cfg.wrappers)],
                          sort_keys=True,
                          default=str)

    @classmethod
    def take(cls, cfg: RunConfig, n: int) -> list[ProcessHost]:
        pool = [h for h in cls._pools.pop(cls.key(cfg), []) if h.proc.is_alive()]
        hosts, cls._pools[cls.key(cfg)] = pool[:n], pool[n:]
        if len(hosts) < n:
            ctx = worker_context(cfg)
            hosts += [ProcessHost(cfg, ctx) for _ in range(n - len(hosts))]
        return hosts

    @classmethod
    def give_back(cls, cfg: RunConfig, hosts: list[ProcessHost], keep_at_most: int = 8) -> None:
        pool = cls._pools.setdefault(cls.key(cfg), [])
        pool.extend(hosts)
        while len(pool) > keep_at_most:
            pool.pop(0).close()

    @classmethod
    @contextlib.contextmanager
    def borrow(cls, cfg: RunConfig, n: int) -> Iterator[list[ProcessHost]]:
        """``n`` warm workers for ``cfg``: given back after a clean exit, closed after an error (a worker may still
        owe a reply, so it is never reused)."""
        hosts, ok = cls.take(cfg, n), False
        try:
            yield hosts
            ok = True
        finally:
            if ok:
                cls.give_back(cfg, hosts)
            else:
                for h in hosts:
                    h.close()

    @classmethod
    def close_all(cls) -> None:
        for hosts in cls._pools.values():
            for h in hosts:
                h.close()
        cls._pools.clear()


atexit.register(WorkerPool.close_all)


def worker_context(cfg: RunConfig):
    """The runner's worker context: :func:`r2v_envs.forkserver.env_context` for the run's env and imports."""
    return env_context(cfg.env_id, cfg.imports)
