"""`r2v rollout`: run simple policies through perturbed episodes and print a per-perturbation success table.

The expert (the env's oracle ``expert_action``) acts on the true state, so its success shows that the
perturbations never corrupt the game itself; the random baseline picks uniformly among the admissible
actions the agent can *see*, so its success shows what the noise costs an agent that reads its inputs.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import gymnasium as gym
import numpy as np


@dataclass
class RolloutArgs:
    env_id: str = "R2V/TextWorld-v0"
    """registered environment id"""
    split: str = "test"
    """task split (train / valid / test / all)"""
    tasks: int = 0
    """number of tasks of the split to run (0 = all)"""
    seeds: tuple[int, ...] = (0,)
    """perturbation seeds z"""
    perturbations: tuple[str, ...] = ("none", "flaky", "partial", "distractor", "injection", "composite")
    """perturbation settings, one table row each"""
    policies: tuple[str, ...] = ("expert", "random")
    """policies: expert (oracle) and random (uniform over visible admissible actions)"""
    max_steps: int = 50
    """step cap per episode"""
    env_kwargs: dict[str, str] = field(default_factory=dict)
    """extra constructor arguments, e.g. suite=small"""
    out: str | None = None
    """write one JSON line per episode here (atomic)"""


def _act(policy: str, info: dict, rng: np.random.Generator) -> str:
    if policy == "expert":
        return info["expert_action"] or "look"
    actions = info.get("admissible_actions") or ["look"]
    return actions[int(rng.integers(len(actions)))]


def rollout(args: RolloutArgs) -> list[dict]:
    from tqdm.auto import tqdm

    import r2v_envs  # noqa: F401

    # one env per (perturbation, z): an env keeps its game loaded, and the grid runs task by task
    envs = {(p, z): gym.make(args.env_id, seed=z, split=args.split, max_episode_steps=args.max_steps,
                             perturbations=None if p == "none" else p, **args.env_kwargs)
            for p in args.perturbations for z in args.seeds}
    task_ids = next(iter(envs.values())).unwrapped.split_task_ids()
    task_ids = task_ids[: args.tasks] if args.tasks else task_ids
    grid = [(t, z, p, pol) for t in task_ids for z in args.seeds for p in args.perturbations for pol in args.policies]
    records = []
    for task_id, z, pert, policy in tqdm(grid, desc="rollout"):
        env = envs[pert, z]
        rng = np.random.default_rng([z, len(records)])
        t0 = time.perf_counter()
        obs, info = env.reset(options={"task_id": task_id, "episode_index": 0})
        events, steps, done = len(info["perturbations"]), 0, False
        while not done:
            obs, reward, terminated, truncated, info = env.step(_act(policy, info, rng))
            events, steps, done = events + len(info["perturbations"]), steps + 1, terminated or truncated
        records.append({"task_id": task_id, "seed": z, "perturbation": pert, "policy": policy,
                        "won": bool(info["won"]), "steps": steps, "events": events,
                        "seconds": round(time.perf_counter() - t0, 4)})
    if args.out:
        path = Path(args.out)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text("".join(json.dumps(r) + "\n" for r in records))
        os.replace(tmp, path)
    return records


def success_table(records: list[dict]) -> str:
    """Markdown table: success rate per perturbation (rows) and policy (columns)."""
    cells: dict[tuple[str, str], list[bool]] = defaultdict(list)
    events: dict[str, list[float]] = defaultdict(list)
    for r in records:
        cells[r["perturbation"], r["policy"]].append(r["won"])
        events[r["perturbation"]].append(r["events"] / max(1, r["steps"] + 1))
    perts = list(dict.fromkeys(r["perturbation"] for r in records))
    policies = list(dict.fromkeys(r["policy"] for r in records))
    lines = ["| perturbation | " + " | ".join(f"{p} SR" for p in policies) + " | events/step | episodes |",
             "|---|" + "---:|" * (len(policies) + 2)]
    for pert in perts:
        srs = [100 * np.mean(cells[pert, p]) for p in policies]
        n = sum(len(cells[pert, p]) for p in policies)
        lines.append(f"| {pert} | " + " | ".join(f"{s:.1f}%" for s in srs)
                     + f" | {np.mean(events[pert]):.2f} | {n} |")
    return "\n".join(lines)
