"""Throughput of the rollout runner vs a bare env loop: the expert on R2V/TextWorld-v0, in one run.

Variants, each running the same grid (games of the small suite x perturbation seeds) with the oracle's
``expert_action``:

* ``bare``: one process, one env per seed, ``reset(options={"task_id": ...})`` / ``step`` and nothing else;
* ``runner-inproc``: the runner with ``workers=0`` (envs in the main process, one slot), logging to shards;
* ``runner-1w`` / ``runner-2w``: the runner with 1 or 2 env worker processes (``envs_per_worker`` slots each),
  the policy in the main process (one round trip per step);
* ``runner-1w-pw`` / ``runner-2w-pw``: the same with ``policy_in_workers=True`` (whole episodes in the workers).

Rounds alternate between the variants so machine load hits them alike; the median over rounds of each
variant's wall time is reported, with steps/s and ratios. CPU seconds of every process are reported too:
on a shared machine (Linux autogroup gives each session one share however many processes it runs) wall-clock
ratios cannot show parallel speedup, while bare CPU / busiest process's CPU bounds it on a quiet machine. Runner times include everything (worker start-up,
logging, shard writes). Games are generated once (cached) before timing.

    python benchmarks/runner_throughput.py --games 24 --seeds 0 1 2 --rounds 3
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass

import gymnasium as gym
import tyro

import r2v_envs  # noqa: F401
from r2v_agents.runner import RunConfig, run
from r2v_agents.teachers import OracleTeacher

ENV = "R2V/TextWorld-v0"


@dataclass
class Args:
    games: int = 24
    """games of the small suite (split "all") to run"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """perturbation seeds z"""
    rounds: int = 3
    """alternating measurement rounds"""
    perturbations: str = "composite"
    """perturbation setting ("none" for clean)"""
    max_steps: int = 60
    """episode step cap"""
    envs_per_worker: int = 2
    """env slots per worker process in the 1- and 2-worker variants"""


def env_kwargs(args: Args) -> dict:
    return {"suite": "small", "split": "all",
            "perturbations": None if args.perturbations == "none" else args.perturbations}


def bare(args: Args, tasks: list[str]) -> tuple[int, tuple[float, ...]]:
    steps = 0
    for z in args.seeds:
        env = gym.make(ENV, seed=z, max_episode_steps=args.max_steps, **env_kwargs(args))
        for task in tasks:
            _, info = env.reset(options={"task_id": task, "episode_index": 0})
            done = False
            while not done:
                _, _, term, trunc, info = env.step(info["expert_action"] or "look")
                steps += 1
                done = term or trunc
        env.close()
    return steps, ()


def with_runner(args: Args, tasks: list[str], workers: int, in_workers: bool = False) -> tuple[int, tuple[float, ...]]:
    out = tempfile.mkdtemp(prefix="r2v-bench-")
    try:
        cfg = RunConfig(ENV, out, task_ids=tuple(tasks), seeds=args.seeds, env_kwargs=env_kwargs(args),
                        max_steps=args.max_steps, workers=workers,
                        envs_per_worker=1 if workers == 0 else args.envs_per_worker,
                        policy_in_workers=in_workers, progress=False)
        summary = run(OracleTeacher(), cfg)
        return summary.steps, summary.worker_cpu_s
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _burn(n: int) -> int:
    x = 0
    for i in range(n):
        x += i
    return x


def parallel_control(n: int = 4_000_000) -> float:
    """Speedup two pure-CPU processes get over one right now: the ceiling for any 2-worker wall ratio."""
    import multiprocessing as mp

    t0 = time.perf_counter()
    _burn(n)
    _burn(n)
    serial = time.perf_counter() - t0
    with mp.get_context("spawn").Pool(2) as pool:
        pool.map(_burn, [10, 10])  # start-up outside the timing
        t0 = time.perf_counter()
        pool.map(_burn, [n, n])
        return serial / (time.perf_counter() - t0)


def main(args: Args) -> None:
    from r2v_envs.textworld.generate import ensure_game
    from r2v_envs.textworld.suite import get_suite

    suite = get_suite("small")
    tasks = sorted(suite)[:args.games]
    for t in tasks:
        ensure_game(suite[t])
    variants = {"bare": lambda: bare(args, tasks), "runner-inproc": lambda: with_runner(args, tasks, 0),
                "runner-1w": lambda: with_runner(args, tasks, 1), "runner-2w": lambda: with_runner(args, tasks, 2),
                "runner-1w-pw": lambda: with_runner(args, tasks, 1, True),
                "runner-2w-pw": lambda: with_runner(args, tasks, 2, True)}
    bare(Args(**{**vars(args), "seeds": args.seeds[:1]}), tasks[:2])  # warm-up: imports, game files in page cache
    times: dict[str, list[float]] = {k: [] for k in variants}
    busiest: dict[str, list[float]] = {k: [] for k in variants}  # CPU s of the busiest process
    total_cpu: dict[str, list[float]] = {k: [] for k in variants}
    steps: dict[str, int] = {}
    controls = []
    for _ in range(args.rounds):
        controls.append(parallel_control())
        for name, fn in variants.items():
            t0, c0 = time.perf_counter(), time.process_time()
            steps[name], worker_cpu = fn()
            times[name].append(time.perf_counter() - t0)
            main_cpu = time.process_time() - c0
            busiest[name].append(max((main_cpu, *worker_cpu)))
            total_cpu[name].append(main_cpu + sum(worker_cpu))
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu_max = {k: statistics.median(v) for k, v in busiest.items()}
    cpu_sum = {k: statistics.median(v) for k, v in total_cpu.items()}
    print(f"{len(tasks)} games x {len(args.seeds)} seeds, perturbations={args.perturbations}, "
          f"median of {args.rounds} rounds")
    print(f"{'variant':<15}{'steps':>7}{'wall s':>9}{'steps/s':>9}{'vs bare':>9}{'CPU s':>8}{'busiest':>9}"
          f"{'CPU-bound':>11}")
    for k in variants:
        print(f"{k:<15}{steps[k]:>7}{med[k]:>9.2f}{steps[k] / med[k]:>9.1f}{med['bare'] / med[k]:>9.2f}"
              f"{cpu_sum[k]:>8.2f}{cpu_max[k]:>9.2f}{cpu_sum['bare'] / cpu_max[k]:>10.2f}x")
    print("CPU s: all processes; busiest: CPU s of the busiest process; CPU-bound: bare CPU / busiest, the speedup "
          "a quiet machine with one core per process allows (wall ratios under load understate it)")
    print(f"control: two pure-CPU processes ran {statistics.median(controls):.2f}x faster than one "
          f"(the ceiling for 2-worker wall ratios on this machine right now)")
    print(f"runner overhead (in-process vs bare): wall {100 * (med['runner-inproc'] / med['bare'] - 1):+.1f}%, "
          f"CPU {100 * (cpu_sum['runner-inproc'] / cpu_sum['bare'] - 1):+.1f}%")
    for sfx, label in (("", "policy in main"), ("-pw", "policy in workers")):
        print(f"{label}: 2 workers vs 1 worker {med['runner-1w' + sfx] / med['runner-2w' + sfx]:.2f}x, "
              f"2 workers vs bare loop {med['bare'] / med['runner-2w' + sfx]:.2f}x")


if __name__ == "__main__":
    main(tyro.cli(Args))
