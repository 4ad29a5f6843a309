"""Partial observability: lines dropped, reordered or cut short; admissible actions hidden (Appendix C).

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/Scripted-v0", seed=1, perturbations={"partial": {"prob": 1.0, "line_drop": 0.5}})
    >>> obs, info = env.reset(options={"task_id": "scripted-3"})
    >>> sorted({e["type"] for e in info["perturbations"]})
    ['partial']
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import gymnasium as gym
import numpy as np

from r2v_envs.perturbations.base import TextPerturbation, check_prob, event, split_lines


class DropObservationLines(TextPerturbation, gym.utils.RecordConstructorArgs):
    """With probability ``prob`` per step: each line is dropped with probability ``line_drop``, the
    remaining lines are shuffled with probability ``reorder``, and each survivor is cut to a prefix with
    probability ``line_truncate``. Independently, with probability ``hide_admissible_prob`` per step, a
    fraction ``hide_admissible`` of ``info["admissible_actions"]`` is hidden.
    """

    kind = "partial"
    default_channels = ("observation", "tool_output", "terminal", "admissible_actions")

    def __init__(self, env: gym.Env, prob: float = 0.3, line_drop: float = 0.3, reorder: float = 0.2,
                 line_truncate: float = 0.1, hide_admissible: float = 0.3, hide_admissible_prob: float = 0.3,
                 seed: int | None = None, channels: Iterable[str] | None = None):
        seed = None if seed is None else int(seed)
        gym.utils.RecordConstructorArgs.__init__(
            self, prob=prob, line_drop=line_drop, reorder=reorder, line_truncate=line_truncate,
            hide_admissible=hide_admissible, hide_admissible_prob=hide_admissible_prob, seed=seed,
            channels=None if channels is None else list(channels))
        super().__init__(env, seed, channels)
        self.prob = check_prob("prob", prob)
        self.line_drop = check_prob("line_drop", line_drop)
        self.reorder = check_prob("reorder", reorder)
        self.line_truncate = check_prob("line_truncate", line_truncate)
        self.hide_admissible = check_prob("hide_admissible", hide_admissible)
        self.hide_admissible_prob = check_prob("hide_admissible_prob", hide_admissible_prob)

    def perturb(self, text: str, channel: str, rng: np.random.Generator, info: dict[str, Any]):
        if rng.random() >= self.prob:
            return text, []
        lines = split_lines(text)
        content = [i for i, line in enumerate(lines) if line.strip()]
        dropped = {i for i in content if rng.random() < self.line_drop}
        if dropped and len(dropped) == len(content):  # keep one line: an empty response is a different failure
            dropped.discard(content[int(rng.integers(len(content)))])
        kept = [line for i, line in enumerate(lines) if i not in dropped]
        events = []
        if dropped:
            events.append(event(self.kind, channel, f"dropped {len(dropped)} of {len(content)} lines"))
        if rng.random() < self.reorder and len(kept) > 1:
            kept = [kept[i] for i in rng.permutation(len(kept))]
            events.append(event(self.kind, channel, "reordered lines"))
        cut = 0
        for i, line in enumerate(kept):
            if len(line) > 8 and rng.random() < self.line_truncate:
                kept[i] = line[: int(len(line) * rng.uniform(0.3, 0.8))]
                cut += 1
        if cut:
            events.append(event(self.kind, channel, f"truncated {cut} lines"))
        return "\n".join(kept), events

    def on_info(self, info: dict[str, Any]) -> None:
        actions = info.get("admissible_actions")
        if not actions or "admissible_actions" not in self.channels:
            return
        rng = self.rng(info, stream=1)
        if rng.random() >= self.hide_admissible_prob:
            return
        hidden = {i for i in range(len(actions)) if rng.random() < self.hide_admissible}
        if hidden:
            info["admissible_actions"] = [a for i, a in enumerate(actions) if i not in hidden]
            info["perturbations"].append(
                event(self.kind, "admissible_actions", f"hid {len(hidden)} of {len(actions)} actions"))
