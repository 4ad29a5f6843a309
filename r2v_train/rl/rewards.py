"""Episode rewards (TRL reward functions) and GRPO's group-relative advantages over episodes.

The reward functions have TRL's signature: ``GRPOTrainer`` calls them with the prompts, the completions and one
list per episode column (:attr:`r2v_train.rl.rollouts.PlayedEpisode.columns`: ``success``, ``episode_return``,
``max_score``, ``steps``, ``task_id``, ``z``, ``error``), one entry per episode. A user's own function with that
signature can replace or join them (``reward_funcs=[...]``, weighted by ``GRPOConfig.reward_weights``).

An episode whose env or sandbox failed (``error`` set) is not the agent's doing: its reward is None, which TRL
treats as unscorable, and its advantage is 0 (it neither pulls nor pushes).

Example:
    >>> success_reward(["go east"] * 3, success=[True, False, True], error=[None, None, "EnvError: x"])
    [1.0, 0.0, None]
    >>> success_return_reward(["a"], success=[False], episode_return=[2.0], max_score=[4.0], error=[None])
    [0.25]
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0], 4)]
    [1.5, -0.5, -0.5, -0.5, 0.0, 0.0, 0.0, 0.0]
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, float("nan"), 0.0], 4, scale="none")]
    [0.667, -0.333, 0.0, -0.333]
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, 0.0, 0.0], 4, negative_weight=0.0)]
    [1.5, 0.0, 0.0, 0.0]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from r2v_envs.errors import UnknownChoiceError


def success_reward(completions: Sequence[Any], success: Sequence[bool], error: Sequence[str | None] | None = None,
                   **kwargs: Any) -> list[float | None]:
    """1.0 for a won episode, 0.0 otherwise; None when the episode could not be run (``error``)."""
    errors = error if error is not None else [None] * len(success)
    return [None if e else float(bool(s)) for s, e in zip(success, errors)]


def success_return_reward(completions: Sequence[Any], success: Sequence[bool], episode_return: Sequence[float],
                          max_score: Sequence[float | None], error: Sequence[str | None] | None = None,
                          **kwargs: Any) -> list[float | None]:
    """Won (1.0) plus half the share of the game's points collected: partial progress counts, winning counts most."""
    errors = error if error is not None else [None] * len(success)
    out: list[float | None] = []
    for s, r, m, e in zip(success, episode_return, max_score, errors):
        share = float(r) / float(m) if m else 0.0
        out.append(None if e else float(bool(s)) + 0.5 * max(0.0, min(1.0, share)))
    return out


REWARD_FUNCS = {"success": success_reward, "success_return": success_return_reward}


def resolve_reward(name: str) -> Any:
    """A reward function by name (:data:`REWARD_FUNCS`) or import path ``"module:function"`` (a user's own, with
    TRL's signature and the episode columns above).

    Example:
        >>> resolve_reward("success") is success_reward, resolve_reward("r2v_train.rl.rewards:success_reward").__name__
        (True, 'success_reward')
    """
    if name in REWARD_FUNCS:
        return REWARD_FUNCS[name]
    module, sep, attr = name.partition(":")
    if not sep:
        raise UnknownChoiceError("reward", name, [*REWARD_FUNCS, "module:function"])
    import importlib

    return getattr(importlib.import_module(module), attr)


def group_advantages(rewards: Sequence[float], group_size: int, scale: str = "group",
                     negative_weight: float = 1.0) -> list[float]:
    """(reward - its group's mean) [/ (the group's std + 1e-4)] for consecutive groups of ``group_size``, as TRL's
    GRPO computes them (sample std; NaN rewards are left out of the group's statistics and get advantage 0).
    A group whose episodes all got the same reward teaches nothing: its advantages are 0. Negative advantages are
    multiplied by ``negative_weight`` (1: GRPO; 0: only the episodes that beat their group's mean are trained)."""
    if scale not in ("group", "none"):
        raise UnknownChoiceError("reward scaling", scale, ("group", "none"))
    r = np.asarray(rewards, dtype=np.float64)
    if len(r) % group_size:
        raise ValueError(f"{len(r)} rewards do not make groups of {group_size}")
    out = np.zeros_like(r)
    for g in range(0, len(r), group_size):
        block = r[g:g + group_size]
        ok = ~np.isnan(block)
        if ok.sum() == 0:
            continue
        mean = block[ok].mean()
        adv = block - mean
        if scale == "group":
            std = block[ok].std(ddof=1) if ok.sum() > 1 else 0.0
            adv = adv / (std + 1e-4)
        adv = np.where(adv < 0, adv * negative_weight, adv) + 0.0  # + 0.0: no -0.0 from a weight of 0
        out[g:g + group_size] = np.where(ok, adv, 0.0)
    return [float(a) for a in out]
