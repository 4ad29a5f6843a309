"""Prompt injection: adversarial directives embedded in observations or in the goal (Appendix C).

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/Scripted-v0", seed=2, perturbations={"injection": {"goal_prob": 1.0}})
    >>> obs, info = env.reset(options={"task_id": "scripted-0"})
    >>> info["goal"] in obs, any(e["channel"] == "goal" for e in info["perturbations"])
    (True, True)
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np

from r2v_envs.perturbations.base import TextPerturbation, check_prob, event, insert_line
from r2v_envs.perturbations.templates import injection_text


class InjectPrompt(TextPerturbation, gym.utils.RecordConstructorArgs):
    """With probability ``prob`` per step an adversarial directive is inserted into the observation; with
    probability ``goal_prob`` per episode the goal (``info["goal"]`` and its copy in the first observation)
    carries one for the whole episode.
    """

    kind = "injection"

    def __init__(self, env: gym.Env, prob: float = 0.1, goal_prob: float = 0.3, seed: int | None = None,
                 channels: Iterable[str] | None = None):
        seed = None if seed is None else int(seed)
        gym.utils.RecordConstructorArgs.__init__(self, prob=prob, goal_prob=goal_prob, seed=seed,
                                                 channels=None if channels is None else list(channels))
        super().__init__(env, seed, channels)
        self.prob = check_prob("prob", prob)
        self.goal_prob = check_prob("goal_prob", goal_prob)
        self._goal: str | None = None
        self._goal_event: dict[str, str] | None = None

    def on_reset(self, obs: str, info: dict[str, Any]) -> str:
        self._goal, self._goal_event = None, None
        rng = self.rng(info, stream=1)
        goal = info.get("goal") or ""
        if goal and rng.random() < self.goal_prob:
            k, text = injection_text(self.profile, rng)
            self._goal = f"{goal} {text}" if rng.random() < 0.5 else f"{text} {goal}"
            self._goal_event = event(self.kind, "goal", f"template {k}")
            obs = obs.replace(goal, self._goal)
        return obs

    def on_info(self, info: dict[str, Any]) -> None:
        # the corrupted goal persists all episode, so every step that shows it records it
        if self._goal is not None:
            info["goal"] = self._goal
            info["perturbations"].append(dict(self._goal_event))

    def perturb(self, text: str, channel: str, rng: np.random.Generator, info: dict[str, Any]):
        if rng.random() >= self.prob:
            return text, []
        k, directive = injection_text(self.profile, rng)
        return insert_line(text, directive, rng), [event(self.kind, channel, f"template {k}")]
