"""The text-env contract every r2v benchmark follows.

Observations and actions are ``str``. Every benchmark env subclasses :class:`TextEnv` and implements three
hooks (``_task_ids``, ``_reset_task``, ``_step_task``); the base class owns what must be identical across
benchmarks: the seed story, task-level splits, task selection and the shared ``info`` keys.

Seed story:
    * ``seed=z`` at construction is the *perturbation seed*; it also seeds task sampling on the first reset.
    * Without ``seed=`` at construction, ``reset(seed=s)`` sets z = s (z at construction always wins), so the
      same reset seeds give the same perturbed observations in any process or vector mode; an env that is
      never reset with a seed draws a random z.
    * ``reset(seed=s)`` re-seeds task sampling and restarts the episode counter at 0 (as a fresh env would);
      ``options={"episode_index": k}`` sets the counter explicitly.
    * Perturbation wrappers draw from ``(z, episode_index, step)`` alone, never from call order or timing.

Shared ``info`` keys (:data:`INFO_KEYS`): ``goal``, ``task_id``, ``admissible_actions`` (list or None),
``expert_action`` (the oracle's next action or None), ``won``, ``score``, ``step``, ``perturbation_seed``,
``perturbations`` (events applied at this step). Extra keys: ``benchmark``, ``split``, ``episode_index``,
``channel`` (the named text channel the observation belongs to) and ``lost``.

Example:
    >>> from r2v_envs.core import split_tasks
    >>> s = split_tasks([f"t{i}" for i in range(20)])
    >>> [len(s[k]) for k in ("train", "valid", "test")]
    [14, 3, 3]
    >>> split_tasks([f"t{i}" for i in range(20)]) == s   # stable
    True
"""

from __future__ import annotations

import os
import re
import secrets
import string
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from r2v_envs.errors import InvalidActionError, UnknownChoiceError
from r2v_envs.perturbations import CHANNELS, apply_perturbations  # noqa: F401 - CHANNELS is part of the contract

SPLITS: tuple[str, ...] = ("train", "valid", "test")
SPLIT_SEED = 42  # the paper's task-level split seed (Sec. 5.1, Appendix D)
SPLIT_FRACTIONS = (0.70, 0.15, 0.15)
INFO_KEYS: tuple[str, ...] = (
    "goal", "task_id", "admissible_actions", "expert_action", "won", "score", "step",
    "perturbation_seed", "perturbations",
)
DEFAULT = "default"  # sentinel: the benchmark's paper setting for `perturbations`

MAX_TEXT_CHARS = 1_000_000
_FORBIDDEN_CHARS = re.compile("[\x00\ud800-\udfff]")


