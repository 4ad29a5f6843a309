"""Many sessions of `r2v serve` at the same instant: every client resets, then steps, behind a barrier, and each
episode equals the same episode in process.

This is what an RL framework does first (it opens its sessions at once). Before the env worker processes
(r2v_envs/serving/pool.py), 18 of 32 simultaneous TextWorld resets failed with ``[IndexError] pop from empty list``:
TextWorld's logic parser is not thread-safe, and the server ran every session's env on a thread of one process.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from r2v_envs.serving.app import serve_in_thread
from r2v_envs.serving.client import RemoteEnv
from r2v_envs.serving.config import ServeConfig
from r2v_envs.serving.errors import RemoteEnvError
from tests.support.serving import env_kwargs, reference_episodes, wire

pytestmark = pytest.mark.timeout(600)
# sessions at once per id: 32 where an env is light (TextWorld's 32 lost 18 resets on threads); the heavy engines
# hold a JVM (ScienceWorld, ~10 s to start on a busy machine) or a PDDL planner per session, so fewer of them race
# the same way at a fraction of the suite's time
SESSIONS = {"R2V/Scripted-v0": 32, "R2V/TextWorld-v0": 32, "R2V/ALFWorld-v0": 8, "R2V/ScienceWorld-v0": 4,
            "R2V/TerminalBench-v0": 8}
STEPS = {"R2V/Scripted-v0": 6, "R2V/TextWorld-v0": 4, "R2V/ALFWorld-v0": 3, "R2V/ScienceWorld-v0": 3,
         "R2V/TerminalBench-v0": 3}
SLOW = {"R2V/ALFWorld-v0", "R2V/ScienceWorld-v0", "R2V/TerminalBench-v0"}


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=[pytest.mark.slow] if i in SLOW else []) for i in SESSIONS])
def test_simultaneous_sessions_each_play_the_in_process_episode(env_id, alfworld_cache):
    n, kwargs = SESSIONS[env_id], env_kwargs(env_id, alfworld_cache)
    seeds = list(range(n))
    refs = reference_episodes(env_id, kwargs, seeds, STEPS[env_id])
    barrier = threading.Barrier(n, timeout=300)
    with serve_in_thread(ServeConfig(env=env_id, env_kwargs=json.dumps(kwargs), port=0, max_sessions=n)) as srv:
        def episode(seed: int) -> list[tuple]:
            actions = refs[seed][0]
            env = RemoteEnv(srv.url)
            try:
                barrier.wait()  # every client connected: reset at the same instant
                obs, info = env.reset(seed=seed)
                out = [(obs, None, False, False, info)]
                for a in actions:
                    barrier.wait()  # and every step of every session at the same instant
                    out.append(tuple(env.step(a)))
                return out
            except BaseException:
                barrier.abort()  # the others fail fast instead of waiting for this one
                raise
            finally:
                env.close()

        # the same number of steps in every episode, so the barrier's parties stay equal
        assert len({len(refs[s][0]) for s in seeds}) == 1, {s: len(refs[s][0]) for s in seeds}
        with ThreadPoolExecutor(n) as pool:
            futures = {s: pool.submit(episode, s) for s in seeds}
            errors = {s: repr(f.exception()) for s, f in futures.items() if f.exception() is not None}
        assert not errors, f"{len(errors)} of {n} sessions failed: {errors}"
        results = {s: f.result() for s, f in futures.items()}
        assert len(set(srv.pool.pids())) == srv.pool.worker_count >= 1
    for s in seeds:
        assert [wire(t) for t in results[s]] == [wire(t) for t in refs[s][1]], f"seed {s}"
    assert len({results[s][0][0] for s in seeds}) > 1  # different seeds, different perturbed episodes


def test_a_killed_env_worker_fails_its_sessions_typed_and_new_sessions_get_a_fresh_one():
    kw = json.dumps(env_kwargs("R2V/Scripted-v0"))
    with serve_in_thread(ServeConfig(env="R2V/Scripted-v0", env_kwargs=kw, port=0, workers=1)) as srv:
        env = RemoteEnv(srv.url)
        try:
            env.reset(seed=0)
            (pid,) = srv.pool.pids()
            os.kill(pid, signal.SIGKILL)  # out of memory, a crashed engine: the worker is gone
            with pytest.raises(RemoteEnvError) as err:
                env.step("go east")
            assert err.value.kind == "EnvWorkerDied", err.value
        finally:
            env.close()
        fresh = RemoteEnv(srv.url)
        try:
            obs, info = fresh.reset(seed=0)
            assert obs and fresh.step("go east")[0]
            assert srv.pool.pids() and srv.pool.pids() != [pid]
        finally:
            fresh.close()
