"""`r2v rollout`: run simple policies through perturbed episodes and print a per-perturbation success table.

The expert (the env's oracle ``expert_action``) acts on the true state, so its success shows that the
perturbations never corrupt the game itself; the random baseline picks uniformly among the admissible
actions the agent can *see*, so its success shows what the noise costs an agent that reads its inputs.
Episodes are stepped by the shared runner (:mod:`r2v_agents.runner`), one run directory per
(perturbation, policy) cell, so a rerun resumes and every episode is logged in the runner's shard format.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

import r2v_envs  # noqa: F401
from r2v_agents.policy import BatchPolicy
from r2v_agents.reference import ExpertAgent, RandomAgent
from r2v_agents.runner import RunConfig, run
from r2v_agents.shards import load_rows
from r2v_envs.errors import UnknownChoiceError


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
    """policies: expert (oracle) and random (uniform over visible admissible actions), as r2v eval's --agent"""
    max_steps: int = 50
    """step cap per episode"""
    env_kwargs: dict[str, str] = field(default_factory=dict)
    """extra constructor arguments, e.g. suite=small"""
    out: str = "runs/rollout"
    """run directory (one sub-directory per perturbation and policy; a rerun resumes)"""
    workers: int = 2
    """env worker processes"""


def make_policy(name: str) -> BatchPolicy:
    """``r2v eval``'s own reference agents (:mod:`r2v_agents.reference`), so ``--agent random`` and this table's
    random column draw the same action at every (episode, step)."""
    if name == "expert":
        return ExpertAgent()
    if name == "random":
        return RandomAgent(0)

    raise UnknownChoiceError("rollout policy", name, ["expert", "random"])


def rollout(args: RolloutArgs) -> list[dict]:
    """Run the grid; return one record per episode (task, seed, perturbation, policy, won, steps, events)."""
    import gymnasium as gym

    probe = gym.make(args.env_id, split=args.split, **args.env_kwargs)
    task_ids = probe.unwrapped.task_ids()
    probe.close()
    task_ids = tuple(task_ids[: args.tasks] if args.tasks else task_ids)
    records = []
    for pert in args.perturbations:
        for policy in args.policies:
            out = Path(args.out) / f"{pert}-{policy}"
            cfg = RunConfig(args.env_id, str(out), task_ids=task_ids, seeds=tuple(args.seeds), split=args.split,
                            env_kwargs={**args.env_kwargs, "perturbations": None if pert == "none" else pert},
                            max_steps=args.max_steps, workers=args.workers, policy_in_workers=True)
            run(make_policy(policy), cfg, policy_name=policy)
            events = defaultdict(int)
            for row in load_rows(out, "steps", columns=["episode_id", "perturbations"]):
                events[row["episode_id"]] += len(json.loads(row["perturbations"] or "[]"))
            for ep in load_rows(out, "episodes"):
                records.append({"task_id": ep["task_id"], "seed": ep["z"], "perturbation": pert, "policy": policy,
                                "won": bool(ep["success"]), "steps": ep["steps"],
                                "events": events[ep["episode_id"]]})
    return records


def success_table(records: list[dict]) -> str:
    """Markdown table: success rate per perturbation (rows) and policy (columns).

    Example:
        >>> print(success_table([{"perturbation": "none", "policy": "expert", "won": True, "steps": 3,
        ...                       "events": 0}]))
        | perturbation | expert SR | events/step | episodes |
        |---|---:|---:|---:|
        | none | 100.0% | 0.00 | 1 |
    """
    cells: dict[tuple[str, str], list[bool]] = defaultdict(list)
    events: dict[str, list[float]] = defaultdict(list)
    for r in records:
        cells[r["perturbation"], r["policy"]].append(r["won"])
        events[r["perturbation"]].append(r["events"] / max(1, r["steps"]))
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
