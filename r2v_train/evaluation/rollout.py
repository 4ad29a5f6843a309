"""`r2v rollout`: the expert and a random agent through each perturbation, and a per-perturbation success table.

The expert (the env's oracle ``expert_action``) acts on the true state, so its success shows that the
perturbations never corrupt the game itself; the random baseline picks uniformly among the admissible
actions the agent can *see*, so its success shows what the noise costs an agent that reads its inputs.
It is ``r2v eval --agent expert`` and ``--agent random`` over the same grid: each policy's episodes are an
evaluation directory (``OUT/<policy>``, with results.json and report.md; ``r2v view`` and ``r2v eval compare`` read
it), run, resumed, retried and counted by the one rule of :mod:`r2v_eval.cells`; this module adds the table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from r2v_agents.policy import BatchPolicy
from r2v_agents.reference import ExpertAgent, RandomAgent
from r2v_agents.shards import load_rows
from r2v_envs.errors import UnknownChoiceError
from r2v_eval.cells import cell_episodes, scored
from r2v_eval.grid import GridConfig, cell_dir, check_cells, parse_settings, run_grid
from r2v_eval.robustness_report import write_report
from r2v_eval.stats import md_table


@dataclass
class RolloutArgs:
    env_id: str = "R2V/TextWorld-v0"
    """registered environment id (or module:Id, or the URL of r2v serve)"""
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
    """output directory: one r2v eval directory per policy (a rerun resumes)"""
    workers: int = 2
    """env worker processes"""


def make_policy(name: str) -> BatchPolicy:
    """``r2v eval``'s own reference agents (:mod:`r2v_agents.reference`)."""
    if name == "expert":
        return ExpertAgent()
    if name == "random":
        return RandomAgent(0)
    raise UnknownChoiceError("rollout policy", name, ["expert", "random"])


def rollout(args: RolloutArgs) -> list[dict]:
    """Evaluate each policy over the grid; return one record per scored episode (task, seed, perturbation, policy,
    won, steps, perturbation events)."""
    grid = GridConfig(env_ids=(args.env_id,), perturbations=args.perturbations, seeds=args.seeds, split=args.split,
                      tasks=args.tasks, env_kwargs=dict(args.env_kwargs), max_steps=args.max_steps,
                      workers=args.workers)
    settings = parse_settings(grid.perturbations)
    name = check_cells(grid, settings)[args.env_id]
    records = []
    for policy in args.policies:
        out = Path(args.out) / policy
        run_grid(make_policy(policy), policy, grid, out, {"spec": policy})
        write_report(out)
        for setting in settings:
            episodes = cell_episodes(cell_dir(out, name, setting.name))
            events: dict[tuple[str, str], int] = defaultdict(int)  # of the attempt that counts (a retry reruns)
            for d in {e["dir"] for e in episodes.values()}:
                for row in load_rows(d, "steps", columns=["episode_id", "perturbations"]):
                    events[d, row["episode_id"]] += len(json.loads(row["perturbations"] or "[]"))
            for ep in scored(episodes):
                records.append({"task_id": ep["task_id"], "seed": ep["z"], "perturbation": setting.name,
                                "policy": policy, "won": bool(ep["success"]), "steps": ep["steps"],
                                "events": events[ep["dir"], ep["episode_id"]]})
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
    rows = [[pert] + [f"{100 * np.mean(cells[pert, p]):.1f}%" for p in policies]
            + [f"{np.mean(events[pert]):.2f}", sum(len(cells[pert, p]) for p in policies)] for pert in perts]
    return "\n".join(md_table(["perturbation"] + [f"{p} SR" for p in policies] + ["events/step", "episodes"], rows))
