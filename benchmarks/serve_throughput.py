"""``r2v serve`` throughput: steps/s of 1, 8 and 32 concurrent sessions through the server vs the same episodes in
process and with ``gym.make_vec`` async, in one run.

Every variant plays the same episodes: one fixed TextWorld game, the composite perturbation, reset seeds
``seed0 ..`` (each also the episode's perturbation seed z), the oracle's ``expert_action`` every step, a step cap of
``max_steps``; with ``N`` sessions there are ``N * episodes_per_session`` episodes:

* ``in-process``: one ``gym.make`` env in this process, the episodes one after another (the baseline);
* ``vec-async``: ``gym.make_vec(num_envs=min(N, vec_envs), vectorization_mode="async")`` (worker processes), a
  finished env reset with the next seed (autoreset disabled);
* ``server``: ``r2v serve --oracle`` in its own process and ``N`` client threads in this one, each a
  :class:`~r2v_envs.serving.client.RemoteEnv` session playing its share of the episodes.

Timed: the reset/step loop (envs and sessions are built first, closed after). Each variant's observations are hashed
per episode and must agree, so the ratios compare the same work. The 1-minute load average before and after says
whether other processes shared the cores.

    python benchmarks/serve_throughput.py --sessions 1 8 32
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import tyro

import r2v_envs  # noqa: F401 - registers the ids
from r2v_envs.provenance import machine_load, write_benchmark

ENV = "R2V/TextWorld-v0"
KW = {"suite": "small", "task_id": "tw-cooking-medium-001", "perturbations": "composite"}


@dataclass
class Args:
    sessions: tuple[int, ...] = (1, 8, 32)
    """concurrent sessions to measure"""
    episodes_per_session: int = 2
    seed0: int = 100
    max_steps: int = 30
    vec_envs: int = 8
    """most worker processes of make_vec async (32 processes on 2 cores only measure start-up)"""
    out: str | None = None
    """write the figures as JSON here"""


def expert(a) -> str:
    return a if isinstance(a, str) else "look"


def _digest(texts: list[str]) -> str:
    return hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]


def in_process(seeds: list[int], max_steps: int) -> tuple[int, float, dict[int, str]]:
    env = gym.make(ENV, max_episode_steps=max_steps, **KW)
    steps, digests, t0 = 0, {}, time.perf_counter()
    for s in seeds:
        obs, info = env.reset(seed=s)
        texts, done = [obs], False
        while not done:
            obs, _, term, trunc, info = env.step(expert(info["expert_action"]))
            texts.append(obs)
            steps, done = steps + 1, term or trunc
        digests[s] = _digest(texts)
    loop_s = time.perf_counter() - t0
    env.close()
    return steps, loop_s, digests


def vec_async(seeds: list[int], max_steps: int, num_envs: int) -> tuple[int, float, dict[int, str]]:
    from gymnasium.vector import AutoresetMode

    num_envs = min(num_envs, len(seeds))
    envs = gym.make_vec(ENV, num_envs=num_envs, vectorization_mode="async", max_episode_steps=max_steps,
                        vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED}, **KW)
    queue = list(seeds)
    t0 = time.perf_counter()
    current = [queue.pop(0) for _ in range(num_envs)]
    obs, infos = envs.reset(seed=current)
    texts = {s: [obs[i]] for i, s in enumerate(current)}
    live, steps, digests = np.ones(num_envs, bool), 0, {}
    experts = list(infos["expert_action"])
    while live.any():
        obs, _, term, trunc, step_infos = envs.step(tuple(expert(a) for a in experts))
        experts = list(step_infos["expert_action"])
        for i in np.flatnonzero(live):
            texts[current[i]].append(obs[i])
        steps += int(live.sum())
        done = (term | trunc) & live
        if done.any():
            mask, next_seeds = done.copy(), [0] * num_envs
            for i in np.flatnonzero(done):
                digests[current[i]] = _digest(texts.pop(current[i]))
                if queue:
                    current[i] = next_seeds[i] = queue.pop(0)
                else:
                    live[i], mask[i] = False, False
            if mask.any():
                robs, rinfos = envs.reset(seed=next_seeds, options={"reset_mask": mask})
                for i in np.flatnonzero(mask):
                    texts[current[i]] = [robs[i]]
                    experts[i] = rinfos["expert_action"][i]
    loop_s = time.perf_counter() - t0
    envs.close()
    return steps, loop_s, digests


def start_server(sessions: int) -> tuple[subprocess.Popen, str]:
    from tests.support.serving import free_port, wait_healthy

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "r2v_train.cli", "serve", "--env", ENV, "--env-kwargs",
                             json.dumps(KW), "--port", str(port), "--max-sessions", str(max(sessions, 1) + 1),
                             "--oracle"], stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    wait_healthy(url, proc, timeout_s=300)
    return proc, url


def through_server(url: str, seeds: list[int], sessions: int, max_steps: int) -> tuple[int, float, dict[int, str]]:
    from r2v_envs.serving.client import RemoteEnv

    shares = [seeds[i::sessions] for i in range(sessions)]
    with ThreadPoolExecutor(sessions) as pool:  # sessions (and their envs on the server) built before timing
        envs = list(pool.map(lambda _: RemoteEnv(url), range(sessions)))
        for env in pool.map(lambda e: (e.reset(seed=seeds[0]), e)[1], envs):  # first reset: loads the game
            pass
    start = threading.Barrier(sessions + 1)

    def play(env, share):
        start.wait()
        steps, digests = 0, {}
        for s in share:
            obs, info = env.reset(seed=s)
            texts, done, t = [obs], False, 0
            while not done:
                obs, _, term, trunc, info = env.step(expert(info["expert_action"]))
                texts.append(obs)
                steps, t = steps + 1, t + 1
                done = term or trunc or t >= max_steps  # the server's env has the registered cap: cap here too
            digests[s] = _digest(texts)
        return steps, digests

    with ThreadPoolExecutor(sessions) as pool:
        futures = [pool.submit(play, e, sh) for e, sh in zip(envs, shares)]
        start.wait()
        t0 = time.perf_counter()
        results = [f.result() for f in futures]
        loop_s = time.perf_counter() - t0
    for e in envs:
        e.close()
    digests = {k: v for _, d in results for k, v in d.items()}
    return sum(n for n, _ in results), loop_s, digests


def main(args: Args) -> dict:
    results: dict = {**machine_load(), "env": ENV, "env_kwargs": KW, "max_steps": args.max_steps, "sessions": {}}
    in_process([args.seed0], args.max_steps)  # generate/cache the game, warm imports
    proc, url = start_server(max(args.sessions))
    try:
        for n in args.sessions:
            seeds = [args.seed0 + i for i in range(n * args.episodes_per_session)]
            row = {}
            for name in ("in-process", "server", "vec-async"):
                if name == "in-process":
                    steps, loop_s, digests = in_process(seeds, args.max_steps)
                elif name == "server":
                    steps, loop_s, digests = through_server(url, seeds, n, args.max_steps)
                else:
                    steps, loop_s, digests = vec_async(seeds, args.max_steps, args.vec_envs)
                row[name] = {"steps": steps, "loop_s": loop_s, "steps_per_s": steps / loop_s, "digests": digests}
                print(f"{n:2d} sessions {name:10s}: {steps} steps in {loop_s:.2f}s ({steps / loop_s:.0f} steps/s)",
                      file=sys.stderr)
            if len({json.dumps(r["digests"], sort_keys=True) for r in row.values()}) != 1:
                raise RuntimeError(f"{n} sessions: the variants played different episodes")
            sps = {k: r["steps_per_s"] for k, r in row.items()}
            results["sessions"][n] = {
                "episodes": len(seeds), "steps": row["in-process"]["steps"], "steps_per_s": sps,
                "server_over_in_process": sps["server"] / sps["in-process"],
                "vec_async_over_in_process": sps["vec-async"] / sps["in-process"],
                "server_over_vec_async": sps["server"] / sps["vec-async"],
                "vec_envs": min(args.vec_envs, len(seeds))}
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return write_benchmark(results, args.out)


if __name__ == "__main__":
    main(tyro.cli(Args))
