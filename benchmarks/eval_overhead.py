"""Per-step overhead of ``r2v eval`` relative to stepping the env directly, in one run.

The same deterministic python-callable agent plays the same (task, z) episodes three ways: (1) ``direct``: a
plain loop over ``gym.make(env_id, seed=z)`` (reset with the runner's options, the agent sees the visible
info); (2) ``grid``: :func:`r2v_eval.grid.run_grid` into a fresh directory (runner, journaling, Parquet shards,
manifest; ``workers=0``, so no process hop); (3) ``grid+report``: the same plus :func:`write_report` (bootstrap
CIs, pass^k, the PNG). Rounds alternate between the variants so machine load hits them alike; each variant's
median over rounds of seconds per env step is reported, with the ratios to ``direct``.

    python benchmarks/eval_overhead.py --env-id R2V/TextWorld-v0 --tasks 4 --rounds 3
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass

import gymnasium as gym
import tyro

import r2v_envs  # noqa: F401
from r2v_agents.policy import visible_info


@dataclass
class Args:
    env_id: str = "R2V/TextWorld-v0"
    """env to measure (TextWorld: small suite)"""
    perturbations: str = "composite"
    """perturbation setting of every variant"""
    tasks: int = 4
    """tasks of the test split"""
    seeds: tuple[int, ...] = (0, 1)
    """perturbation seeds"""
    max_steps: int = 20
    """step cap per episode"""
    rounds: int = 3
    """alternating measurement rounds"""
    bootstrap: int = 1000
    """bootstrap resamples of the report"""


def agent(obs: str, info: dict) -> str:
    """Deterministic and cheap: a seeded admissible action, preferring ``take`` and ``go east``."""
    actions = info.get("admissible_actions") or ["look"]
    h = zlib.crc32(obs.encode())
    takes = [a for a in actions if a.startswith("take ")]
    if takes and h % 4:
        return takes[h % len(takes)]
    return "go east" if "go east" in actions and h % 5 else actions[h % len(actions)]


def env_kwargs(args: Args) -> dict:
    return {"suite": "small"} if args.env_id == "R2V/TextWorld-v0" else {}


def direct(args: Args, tasks: list[str]) -> int:
    steps = 0
    spec = None if args.perturbations == "none" else args.perturbations
    for z in args.seeds:
        env = gym.make(args.env_id, seed=z, perturbations=spec, max_episode_steps=args.max_steps,
                       **env_kwargs(args))
        for t in tasks:
            obs, info = env.reset(options={"task_id": t, "episode_index": 0})
            done = False
            while not done:
                obs, _, term, trunc, info = env.step(agent(obs, visible_info(info)))
                steps += 1
                done = term or trunc
        env.close()
    return steps


def grid(args: Args, tasks: list[str], report: bool) -> int:
    from r2v_agents.policy import as_policy
    from r2v_agents.shards import load_rows
    from r2v_eval.grid import GridConfig, cell_dir, run_grid
    from r2v_eval.robustness_report import write_report

    with tempfile.TemporaryDirectory() as out:
        g = GridConfig(env_ids=(args.env_id,), perturbations=(args.perturbations,), seeds=args.seeds,
                       task_ids=tuple(tasks), env_kwargs=env_kwargs(args), max_steps=args.max_steps,
                       progress=False)
        run_grid(as_policy(agent, "agent"), "agent", g, out)
        if report:
            write_report(out, args.bootstrap)
        return sum(r["steps"] for r in load_rows(cell_dir(out, args.env_id, args.perturbations), "episodes",
                                                   columns=["steps"]))


def main(args: Args) -> None:
    from r2v_eval.grid import GridConfig, resolve_tasks

    tasks = resolve_tasks(GridConfig(env_ids=(args.env_id,), tasks=args.tasks, env_kwargs=env_kwargs(args)),
                          args.env_id)
    variants = {"direct": lambda: direct(args, tasks), "grid": lambda: grid(args, tasks, False),
                "grid+report": lambda: grid(args, tasks, True)}
    for fn in variants.values():  # warm-up: engine caches, imports, game files
        fn()
    per_step: dict[str, list[float]] = {k: [] for k in variants}
    n_steps: dict[str, int] = {}
    for r in range(args.rounds):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            n = fn()
            per_step[name].append((time.perf_counter() - t0) / n)
            n_steps[name] = n
        print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
    assert len(set(n_steps.values())) == 1, f"the variants played different episodes: {n_steps}"
    base = statistics.median(per_step["direct"])
    print(f"{args.env_id} / {args.perturbations}: {len(tasks)} tasks x {len(args.seeds)} seeds, "
          f"{n_steps['direct']} steps per variant, median of {args.rounds} rounds")
    print("| variant | ms/step | x direct |\n|---|---:|---:|")
    for name, xs in per_step.items():
        m = statistics.median(xs)
        print(f"| {name} | {1000 * m:.2f} | {m / base:.2f} |")


if __name__ == "__main__":
    main(tyro.cli(Args))
