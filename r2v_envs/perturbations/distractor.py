"""Distractors: plausible but wrong lines (red-herring objects and exits, fake errors, wrong code).

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/Scripted-v0", seed=5, perturbations={"distractor": {"prob": 1.0}})
    >>> obs, info = env.reset(options={"task_id": "scripted-0"})
    >>> info["perturbations"][0]["type"]
    'distractor'
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np

from r2v_envs.errors import PerturbationConfigError
from r2v_envs.perturbations.base import TextPerturbation, check_prob, event, insert_line
from r2v_envs.perturbations.templates import distractor_line


class AddDistractors(TextPerturbation, gym.utils.RecordConstructorArgs):
    """With probability ``prob`` per step, 1 to ``max_lines`` distractor lines are inserted."""

    kind = "distractor"

    def __init__(self, env: gym.Env, prob: float = 0.3, max_lines: int = 2, seed: int | None = None,
                 channels: Iterable[str] | None = None):
        seed = None if seed is None else int(seed)
        gym.utils.RecordConstructorArgs.__init__(self, prob=prob, max_lines=max_lines, seed=seed,
                                                 channels=None if channels is None else list(channels))
        super().__init__(env, seed, channels)
        self.prob = check_prob("prob", prob)
        if int(max_lines) < 1:
            raise PerturbationConfigError(f"max_lines must be >= 1, got {max_lines}")
        self.max_lines = int(max_lines)

    def perturb(self, text: str, channel: str, rng: np.random.Generator, info: dict[str, Any]):
        if rng.random() >= self.prob:
            return text, []
        events = []
        for _ in range(int(rng.integers(1, self.max_lines + 1))):
            sub, line = distractor_line(self.profile, rng)
            text = insert_line(text, line, rng)
            events.append(event(self.kind, channel, sub))
        return text, events
