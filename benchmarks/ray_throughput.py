"""Rollout throughput of the runner's local process pool vs its Ray backend on one machine (goal: Ray overhead
<= 15% at 2 workers), and the per-episode costs that ``benchmarks/project_grid.py`` projects from.

Both backends run the same grid (games of the TextWorld small suite x perturbation seeds, the oracle's
``expert_action``, ``envs_per_worker`` slots per worker), in two modes: the policy in the driver (one round
trip per step) and ``policy_in_workers`` (whole episodes in the workers). Rounds alternate between variants so
machine load hits them alike; medians over rounds are reported. Ray is started once before timing
(``ray.init``: a cluster is up before a real job); its actors are created inside each timed run, as the local
pool's workers are on its first run (later local runs reuse warm workers: ``keep_workers``). Shards are written
and compared byte for byte between backends.

    python benchmarks/ray_throughput.py --games 24 --seeds 0 1 2 --rounds 3 --json runs/ray_throughput.json
"""

from __future__ import annotations

import json
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

import r2v_envs  # noqa: F401
from r2v_agents.runner import RunConfig, run
from r2v_agents.teachers import OracleTeacher


@dataclass
class Args:
    env: str = "R2V/TextWorld-v0"
    """env id ("R2V/Scripted-v0" for a engine-free run)"""
    games: int = 24
    """tasks to run (TextWorld: games of the small suite)"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """perturbation seeds z"""
    rounds: int = 3
    """alternating measurement rounds"""
    workers: int = 2
    """env workers (processes / Ray actors)"""
    envs_per_worker: int = 2
    """env slots per worker"""
    max_steps: int = 60
    """episode step cap"""
    json: str | None = None
    """write the measurements here (input of benchmarks/project_grid.py)"""


def tasks_and_kwargs(args: Args) -> tuple[list[str], dict]:
    if args.env == "R2V/TextWorld-v0":
        from r2v_envs.textworld.generate import ensure_game
        from r2v_envs.textworld.suite import get_suite

        suite = get_suite("small")
        tasks = sorted(suite)[:args.games]
        for t in tasks:
            ensure_game(suite[t])  # generated once, outside the timing
        return tasks, {"suite": "small", "split": "all", "perturbations": "composite"}
    return [f"scripted-{i}" for i in range(args.games)], {"perturbations": "composite"}


def one(args: Args, tasks: list[str], kwargs: dict, backend: str, in_workers: bool, keep: Path | None = None):
    out = tempfile.mkdtemp(prefix="r2v-raybench-")
    try:
        cfg = RunConfig(args.env, out, task_ids=tuple(tasks), seeds=args.seeds, env_kwargs=kwargs,
                        max_steps=args.max_steps, workers=args.workers, envs_per_worker=args.envs_per_worker,
                        policy_in_workers=in_workers, progress=False, backend=backend)
        t0 = time.perf_counter()
        summary = run(OracleTeacher(), cfg)
        wall = time.perf_counter() - t0
        if keep is not None:
            shutil.copytree(out, keep, dirs_exist_ok=True)
        return wall, summary
    finally:
        shutil.rmtree(out, ignore_errors=True)


def main(args: Args) -> dict:
    import ray

    tasks, kwargs = tasks_and_kwargs(args)
    t0 = time.perf_counter()
    ray.init(num_cpus=max(2, args.workers), include_dashboard=False, log_to_driver=False)
    ray_start = time.perf_counter() - t0
    variants = [(b, m) for m in (False, True) for b in ("local", "ray")]
    walls: dict[str, list[float]] = {f"{b}{'-pw' if m else ''}": [] for b, m in variants}
    summaries = {}
    check = Path(tempfile.mkdtemp(prefix="r2v-raybench-shards-"))
    try:
        for r in range(args.rounds):
            for b, m in variants:
                name = f"{b}{'-pw' if m else ''}"
                wall, s = one(args, tasks, kwargs, b, m, keep=check / name if r == 0 else None)
                walls[name].append(wall)
                summaries[name] = s
        files = {n: {p.name: p.read_bytes() for p in sorted((check / n).glob("*.parquet"))} for n in walls}
        identical = all(f == files["local"] for f in files.values())
    finally:
        shutil.rmtree(check, ignore_errors=True)
        ray.shutdown()
    steps, episodes = summaries["local"].steps, summaries["local"].episodes
    report = {"env": args.env, "episodes": episodes, "steps": steps, "workers": args.workers,
              "envs_per_worker": args.envs_per_worker, "rounds": args.rounds, "ray_init_s": ray_start,
              "shards_identical": identical, "variants": {}}
    print(f"{args.env}: {episodes} episodes, {steps} steps, {args.workers} workers x {args.envs_per_worker} "
          f"slots, median of {args.rounds} rounds; ray.init {ray_start:.1f} s (once, not timed); "
          f"shards identical across backends: {identical}")
    print(f"{'variant':10s} {'wall s':>8s} {'steps/s':>8s} {'s/episode':>10s} {'vs local':>9s}")
    for name, ws in walls.items():
        med = statistics.median(ws)
        base = statistics.median(walls["local-pw" if name.endswith("-pw") else "local"])
        worker_s = med * args.workers / episodes  # worker-seconds per episode: the projection's unit cost
        report["variants"][name] = {"wall_s": med, "walls": ws, "steps_per_s": steps / med,
                                    "worker_s_per_episode": worker_s, "overhead_vs_local": med / base - 1}
        print(f"{name:10s} {med:8.2f} {steps / med:8.1f} {worker_s:10.3f} {med / base - 1:+9.1%}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main(tyro.cli(Args))
