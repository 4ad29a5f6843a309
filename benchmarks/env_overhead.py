"""Per-step cost of R2V/TextWorld-v0 (clean and composite) relative to raw ``textworld.gym``, in one run.

The same games and the same action sequences (the expert's, recorded on the raw env, plus a few invalid
commands) are replayed on all three, with the same information requested from the engine (admissible
commands, the planner's policy commands, won/lost/score/objective). Rounds alternate between the three so
that machine load hits them alike; the median over rounds of each variant's mean step time is reported.

    python benchmarks/env_overhead.py --games 8 --rounds 5
    python benchmarks/env_overhead.py --env babyai --games 21 --rounds 5
    python benchmarks/env_overhead.py --env scienceworld --games 6     # benchmarks/scienceworld_overhead.py

``--env babyai``: R2V/BabyAI-v0 against raw minigrid on the same test tasks (the first ``--games``, every level in
turn) and the BabyAI bot's action sequences, recorded on raw minigrid. Two raw variants: minigrid's step alone, and
minigrid's step plus the bot's replanning (what R2V/BabyAI-v0 computes for ``expert_action``, the information
TextWorld's raw variant also requests); R2V adds the text rendering and the action feedback.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import gymnasium as gym
import tyro

import r2v_envs  # noqa: F401
from r2v_envs.textworld.generate import ensure_game
from r2v_envs.textworld.suite import get_suite


@dataclass
class Args:
    games: int = 8
    """number of games of the small suite to replay"""
    rounds: int = 5
    """alternating measurement rounds (raw, clean, composite each round)"""
    seed: int = 7
    """perturbation seed for the composite variant"""
    env: str = "textworld"
    """textworld | babyai | scienceworld"""


def raw_env(path):
    import textworld
    import textworld.gym

    infos = textworld.EnvInfos(won=True, lost=True, score=True, max_score=True, objective=True,
                               admissible_commands=True, policy_commands=True)
    return textworld.gym.make(textworld.gym.register_game(str(path), infos))


def record_actions(path) -> list[str]:
    env = raw_env(path)
    _, info = env.reset()
    actions = ["inventory", "look", "xyzzy"]
    for a in actions:
        _, _, _, info = env.step(a)
    for _ in range(60):
        a = info["policy_commands"][0]
        actions.append(a)
        _, _, done, info = env.step(a)
        if done:
            break
    env.close()
    return actions


def time_raw(path, actions) -> tuple[float, int]:
    env = raw_env(path)
    env.reset()
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    dt = time.perf_counter() - t0
    env.close()
    return dt, len(actions)


def time_r2v(env, task_id, actions) -> tuple[float, int]:
    env.reset(options={"task_id": task_id})
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    return time.perf_counter() - t0, len(actions)


def main(args: Args) -> dict[str, float]:
    if args.env == "babyai":
        return babyai_main(args)
    if args.env == "scienceworld":  # four JVMs, steps interleaved: its own script (this folder is on sys.path)
        import scienceworld_overhead

        return scienceworld_overhead.main(scienceworld_overhead.Args(tasks=args.games, seed=args.seed))["ratio_vs_raw"]
    suite = get_suite("small")
    task_ids = list(suite)[: args.games]
    paths = {t: ensure_game(suite[t]) for t in task_ids}
    actions = {t: record_actions(paths[t]) for t in task_ids}
    clean = gym.make("R2V/TextWorld-v0", seed=args.seed, suite="small", perturbations=None, max_episode_steps=1000)
    noisy = gym.make("R2V/TextWorld-v0", seed=args.seed, suite="small", perturbations="composite",
                     max_episode_steps=1000)
    per_round = {"raw": [], "clean": [], "composite": []}
    for _ in range(args.rounds):
        for name in per_round:
            total, steps = 0.0, 0
            for t in task_ids:
                dt, n = time_raw(paths[t], actions[t]) if name == "raw" else \
                    time_r2v(clean if name == "clean" else noisy, t, actions[t])
                total, steps = total + dt, steps + n
            per_round[name].append(total / steps)
    med = {k: statistics.median(v) for k, v in per_round.items()}
    print(f"{len(task_ids)} games, {sum(map(len, actions.values()))} steps per variant, {args.rounds} rounds")
    print(f"{'variant':<10} {'ms/step':>8} {'steps/s':>8} {'x raw':>7}")
    for k, v in med.items():
        print(f"{k:<10} {v * 1e3:8.3f} {1 / v:8.0f} {v / med['raw']:7.3f}")
    return {k: v / med["raw"] for k, v in med.items()}


# ------------------------------------------------------------------------------------------------ BabyAI
def babyai_record(task_id: str) -> list[int]:
    """The BabyAI bot's actions on raw minigrid for ``task_id`` (``<level>-<seed>``)."""
    from minigrid.utils.baby_ai_bot import BabyAIBot

    level, seed = task_id.rsplit("-", 1)
    env = gym.make(f"BabyAI-{level}-v0").unwrapped
    env.reset(seed=int(seed))
    bot, actions, taken = BabyAIBot(env), [], None
    for _ in range(200):
        taken = int(bot.replan(taken))
        actions.append(taken)
        _, _, terminated, truncated, _ = env.step(taken)
        if terminated or truncated:
            break
    env.close()
    return actions


