"""The process context env workers start from: a ``forkserver`` that imported the env's engine once.

Both places that run envs in worker processes use it: the rollout runner (:mod:`r2v_agents.workers`) and
``r2v serve`` (:mod:`r2v_envs.serving.pool`). A worker forked from it starts in milliseconds instead of
re-importing TextWorld (~1 s each) and never inherits the parent's threads (torch, tokenizers, a web server's event
loop), as a plain fork would.

Example:
    >>> preload_modules("R2V/TextWorld-v0")
    ['r2v_envs', 'r2v_envs.textworld.env', 'textworld']
    >>> preload_modules("http://127.0.0.1:8000")
    ['r2v_envs', 'r2v_envs.serving.client']
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

import gymnasium as gym

from r2v_envs.resolve import is_url, split_spec

# Heavy engine modules imported lazily by the envs: preloaded once in the fork server, not in every worker.
ENGINE_PRELOAD = {"R2V/TextWorld-v0": ("textworld",), "R2V/ALFWorld-v0": ("textworld", "alfworld"),
                  "R2V/BabyAI-v0": ("minigrid",)}


def preload_modules(env_id: str, imports: Sequence[str] = ()) -> list[str]:
    """What the fork server imports for ``env_id``: r2v_envs, the id's entry-point module, a ``module:Id`` spec's
    module (it registers the id: Gymnasium's form for a user's own env), the engine and ``imports``; for a server URL,
    OpenEnv's client (the env runs on the server; each worker connects after the fork)."""
    if is_url(env_id):
        return ["r2v_envs", "r2v_envs.serving.client", *imports]
    module, bare_id = split_spec(env_id)
    if module:
        importlib.import_module(module)  # registers bare_id
    modules = ["r2v_envs", *([module] if module else []), *ENGINE_PRELOAD.get(env_id, ()), *imports]
    entry = gym.spec(bare_id).entry_point
    if isinstance(entry, str):
        modules.insert(1, entry.split(":")[0])
    return modules


def stop_worker(conn, proc, timeout_s: float = 10.0) -> None:
    """Ask a worker process to exit (``None`` on its pipe, the workers' shared word for it), wait ``timeout_s``,
    then kill it."""
    try:
        conn.send(None)
    except OSError:  # the worker is gone already
        pass
    proc.join(timeout=timeout_s)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


def env_context(env_id: str, imports: Sequence[str] = ()):
    """A ``forkserver`` context whose server has imported :func:`preload_modules`; ``spawn`` where forkserver is
    unavailable. The preload list takes effect when the fork server first starts (once per process)."""
    import multiprocessing as mp

    try:
        ctx = mp.get_context("forkserver")
    except ValueError:  # pragma: no cover - e.g. Windows
        return mp.get_context("spawn")
    ctx.set_forkserver_preload(preload_modules(env_id, imports))
    return ctx