class TextSpace(spaces.Text):
    """Any ``str`` up to ``max_length`` characters without NUL or lone surrogates.

    Gymnasium's ``Text`` checks membership against an explicit charset; a full-Unicode charset costs ~12 MB
    and 0.2 s per space, so membership is checked with a regex instead. Sampling draws printable ASCII.

    Example:
        >>> sp = TextSpace(max_length=10)
        >>> sp.contains("héllo\\n"), sp.contains("a\\x00b"), sp.contains("x" * 11), sp.contains(b"x")
        (True, False, False, False)
    """

    def __init__(self, max_length: int = MAX_TEXT_CHARS, *, seed: int | None = None):
        super().__init__(max_length, min_length=0, charset=string.printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length and not _FORBIDDEN_CHARS.search(x)

    def __repr__(self) -> str:
        return f"TextSpace(max_length={self.max_length})"


def split_tasks(task_ids: Sequence[str], seed: int = SPLIT_SEED,
                fractions: tuple[float, float, float] = SPLIT_FRACTIONS) -> dict[str, list[str]]:
    """Task-level train/valid/test split, independent of input order (ids are sorted before shuffling)."""
    ids = sorted(set(task_ids))
    if len(ids) != len(task_ids):
        raise ValueError("task ids must be unique")
    order = np.random.default_rng(seed).permutation(len(ids))
    n_train = int(round(fractions[0] * len(ids)))
    n_valid = int(round(fractions[1] * len(ids)))
    shuffled = [ids[i] for i in order]
    return {"train": shuffled[:n_train], "valid": shuffled[n_train:n_train + n_valid],
            "test": shuffled[n_train + n_valid:]}


def cache_dir(kind: str) -> Path:
    """Where generated benchmark data of ``kind`` is cached: ``$R2V_CACHE/<kind>`` (default ``~/.cache/r2v``).

    Example:
        >>> import os; from unittest import mock
        >>> with mock.patch.dict(os.environ, {"R2V_CACHE": "/tmp/r2v-doc"}):   # restores the caller's cache
        ...     str(cache_dir("textworld"))
        '/tmp/r2v-doc/textworld'
    """
    root = os.environ.get("R2V_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "r2v")
    return Path(root) / kind


def check_split(split: str) -> str:
    if split not in SPLITS and split != "all":
        raise UnknownChoiceError("split", split, [*SPLITS, "all"])
    return split


class TextEnv(gym.Env[str, str]):
    """Base class of the r2v benchmark environments (the text-env contract).

    Subclasses set ``benchmark`` and ``perturbation_profile`` ("game", "code" or "terminal", which picks the
    distractor/injection templates) and implement:

    * ``_task_ids() -> list[str]``: every task of the benchmark (the split is taken over these);
    * ``_reset_task(task_id) -> (obs, info)``: start an episode; ``info`` holds at least ``goal``;
    * ``_step_task(action) -> (obs, reward, terminated, info)``.

    ``info`` returned by the hooks may set ``admissible_actions``, ``expert_action``, ``won``, ``lost``,
    ``score`` and ``channel``; the base class fills every shared key and the bookkeeping.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["ansi"]}
    benchmark: ClassVar[str] = "text"
    perturbation_profile: ClassVar[str] = "game"
    # Intensity overrides are not needed for the default: each wrapper carries the paper-like defaults.
    default_perturbations: ClassVar[Any] = "composite"

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None):
        # Gymnasium's convention is that reset(seed=s) makes an episode reproducible: with no z at construction,
        # a seeded reset derives z (the vector API only ever seeds through reset).
        self.z_from_reset = seed is None
        self.perturbation_seed = int(seed) if seed is not None else secrets.randbits(31)
        self.split = check_split(split)
        self._fixed_task_id = task_id
        self._fixed_task_index = task_index
        self.render_mode = render_mode
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self._split_cache: dict[str, list[str]] = {}
        self._episode_index = -1
        self._step_count = 0
        self._task_id: str | None = None
        self._task_split = self.split
        self._goal = ""
        self._last_obs = ""

    # ----------------------------------------------------------------------------------------- tasks
    def _task_ids(self) -> list[str]:
        raise NotImplementedError

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        raise NotImplementedError

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        raise NotImplementedError

    def task_ids(self, split: str | None = None) -> list[str]:
        """The tasks of ``split`` (default: this env's split; ``"all"``: every task, sorted), cached.

        The split is task-level over all of the benchmark's tasks (:func:`split_tasks`); a benchmark with
        splits of its own overrides :meth:`_split_ids`.

        Example:
            >>> import gymnasium as gym, r2v_envs
            >>> env = gym.make("R2V/Scripted-v0", seed=0)
            >>> sorted(env.unwrapped.task_ids("all")) == sorted(env.unwrapped.task_ids("train")
            ...     + env.unwrapped.task_ids("valid") + env.unwrapped.task_ids("test"))
            True
        """
        split = check_split(self.split if split is None else split)
        if split not in self._split_cache:
            self._split_cache[split] = self._split_ids(split)
        return self._split_cache[split]

    def task_split(self, task_id: str) -> str:
        """The split that holds ``task_id`` (``info["split"]``): a test task picked by id on an env made with
        the default split is still a test task in every logged row."""
        for split in dict.fromkeys([*([self.split] if self.split != "all" else []), *SPLITS]):
            if task_id in self.task_ids(split):
                return split
        return self.split

    def _split_ids(self, split: str) -> list[str]:
        ids = self._task_ids()
        return sorted(ids) if split == "all" else split_tasks(ids)[split]

    def _select_task(self, options: Mapping[str, Any]) -> str:
        task_id = options.get("task_id", self._fixed_task_id)
        index = options.get("task_index", self._fixed_task_index)
        if task_id is not None:
            all_ids = self._task_ids()
            if task_id not in all_ids:
                raise UnknownChoiceError(f"{self.benchmark} task", task_id, all_ids)
            return task_id
        ids = self.task_ids()
        if not ids:
            raise ValueError(f"the {self.split!r} split of {self.benchmark} has no tasks")
        if index is not None:
            if not -len(ids) <= int(index) < len(ids):
                raise IndexError(f"task_index {index} out of range for {len(ids)} {self.split} tasks")
            return ids[int(index)]
        return ids[int(self.np_random.integers(len(ids)))]

    # ------------------------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        if seed is None and self._np_random is None:
            seed = self.perturbation_seed  # z also fixes the first task draw: gym.make(id, seed=z) is reproducible
        super().reset(seed=seed)
        if seed is not None and self.z_from_reset:
            self.perturbation_seed = int(seed)
        options = dict(options or {})
        # Episodes are counted from the last seeded reset, so reset(seed=s) replays the same noise stream.
        default_index = 0 if seed is not None else self._episode_index + 1
        self._episode_index = int(options.get("episode_index", default_index))
        self._step_count = 0
        self._task_id = self._select_task(options)
        self._task_split = self.task_split(self._task_id)
        obs, info = self._reset_task(self._task_id)
        self._goal = info.get("goal", "")
        self._last_obs = obs
        return obs, self._complete_info(info, reward=0.0)

    def step(self, action: str):
        if self._task_id is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        if not isinstance(action, str):  # a programming error, not agent text: bad text gets in-game feedback
            raise InvalidActionError(f"{self.benchmark} actions are str, got {type(action).__name__}")
        self._step_count += 1
        obs, reward, terminated, info = self._step_task(action)
        self._last_obs = obs
        return obs, float(reward), bool(terminated), False, self._complete_info(info, reward=reward)

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return self._last_obs
        return None

    def _complete_info(self, info: dict[str, Any], reward: float) -> dict[str, Any]:
        info.setdefault("goal", self._goal)
        info.setdefault("admissible_actions", None)
        info.setdefault("expert_action", None)
        info.setdefault("won", False)
        info.setdefault("lost", False)
        info.setdefault("score", 0.0)
        info.setdefault("channel", "observation")
        info.update(task_id=self._task_id, step=self._step_count, perturbation_seed=self.perturbation_seed,
                    perturbations=[], benchmark=self.benchmark, split=self._task_split,
                    episode_index=self._episode_index)
        return info


def build_env(env_cls: Callable[..., TextEnv], *, perturbations: Any = DEFAULT, **kwargs: Any) -> gym.Env:
    """Construct a benchmark env and stack its perturbation wrappers (the registered entry points call this).

    ``perturbations`` is ``None`` (clean), ``"composite"``, a list of names, a mapping name -> parameters, or
    ``"default"`` (the benchmark's paper setting). The wrappers record their arguments, so the whole stack
    shows in ``env.spec``.
    """
    env = env_cls(**kwargs)
    spec = env.default_perturbations if perturbations == DEFAULT else perturbations
    # Without z at make the wrappers follow the env's z, which the next seeded reset sets.
    return apply_perturbations(env, spec, seed=None if env.z_from_reset else env.perturbation_seed)