def babyai_time_raw(task_id: str, actions: list[int], with_bot: bool) -> float:
    from minigrid.utils.baby_ai_bot import BabyAIBot

    level, seed = task_id.rsplit("-", 1)
    env = gym.make(f"BabyAI-{level}-v0").unwrapped
    env.reset(seed=int(seed))
    bot = BabyAIBot(env) if with_bot else None
    if bot is not None:  # the bot's first plan belongs to the reset, as in R2V/BabyAI-v0 (timed apart)
        bot.replan()
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
        if bot is not None:
            bot.replan(a)
    dt = time.perf_counter() - t0
    env.close()
    return dt


def babyai_main(args: Args) -> dict[str, float]:
    from r2v_envs.babyai.text import COMMANDS

    clean = gym.make("R2V/BabyAI-v0", seed=args.seed, split="test", perturbations=None, max_episode_steps=1000)
    noisy = gym.make("R2V/BabyAI-v0", seed=args.seed, split="test", perturbations="composite",
                     max_episode_steps=1000)
    task_ids = clean.unwrapped.task_ids()[: args.games]
    actions = {t: babyai_record(t) for t in task_ids}
    texts = {t: [COMMANDS[a] for a in actions[t]] for t in task_ids}
    resets = []
    per_round = {"raw": [], "raw+bot": [], "clean": [], "composite": []}
    for _ in range(args.rounds):
        for name in per_round:
            total, steps = 0.0, 0
            for t in task_ids:
                if name.startswith("raw"):
                    dt = babyai_time_raw(t, actions[t], with_bot=name == "raw+bot")
                else:
                    env = clean if name == "clean" else noisy
                    r0 = time.perf_counter()
                    env.reset(options={"task_id": t})
                    resets.append(time.perf_counter() - r0)
                    dt, _ = time_r2v_steps(env, texts[t])
                total, steps = total + dt, steps + len(actions[t])
            per_round[name].append(total / steps)
    med = {k: statistics.median(v) for k, v in per_round.items()}
    print(f"{len(task_ids)} BabyAI test tasks, {sum(map(len, actions.values()))} steps per variant, {args.rounds} "
          f"rounds; R2V reset {statistics.median(resets) * 1e3:.2f} ms (median)")
    print(f"{'variant':<10} {'ms/step':>8} {'steps/s':>8} {'x raw':>7} {'x raw+bot':>9}")
    for k, v in med.items():
        print(f"{k:<10} {v * 1e3:8.3f} {1 / v:8.0f} {v / med['raw']:7.3f} {v / med['raw+bot']:9.3f}")
    return {k: v / med["raw+bot"] for k, v in med.items()}


def time_r2v_steps(env, actions: list[str]) -> tuple[float, int]:
    """Steps of an env already reset (the reset is timed apart)."""
    t0 = time.perf_counter()
    for a in actions:
        env.step(a)
    return time.perf_counter() - t0, len(actions)


if __name__ == "__main__":
    main(tyro.cli(Args))
