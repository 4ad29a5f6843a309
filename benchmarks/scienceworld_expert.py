"""The expert (ScienceWorld's gold action sequences) on R2V/ScienceWorld-v0's test variations: win rate, task types,
episode lengths and reset times.

The test split lists its variations round-robin over the 30 task types, so the first 30 are one variation of each.
Episodes run clean (no perturbation) by default, under a step cap of ``--max-steps`` (default: the registered one).

    python benchmarks/scienceworld_expert.py --tasks 30
    python benchmarks/scienceworld_expert.py --tasks 30 --perturbations composite --json runs/sw-expert.json
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

import gymnasium as gym
import tyro

import r2v_envs  # noqa: F401


@dataclass
class Args:
    tasks: int = 30
    """first N variations of the split (round-robin over the task types)"""
    split: str = "test"
    perturbations: str = "none"
    """none | composite | any perturbation name"""
    seed: int = 0
    max_steps: int | None = None
    """step cap (None: the registered one)"""
    json: str | None = None
    """also write the per-episode rows here"""


def main(args: Args) -> dict:
    kw = {} if args.max_steps is None else {"max_episode_steps": args.max_steps}
    env = gym.make("R2V/ScienceWorld-v0", seed=args.seed, split=args.split,
                   perturbations=None if args.perturbations == "none" else args.perturbations, **kw)
    ids = env.unwrapped.task_ids()[: args.tasks]
    rows = []
    for task_id in ids:
        t0 = time.perf_counter()
        _, info = env.reset(options={"task_id": task_id})
        reset_s = time.perf_counter() - t0
        gold = len(env.unwrapped._gold)
        steps, terminated, truncated, t1 = 0, False, False, time.perf_counter()
        while not (terminated or truncated) and info["expert_action"] is not None:
            _, _, terminated, truncated, info = env.step(info["expert_action"])
            steps += 1
        step_s = (time.perf_counter() - t1) / max(steps, 1)
        rows.append({"task_id": task_id, "won": info["won"], "lost": info["lost"], "score": info["score"],
                     "gold_len": gold, "steps": steps, "truncated": truncated, "reset_s": round(reset_s, 3),
                     "step_s": round(step_s, 4)})
        print(json.dumps(rows[-1]), flush=True)
    env.close()
    wins = sum(r["won"] for r in rows)
    types = {r["task_id"].rsplit("/", 1)[0] for r in rows}
    resets = [r["reset_s"] for r in rows[1:]] or [rows[0]["reset_s"]]  # the first reset also starts the JVM
    summary = {"episodes": len(rows), "won": wins, "win_rate": wins / len(rows), "task_types": len(types),
               "gold_len_median": statistics.median(r["gold_len"] for r in rows),
               "gold_len_max": max(r["gold_len"] for r in rows),
               "first_reset_s": rows[0]["reset_s"], "reset_s_median": statistics.median(resets),
               "reset_s_max": max(resets), "step_s_median": statistics.median(r["step_s"] for r in rows)}
    print(json.dumps(summary))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"summary": summary, "episodes": rows}, f, indent=1)
    return summary


if __name__ == "__main__":
    main(tyro.cli(Args))
