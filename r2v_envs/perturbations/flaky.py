"""Flaky tools: the tool's response is replaced or corrupted (Appendix C, "tool flakiness").

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/Scripted-v0", seed=3, perturbations={"flaky": {"prob": 1.0, "modes": ["http"]}})
    >>> obs, info = env.reset(options={"task_id": "scripted-1"})
    >>> obs, *_, info = env.step("go east")
    >>> obs.startswith("HTTP"), info["perturbations"][0]["type"]
    (True, 'flaky')
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import gymnasium as gym
import numpy as np

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.perturbations.base import TextPerturbation, check_prob, event
from r2v_envs.perturbations.templates import HTTP_FAILURES, STALE_MARKER, TRUNCATION_MARKER, flaky_error, pick

FLAKY_MODES = ("error", "http", "stale", "truncate", "corrupt")


class FlakyToolOutput(TextPerturbation, gym.utils.RecordConstructorArgs):
    """With probability ``prob`` per step, the tool output is an error, an HTTP failure, the previous
    (stale) output behind a cache marker, a truncated response, or a response with garbled characters.

    The reset observation is not a tool response and is left alone.
    """

    kind = "flaky"
    apply_on_reset = False

    def __init__(self, env: gym.Env, prob: float = 0.15, modes: Sequence[str] = FLAKY_MODES,
                 seed: int | None = None, channels: Iterable[str] | None = None):
        seed = None if seed is None else int(seed)
        gym.utils.RecordConstructorArgs.__init__(self, prob=prob, modes=list(modes), seed=seed,
                                                 channels=None if channels is None else list(channels))
        super().__init__(env, seed, channels)
        self.prob = check_prob("prob", prob)
        for m in modes:
            if m not in FLAKY_MODES:
                raise UnknownChoiceError("flaky mode", m, FLAKY_MODES)
        self.modes = tuple(modes)
        self._previous = ""

    def on_reset(self, obs: str, info: dict[str, Any]) -> str:
        self._previous = obs
        return obs

    def perturb(self, text: str, channel: str, rng: np.random.Generator, info: dict[str, Any]):
        previous, self._previous = self._previous, text
        if not self.modes or rng.random() >= self.prob:
            return text, []
        mode = pick(rng, self.modes)
        if mode == "error":
            out = flaky_error(self.profile, rng)
        elif mode == "http":
            out = pick(rng, HTTP_FAILURES)
        elif mode == "stale":
            out = f"{STALE_MARKER}\n{previous}"
        elif mode == "truncate":
            keep = int(len(text) * rng.uniform(0.2, 0.7))
            out = text[:keep] + TRUNCATION_MARKER
        else:  # corrupt: garble a contiguous span of characters
            chars = list(text)
            if chars:
                start = int(rng.integers(len(chars)))
                for i in range(start, min(len(chars), start + max(4, len(chars) // 5))):
                    if not chars[i].isspace():
                        chars[i] = "#"
            out = "".join(chars)
        return out, [event(self.kind, channel, mode)]
