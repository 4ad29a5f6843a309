"""Shared machinery of the perturbation wrappers: seeded per-step RNG, channels, event records.

Every wrapper draws from ``numpy.random.default_rng([z, episode_index, step, salt])`` where ``salt`` is a
stable hash of the wrapper's name: the stream depends only on the perturbation seed, the episode and the
step, never on process, timing or the other wrappers in the stack. Wrappers change only what the agent sees
(the observation text, ``info["goal"]``, ``info["admissible_actions"]``); the true state and the oracle keys
(``won``, ``score``, ``expert_action``) are never touched.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from r2v_envs.errors import PerturbationConfigError, UnknownChoiceError

# Named text channels a perturbation can target. Benchmarks label each observation with one of these (the env
# contract in r2v_envs.core re-exports it).
CHANNELS: tuple[str, ...] = ("observation", "goal", "tool_output", "terminal", "admissible_actions")


def check_prob(name: str, value: float) -> float:
    value = float(value)
    if not 0.0 <= value <= 1.0:
        raise PerturbationConfigError(f"{name} must be a probability in [0, 1], got {value}")
    return value


def event(kind: str, channel: str, detail: str) -> dict[str, str]:
    """One applied perturbation, as recorded in ``info["perturbations"]``."""
    return {"type": kind, "channel": channel, "detail": detail}


class TextPerturbation(gym.Wrapper[str, str, str, str]):
    """Base wrapper: subclasses implement :meth:`perturb` for a text channel and declare ``kind``.

    Subclasses must also inherit ``gymnasium.utils.RecordConstructorArgs`` and call its ``__init__`` with
    their arguments (seed resolved), so ``env.spec`` records the whole stack.
    """

    kind: ClassVar[str] = "perturbation"
    default_channels: ClassVar[tuple[str, ...]] = ("observation", "tool_output", "terminal")
    apply_on_reset: ClassVar[bool] = True

    def __init__(self, env: gym.Env, seed: int | None, channels: Iterable[str] | None):
        super().__init__(env)
        resolve_seed(env, seed)  # fail at construction, not at the first step, when there is no z at all
        self._seed = None if seed is None else int(seed)
        self.channels = tuple(channels) if channels is not None else self.default_channels
        for ch in self.channels:
            if ch not in CHANNELS:
                raise UnknownChoiceError("channel", ch, CHANNELS)
        self._salt = zlib.crc32(self.kind.encode())
        self.profile = getattr(env.unwrapped, "perturbation_profile", "game")

    @property
    def seed(self) -> int:
        """The perturbation seed z: the one given to this wrapper, else the env's current z (a seeded reset
        sets it when none was given at make)."""
        return self._seed if self._seed is not None else int(self.env.unwrapped.perturbation_seed)

    def rng(self, info: dict[str, Any], stream: int = 0) -> np.random.Generator:
        return np.random.default_rng(
            [self.seed, int(info.get("episode_index", 0)), int(info.get("step", 0)), self._salt, stream])

    def perturb(self, text: str, channel: str, rng: np.random.Generator, info: dict[str, Any]
                ) -> tuple[str, list[dict[str, str]]]:
        raise NotImplementedError

    def on_reset(self, obs: str, info: dict[str, Any]) -> str:
        """Hook for per-episode state (e.g. a corrupted goal); returns the (possibly changed) observation."""
        return obs

    def on_info(self, info: dict[str, Any]) -> None:
        """Hook for perturbing agent-visible info keys every step (goal, admissible actions)."""

    def _apply(self, obs: str, info: dict[str, Any], is_reset: bool) -> str:
        channel = info.get("channel", "observation")
        if channel in self.channels and (self.apply_on_reset or not is_reset):
            obs, events = self.perturb(obs, channel, self.rng(info), info)
            info["perturbations"].extend(events)
        self.on_info(info)
        return obs

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        obs, info = self.env.reset(seed=seed, options=options)
        obs = self.on_reset(obs, info)
        return self._apply(obs, info, is_reset=True), info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._apply(obs, info, is_reset=False), reward, terminated, truncated, info


def resolve_seed(env: gym.Env, seed: int | None) -> int:
    if seed is not None:
        return int(seed)
    z = getattr(env.unwrapped, "perturbation_seed", None)
    if z is None:
        raise PerturbationConfigError("no perturbation seed: pass seed= or wrap an r2v TextEnv")
    return int(z)


def split_lines(text: str) -> list[str]:
    return text.split("\n")


def insert_line(text: str, line: str, rng: np.random.Generator) -> str:
    """Insert ``line`` between two existing lines (or at either end), chosen by ``rng``."""
    lines = split_lines(text)
    pos = int(rng.integers(len(lines) + 1))
    return "\n".join([*lines[:pos], line, *lines[pos:]])
