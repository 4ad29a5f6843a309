"""ALFWorld steps/s: the raw engine (textworld.start with alfworld's wrappers) vs R2V/ALFWorld-v0.

Both sides play the same games with the same command sequence (each game's expert walkthrough, then the
env resets), with the same infos (admissible commands, handcoded expert); the R2V env is measured clean and
with the composite perturbations. Rounds alternate raw / env so machine load hits both alike.
Goal: env time per step <= 1.05x raw.

    python benchmarks/alfworld_overhead.py --games 6 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import gymnasium as gym

import r2v_envs  # noqa: F401
from r2v_envs.alfworld import generate


def raw_round(paths, walkthroughs) -> tuple[float, int]:
    import textworld
    from alfworld.agents.environment import alfred_tw_env as alfred

    elapsed, steps = 0.0, 0
    for path, actions in zip(paths, walkthroughs):
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile", "expert_plan"])
        env = textworld.start(str(path), infos, wrappers=[alfred.AlfredDemangler(), alfred.AlfredInfos,
                                                          alfred.AlfredExpert()])
        env.reset()  # loading is not a step: time the steps of a second episode, as for the env
        env.reset()
        start = time.perf_counter()
        for a in actions:
            env.step(a)
        elapsed += time.perf_counter() - start
        steps += len(actions)
        env.close()
    return elapsed, steps


def env_round(env, ids, walkthroughs) -> tuple[float, int]:
    elapsed, steps = 0.0, 0
    for task_id, actions in zip(ids, walkthroughs):
        env.reset(options={"task_id": task_id})
        env.reset(options={"task_id": task_id})
        start = time.perf_counter()
        for a in actions:
            env.step(a)
        elapsed += time.perf_counter() - start
        steps += len(actions)
    return elapsed, steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--games", type=int, default=6, help="games (one per family, then round-robin)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cache = tempfile.mkdtemp(prefix="r2v-alf-bench-")
    ids = generate.task_ids(args.games)
    paths = list(generate.ensure_games(ids, seed=0, cache_dir=cache).values())
    walkthroughs = [json.loads(p.read_text())["walkthrough"] for p in paths]
    envs = {name: gym.make("R2V/ALFWorld-v0", seed=0, source="offline", cache_dir=cache, split="all",
                           perturbations=spec, max_episode_steps=10_000)
            for name, spec in (("env_clean", None), ("env_composite", "composite"))}
    per_step: dict[str, list[float]] = {"raw": [], "env_clean": [], "env_composite": []}
    for _ in range(args.rounds):
        t, n = raw_round(paths, walkthroughs)
        per_step["raw"].append(t / n)
        for name, env in envs.items():
            t, n = env_round(env, ids, walkthroughs)
            per_step[name].append(t / n)
    raw = statistics.median(per_step["raw"])
    print(f"{args.games} games, {sum(map(len, walkthroughs))} steps per round, {args.rounds} rounds (median)")
    for name, values in per_step.items():
        med = statistics.median(values)
        print(f"{name:14s} {1000 * med:7.2f} ms/step  {1 / med:7.1f} steps/s  ratio vs raw {med / raw:5.3f}")


if __name__ == "__main__":
    main()
