"""Play the expert through the first episode of some tasks of one env id, in this (fresh) interpreter.

A new machine's first run is a new interpreter on an empty cache, so tests/envs/test_first_contact.py runs this
module twice with ``-m`` and ``$R2V_CACHE`` pointing at one temporary folder: once cold (nothing generated,
built or cached yet), once warm (everything the first run left behind), and compares what the agent saw::

    python -m tests.support.first_contact R2V/Scripted-v0 '{}' --first 3 --out x.json
    python -m tests.support.first_contact R2V/TerminalBench-v0 '{"backend": "local"}' json-config-fix --out x.json

One env made with ``seed=SEED`` plays the expert (``info["expert_action"]`` each step) through the first episode
of each task: the tasks named, else the first ``--first`` of the env's split. ``--out`` gets, per task, the
episode's trace (each step's action, observation, reward, end flags and agent-visible info), the SHA-256 of its
canonical JSON, whether the expert won, and what a failure message needs (the last observation and, for
Terminal-Bench, ``info["test_output"]`` and ``info["outcome"]``); and the seconds the run took.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import time
from typing import Any

from r2v_agents.policy import visible_info

SEED = 3


def canonical(value: Any) -> bytes:
    """The bytes a trace is compared by: sorted keys, no whitespace, non-ASCII kept as UTF-8."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def seen(info: dict[str, Any]) -> dict[str, Any]:
    """What the agent may see of ``info`` (r2v_agents' own filter), and the perturbation events applied."""
    return {**visible_info(info), "perturbations": info.get("perturbations", [])}


def play(env, task_id: str) -> dict[str, Any]:
    """The expert's first episode of ``task_id``: its trace, digest, verdict and what a failure message needs."""
    obs, info = env.reset(options={"task_id": task_id})
    trace: list[dict[str, Any]] = [{"obs": obs, "info": seen(info)}]
    actions: list[str] = []
    terminated = truncated = False
    while not (terminated or truncated):
        action = info["expert_action"]
        if action is None:  # the expert gave up before the end: an episode lost, said so
            break
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        trace.append({"action": action, "obs": obs, "reward": reward, "terminated": terminated,
                      "truncated": truncated, "info": seen(info)})
    return {"task_id": task_id, "won": bool(info.get("won")), "steps": len(actions),
            "ended": "terminated" if terminated else "truncated" if truncated else "expert gave no action",
            "digest": hashlib.sha256(canonical(trace)).hexdigest(), "trace": trace,
            "last_observation": obs, "test_output": info.get("test_output"), "outcome": info.get("outcome")}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("env_id")
    parser.add_argument("kwargs", help="gym.make keyword arguments, as JSON")
    parser.add_argument("tasks", nargs="*", help="task ids (default: the first --first tasks of the env's split)")
    parser.add_argument("--first", type=int, default=3)
    parser.add_argument("--out", required=True, help="where the JSON result goes (stdout is left to the engines)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    import gymnasium as gym

    import r2v_envs  # noqa: F401  (registers the envs)

    env = gym.make(args.env_id, seed=SEED, **json.loads(args.kwargs))
    try:
        episodes = [play(env, t) for t in args.tasks or env.unwrapped.task_ids()[:args.first]]
    finally:
        env.close()
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump({"episodes": episodes, "seconds": time.perf_counter() - start}, f, ensure_ascii=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
