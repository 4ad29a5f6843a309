"""Gymnasium's vector API on our envs: ``make_vec`` async vs sync (2 envs) vs the r2v runner (2 workers), in one run.

Every variant plays the same episodes: one fixed game, reset seeds ``seed0 .. seed0 + episodes - 1`` (no z at
make, so each reset seed is also the episode's perturbation seed z), the oracle's ``expert_action`` every step,
the composite perturbation, a step cap of ``max_steps``:

* ``single``: one ``gym.make`` env, the episodes one after another (the raw engine: the baseline of the ratios);
* ``vec-sync`` / ``vec-async``: ``gym.make_vec(num_envs=2)`` with autoreset disabled; a finished env is reset
  with the next seed through ``reset(seed=..., options={"reset_mask": ...})``;
* ``runner-2w``: ``r2v_agents.runner.run`` with 2 env worker processes (one env each), the policy in the main
  process, shards written (what collection uses).

Rounds alternate between the variants so machine load hits them alike; the median wall time per variant is
reported (end to end: construction, worker start, close), with steps/s and ratios to ``single``, and for the
non-runner variants the reset/step loop alone (the steady-state rate). The 1-minute
load average before and after says whether the machine was loaded: on 2 cores shared with other processes,
2-process speedups shrink towards 1x. Games are generated (cached) before timing.

    python benchmarks/vector_throughput.py --env-ids R2V/TextWorld-v0 R2V/ALFWorld-v0 --episodes 6 --rounds 3
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass

import gymnasium as gym
import numpy as np
import tyro

import r2v_envs  # noqa: F401
from r2v_agents.runner import RunConfig, run
from r2v_agents.teachers import OracleTeacher
from r2v_envs.provenance import machine_load, write_benchmark

CASES = {
    "R2V/TextWorld-v0": {"suite": "small", "task_id": "tw-cooking-medium-001"},
    "R2V/ALFWorld-v0": {"source": "offline", "n_games": 6, "task_id": "0000-pick_and_place_simple"},
}
VARIANTS = ("single", "vec-sync", "vec-async", "runner-2w")


@dataclass
class Args:
    env_ids: tuple[str, ...] = ("R2V/TextWorld-v0", "R2V/ALFWorld-v0")
    """envs to measure (each with the fixed game of CASES)"""
    episodes: int = 6
    """episodes per variant (reset seeds seed0 .. seed0 + episodes - 1)"""
    seed0: int = 100
    max_steps: int = 50
    rounds: int = 3
    out: str | None = None
    """write the figures as JSON here"""


def expert(a):
    return a if isinstance(a, str) else "look"


def play_single(env_id: str, kw: dict, seeds: list[int], max_steps: int) -> tuple[int, float]:
    env = gym.make(env_id, perturbations="composite", max_episode_steps=max_steps, **kw)
    steps, t0 = 0, time.perf_counter()
    for s in seeds:
        _, info = env.reset(seed=s)
        done = False
        while not done:
            _, _, term, trunc, info = env.step(expert(info["expert_action"]))
            steps += 1
            done = term or trunc
    loop_s = time.perf_counter() - t0
    env.close()
    return steps, loop_s


def play_vector(env_id: str, kw: dict, seeds: list[int], max_steps: int, mode: str) -> tuple[int, float]:
    from gymnasium.vector import AutoresetMode

    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, perturbations="composite",
                        max_episode_steps=max_steps, vector_kwargs={"autoreset_mode": AutoresetMode.DISABLED}, **kw)
    queue = list(seeds)
    t0 = time.perf_counter()
    _, infos = envs.reset(seed=[queue.pop(0), queue.pop(0)])
    live = np.array([True, True])
    steps = 0
    while live.any():
        actions = tuple(expert(a) for a in infos["expert_action"])
        _, _, term, trunc, step_infos = envs.step(actions)
        steps += int(live.sum())
        done = (term | trunc) & live
        infos = step_infos
        if done.any():
            mask = done.copy()
            next_seeds = [0, 0]
            for i in np.flatnonzero(done):
                if queue:
                    next_seeds[i] = queue.pop(0)
                else:
                    live[i], mask[i] = False, False
            if mask.any():
                _, reset_infos = envs.reset(seed=next_seeds, options={"reset_mask": mask})
                for key in ("expert_action",):
                    infos[key] = np.where(mask, reset_infos[key], infos[key])
    loop_s = time.perf_counter() - t0
    envs.close()
    return steps, loop_s


def play_runner(env_id: str, kw: dict, seeds: list[int], max_steps: int) -> tuple[int, float]:
    task = kw["task_id"]
    env_kwargs = {k: v for k, v in kw.items() if k != "task_id"} | {"perturbations": "composite"}
    out = tempfile.mkdtemp(prefix="r2v-vecbench-")
    try:
        summary = run(OracleTeacher(), RunConfig(env_id, out, task_ids=(task,), seeds=tuple(seeds), max_steps=max_steps,
                                                 env_kwargs=env_kwargs, workers=2, envs_per_worker=1,
                                                 keep_workers=False, progress=False))
    finally:
        shutil.rmtree(out, ignore_errors=True)
    return summary.steps, float("nan")  # the runner's stepping is not separable from its start-up


def main(args: Args) -> dict:
    seeds = [args.seed0 + i for i in range(args.episodes)]
    results: dict = {**machine_load(), "episodes": args.episodes, "envs": {}}
    for env_id in args.env_ids:
        kw = dict(CASES[env_id])
        play_single(env_id, kw, seeds[:1], args.max_steps)  # generate/cache the game, warm imports
        times: dict[str, list[float]] = {v: [] for v in VARIANTS}
        loops: dict[str, list[float]] = {v: [] for v in VARIANTS}
        steps: dict[str, int] = {}
        for r in range(args.rounds):
            for v in VARIANTS:
                t0 = time.perf_counter()
                if v == "single":
                    n, loop = play_single(env_id, kw, seeds, args.max_steps)
                elif v == "runner-2w":
                    n, loop = play_runner(env_id, kw, seeds, args.max_steps)
                else:
                    n, loop = play_vector(env_id, kw, seeds, args.max_steps, v.split("-")[1])
                times[v].append(time.perf_counter() - t0)
                loops[v].append(loop)
                if steps.setdefault(v, n) != n:
                    raise RuntimeError(f"{v} played {n} steps, earlier {steps[v]}: episodes differ between rounds")
                print(f"{env_id} round {r} {v}: {n} steps in {times[v][-1]:.2f}s", file=sys.stderr)
        if len(set(steps.values())) != 1:
            raise RuntimeError(f"variants played different episodes: {steps}")
        med = {v: statistics.median(t) for v, t in times.items()}
        loop = {v: statistics.median(t) for v, t in loops.items() if v != "runner-2w"}
        n = steps["single"]
        results["envs"][env_id] = {
            "steps": n, "wall_s": med, "steps_per_s": {v: n / t for v, t in med.items()},
            "ratio_to_single": {v: med["single"] / t for v, t in med.items()},
            "async_over_sync": med["vec-sync"] / med["vec-async"],
            # reset/step loop only (no construction, worker start or close): the steady-state rate
            "loop_steps_per_s": {v: n / t for v, t in loop.items()},
            "loop_async_over_sync": loop["vec-sync"] / loop["vec-async"],
            "runner_2w_over_sync": med["vec-sync"] / med["runner-2w"],
        }
    return write_benchmark(results, args.out)


if __name__ == "__main__":
    main(tyro.cli(Args))
