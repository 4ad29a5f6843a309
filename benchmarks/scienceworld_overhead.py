"""Per-step cost of R2V/ScienceWorld-v0 (clean and composite) relative to raw ``scienceworld``, in one run; and the
reset time.

Four variants, each on its own JVM, play the same action sequences (a few invalid or free commands, then the gold
sequence, recorded on the r2v env) on the same test variations (the first ``--tasks``, one per task type):

* ``raw``: ``scienceworld.ScienceWorldEnv`` as its README starts it (``load`` + ``reset``, then ``step``);
* ``raw-flags``: the same, on a JVM with r2v's options (``-XX:hashCode=2``, r2v_envs/scienceworld/engine.py), to
  tell the cost of the option from the cost of the wrapper;
* ``clean`` and ``composite``: ``gym.make("R2V/ScienceWorld-v0", perturbations=None | "composite")``.

Every JVM first plays one task untimed (warm-up). The raw engine's ``step`` already computes the valid-action list, ``look``, ``inventory`` and the task description
each step, so the variants ask the engine for the same things. Steps are interleaved: each action is played on
all four variants in turn (the order rotating every step), so the machine's load hits them alike; the ratios are
of the total step times.

    python benchmarks/scienceworld_overhead.py --tasks 6 --max-actions 30
    python benchmarks/env_overhead.py --env scienceworld     # the same
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass

import gymnasium as gym
import tyro

import r2v_envs  # noqa: F401
from r2v_envs.scienceworld.engine import close_scienceworld, start_scienceworld
from r2v_envs.scienceworld.tasks import parse_task_id

PROLOGUE = ["xyzzy", "look around", "inventory"]


@dataclass
class Args:
    tasks: int = 6
    """first N test variations (one per task type)"""
    max_actions: int = 30
    """gold actions replayed per task (after the prologue)"""
    seed: int = 7
    """perturbation seed of the composite variant"""
    json: str | None = None
    """also write the figures here"""


class Raw:
    """The raw engine, loaded and reset the way scienceworld's own examples do."""

    def __init__(self, flags: bool):
        if flags:
            self.env = start_scienceworld()
        else:
            from scienceworld import ScienceWorldEnv

            self.env = ScienceWorldEnv("", envStepLimit=10**9)

    def reset(self, task_id: str) -> None:
        task, var = parse_task_id(task_id)
        self.env.load(task, var, "", generateGoldPath=True)  # r2v's expert asks for the gold path too
        self.env.reset()

    def step(self, action: str) -> None:
        self.env.step(action)

    def close(self) -> None:
        close_scienceworld(self.env)


class R2V:
    def __init__(self, perturbations, seed: int):
        self.env = gym.make("R2V/ScienceWorld-v0", seed=seed, split="test", perturbations=perturbations,
                            max_episode_steps=10**6)

    def reset(self, task_id: str) -> None:
        self.env.reset(options={"task_id": task_id})

    def step(self, action: str) -> None:
        self.env.step(action)

    def close(self) -> None:
        self.env.close()


def main(args: Args) -> dict:
    variants = {"raw": Raw(False), "raw-flags": Raw(True), "clean": R2V(None, args.seed),
                "composite": R2V("composite", args.seed)}
    clean = variants["clean"].env
    task_ids = clean.unwrapped.task_ids()[: args.tasks]
    totals = {k: 0.0 for k in variants}
    resets: dict[str, list[float]] = {k: [] for k in variants}
    per_task = []
    n_steps = 0
    try:
        # Warm-up, untimed: every JVM plays the last task once (class loading and JIT compilation would otherwise
        # fall on the first measured steps, and unevenly: only some variants generate the gold sequence)
        clean.reset(options={"task_id": task_ids[-1]})
        for v in variants.values():
            v.reset(task_ids[-1])
            for action in PROLOGUE + clean.unwrapped._gold[: args.max_actions]:
                v.step(action)
        for task_id in task_ids:
            clean.reset(options={"task_id": task_id})
            actions = PROLOGUE + clean.unwrapped._gold[: args.max_actions]
            for name, v in variants.items():
                t0 = time.perf_counter()
                v.reset(task_id)
                resets[name].append(time.perf_counter() - t0)
            task_totals = {k: 0.0 for k in variants}
            names = list(variants)
            for i, action in enumerate(actions):
                for name in names[i % len(names):] + names[: i % len(names)]:  # rotate who goes first
                    t0 = time.perf_counter()
                    variants[name].step(action)
                    task_totals[name] += time.perf_counter() - t0
            n_steps += len(actions)
            for k in totals:
                totals[k] += task_totals[k]
            per_task.append({"task_id": task_id, "steps": len(actions),
                             **{k: round(v / len(actions) * 1e3, 1) for k, v in task_totals.items()}})
            print(json.dumps(per_task[-1]), flush=True)
    finally:
        for v in variants.values():
            v.close()
    ms = {k: v / n_steps * 1e3 for k, v in totals.items()}
    reset_med = {k: statistics.median(v) for k, v in resets.items()}
    print(f"{len(task_ids)} test variations, {n_steps} steps per variant (interleaved)")
    print(f"{'variant':<10} {'ms/step':>8} {'x raw':>7} {'x raw-flags':>11} {'reset s (median)':>17}")
    for k, v in ms.items():
        print(f"{k:<10} {v:8.1f} {v / ms['raw']:7.3f} {v / ms['raw-flags']:11.3f} {reset_med[k]:17.2f}")
    out = {"tasks": task_ids, "steps": n_steps, "ms_per_step": ms,
           "ratio_vs_raw": {k: v / ms["raw"] for k, v in ms.items()},
           "ratio_vs_raw_flags": {k: v / ms["raw-flags"] for k, v in ms.items()},
           "reset_s_median": reset_med, "per_task": per_task}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return out


if __name__ == "__main__":
    main(tyro.cli(Args))
