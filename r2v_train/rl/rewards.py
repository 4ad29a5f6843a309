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
    >>> [round(a, 3) for a in group_advantages([1.0, 0.0, 0.0, 0.0], 4, positive_weight=0.0)]
    [0.0, -0.5, -0.5, -0.5]
    >>> paths = [["open door", "go east"], ["open door", "go west"], ["look", "go east"], ["open door", "go east"]]
    >>> [[round(a, 3) for a in ep] for ep in tree_advantages(paths, [1.0, 0.0, 0.0, 1.0], 4, scale="none")]
    [[0.167, 0.333], [0.167, -0.667], [-0.5, 0.0], [0.167, 0.333]]
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
                     negative_weight: float = 1.0, positive_weight: float = 1.0) -> list[float]:
    """(reward - its group's mean) [/ (the group's std + 1e-4)] for consecutive groups of ``group_size``, as TRL's
    GRPO computes them (sample std; NaN rewards are left out of the group's statistics and get advantage 0).
    A group whose episodes all got the same reward teaches nothing: its advantages are 0. Negative advantages are
    multiplied by ``negative_weight`` (1: GRPO; 0: only the episodes that beat their group's mean are trained) and
    positive ones by ``positive_weight`` (0: only the episodes below their group's mean are trained, pushed down:
    negative-sample reinforcement, which keeps the policy's spread)."""
    _check_groups(len(rewards), group_size, scale)
    r = np.asarray(rewards, dtype=np.float64)
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
        out[g:g + group_size] = np.where(ok, _weigh(adv, negative_weight, positive_weight), 0.0)
    return [float(a) for a in out]


def tree_advantages(paths: Sequence[Sequence[str]], rewards: Sequence[float], group_size: int, scale: str = "group",
                    negative_weight: float = 1.0, positive_weight: float = 1.0) -> list[list[float]]:
    """Per-step advantages from the tree a group's episodes make: step t of an episode is credited with
    V(its first t + 1 actions) - V(its first t actions), V(prefix) being the mean reward of the group's episodes
    that began with that prefix.

    A group's episodes start from the same state (same task, same perturbation seed z) and the env is a function
    of the actions played, so episodes that share a prefix of actions passed through the same states: the prefixes
    are the nodes of a search tree. Only a step where the group's episodes took different actions gets credit (the
    difference between the mean reward of the branch it took and of the node it left); a step every episode
    through the node also took, or one an episode took alone after it parted from the others, gets 0. GRPO's
    episode credit instead gives every step of a won episode the same push, the needless and the harmful ones
    included. The credits of a node's episodes sum to 0. ``scale`` divides by the group's reward std as
    :func:`group_advantages` does; episodes with a NaN reward get 0 and count nowhere; the weights scale the
    negative and the positive credits."""
    if len(paths) != len(rewards):
        raise ValueError(f"{len(paths)} episodes but {len(rewards)} rewards")
    _check_groups(len(rewards), group_size, scale)
    out: list[list[float]] = [[0.0] * len(p) for p in paths]
    for g in range(0, len(rewards), group_size):
        members = [i for i in range(g, g + group_size) if not np.isnan(rewards[i])]
        if len(members) < 2:
            continue
        totals: dict[tuple[str, ...], list[float]] = {}
        for i in members:
            for t in range(len(paths[i]) + 1):
                acc = totals.setdefault(tuple(paths[i][:t]), [0.0, 0.0])
                acc[0] += float(rewards[i])
                acc[1] += 1.0
        std = float(np.std([rewards[i] for i in members], ddof=1)) if scale == "group" else 0.0
        div = std + 1e-4 if scale == "group" else 1.0
        for i in members:
            value = np.array([total / n for total, n in (totals[tuple(paths[i][:t])]
                                                         for t in range(len(paths[i]) + 1))])
            credit = np.diff(value) / div
            credit[np.abs(credit) < 1e-9] = 0.0  # a node's sums in floating point: a step no branch parts at is 0
            out[i] = [float(a) for a in _weigh(credit, negative_weight, positive_weight)]
    return out


def _check_groups(n: int, group_size: int, scale: str) -> None:
    if scale not in ("group", "none"):
        raise UnknownChoiceError("reward scaling", scale, ("group", "none"))
    if n % group_size:
        raise ValueError(f"{n} rewards do not make groups of {group_size}")


def _weigh(adv: np.ndarray, negative_weight: float, positive_weight: float) -> np.ndarray:
    """Negative advantages times ``negative_weight``, positive ones times ``positive_weight``."""
    return np.where(adv < 0, adv * negative_weight, adv * positive_weight) + 0.0  # + 0.0: no -0.0 from a 0
