"""Traces of a fixed action script on the scripted env under perturbations, and the oracle keys no perturbation
may touch (the perturbation tests' helpers)."""

from __future__ import annotations

import gymnasium as gym

import r2v_envs  # noqa: F401  (registers the envs)

SCRIPT = ["go east", "look", "go east", "inventory", "go east", "take coin"]


def run_script(perturbations, seed: int, task_id: str = "scripted-3", episodes: int = 2):
    """Observations, infos and rewards of ``episodes`` scripted episodes."""
    env = gym.make("R2V/Scripted-v0", seed=seed, perturbations=perturbations)
    trace = []
    for _ in range(episodes):
        obs, info = env.reset(options={"task_id": task_id})
        trace.append((obs, info, 0.0))
        for action in SCRIPT:
            obs, reward, terminated, truncated, info = env.step(action)
            trace.append((obs, info, reward))
            if terminated or truncated:
                break
    return trace


def oracle_view(info):
    """The keys a perturbation must never touch."""
    return {k: info[k] for k in ("won", "lost", "score", "expert_action", "task_id", "step")}
