"""R2V/ScienceWorld-v0: ScienceWorld's 30 task types of elementary-science experiments on the real engine (the
``scienceworld`` wheel, a Scala simulator in a JVM; one JVM per live env, see :mod:`r2v_envs.scienceworld.engine`).

* Tasks: ``"<task type>/<variation>"`` (``"boil/21"``); the env's train/valid/test splits are ScienceWorld's own
  train/dev/test variations (:mod:`r2v_envs.scienceworld.tasks`); ``task_types=[...]`` keeps some types only.
* Observation: the engine's text; the reset observation is the task description, then ``look around``.
* ``reward``: the engine's score delta (points of 100); ``won`` at score 100; ``lost`` when the engine ends the
  episode short of it (a wrong ``focus on``: score -100); ``score`` the engine's score, ``max_score`` 100.
* ``admissible_actions``: the engine's valid-action list, filtered (:mod:`r2v_envs.scienceworld.actions`).
* ``expert_action``: the next action of the engine's gold sequence while the agent has followed it (an action that
  is not the gold one but spends no game time, like ``look around`` or a typo, keeps the expert on its path; one
  that moves the world elsewhere leaves it with no plan: None from then on). The gold sequence is open-loop and
  ScienceWorld has no closed-loop expert to replan with.
* ``reset task`` (the engine's own restart) is answered with feedback, not run: it would restart the episode
  behind the env's step counter and expert.

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/ScienceWorld-v0", seed=0, split="test", perturbations=None)  # doctest: +SKIP
    >>> obs, info = env.reset(options={"task_id": "find-animal/225"})                     # doctest: +SKIP
    >>> info["goal"]                                                                      # doctest: +SKIP
    'Your task is to find a(n) animal. First, focus on the thing. Then, move it to the purple box in the workshop.'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from r2v_envs.core import TextEnv, build_env
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError
from r2v_envs.scienceworld.actions import (
    ADMISSIBLE_MODES,
    RESET_COMMANDS,
    clean_command,
    present_actions,
    same_command,
)
from r2v_envs.scienceworld.engine import acquire_engine, release_engine
from r2v_envs.scienceworld.gold import GoldCache
from r2v_envs.scienceworld.tasks import TASK_TYPES, check_task_types, parse_task_id, split_ids

SIMPLIFICATIONS = ("teleportAction", "selfWateringFlowerPots", "openContainers", "openDoors", "noElectricalAction",
                   "easy")
MAX_SCORE = 100.0
RESET_REFUSED = "r2v: `reset task` is disabled here (it would restart the episode behind the env); call reset()."
EPISODE_OVER = "The episode is over; call reset() to start another."


class ScienceWorldTextEnv(TextEnv):
    """ScienceWorld on its real engine, with its gold sequences as the expert and its official splits."""

    benchmark = "scienceworld"
    perturbation_profile = "game"
    default_perturbations = "composite"

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None,
                 task_types: Sequence[str] | None = None, simplifications: str = "", admissible: str = "filtered",
                 expert: bool = True, java: str | None = None, cache_dir: str | os.PathLike | None = None):
        """``simplifications``: ScienceWorld's comma-separated simplification string ("easy", "openDoors", ...);
        ``admissible``: "filtered" or "raw"; ``expert=False``: no gold sequence (``expert_action`` None; a
        variation's first reset skips generating it); ``java``: a java executable (default: found, see engine);
        ``cache_dir``: where gold sequences are cached (default ``$R2V_CACHE/scienceworld``, see gold.py)."""
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        self.task_types = check_task_types(task_types)
        for s in (s for s in simplifications.split(",") if s):
            if s not in SIMPLIFICATIONS:
                raise UnknownChoiceError("scienceworld simplification", s, SIMPLIFICATIONS)
        if admissible not in ADMISSIBLE_MODES:
            raise UnknownChoiceError("scienceworld admissible mode", admissible, ADMISSIBLE_MODES)
        self.simplifications, self.admissible, self.expert, self.java = simplifications, admissible, expert, java
        self._sw: Any = None
        self._gold_cache = GoldCache(cache_dir)
        self._checked_types: set[str] = set()
        self._task = ""
        self._gold: list[str] = []
        self._gold_index = 0
        self._on_path = True
        self._moves = 0
        self._score = 0.0
        self._won = self._lost = False
        self._admissible: list[str] = []

    # ----------------------------------------------------------------------------------------- tasks
    def _task_ids(self) -> list[str]:
        return split_ids("all", self.task_types)

    def _split_ids(self, split: str) -> list[str]:
        return split_ids(split, self.task_types)

    def engine(self) -> Any:
        """This env's ``scienceworld.ScienceWorldEnv``: on first use, a closed env's engine or a new JVM (~2 s)."""
        if self._sw is None:
            self._sw = acquire_engine(self.java)
        return self._sw

    def _check_type(self, task: str) -> None:
        if task not in self._checked_types:
            n = self.engine().get_max_variations(task)
            if n != TASK_TYPES[task][0]:
                raise BackendUnavailableError("scienceworld", f"this scienceworld release has {n} variations of "
                                              f"{task!r}, r2v's table {TASK_TYPES[task][0]}: update "
                                              "r2v_envs/scienceworld/tasks.py (or pip install scienceworld==1.2.3)")
            self._checked_types.add(task)

    # ------------------------------------------------------------------------------------- episodes
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        task, variation = parse_task_id(task_id)
        self._check_type(task)
        sw = self.engine()
        gold = self._gold_cache.get(task, variation, self.simplifications) if self.expert else []
        # load() leaves the world fresh (ScienceWorldEnv.reset() would load it again); the engine plays its gold
        # agent first only when the sequence is not cached yet
        sw.load(task, variation, self.simplifications, generateGoldPath=gold is None)
        if gold is None:
            gold = list(sw.get_gold_action_sequence())
            self._gold_cache.put(task, variation, self.simplifications, gold)
        self._gold = gold
        self._task, self._gold_index, self._on_path = task, 0, True
        self._won = self._lost = False
        obs, _, _, raw = sw.step("look around")  # what ScienceWorldEnv.reset() returns
        goal = raw["taskDesc"].replace("Task Description:", "", 1).strip()
        self._update(raw)
        return f"{goal}\n\n{obs}", self._info(goal=goal, task_type=task, variation=variation)

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._won or self._lost:
            return EPISODE_OVER, 0.0, True, self._info()
        command = clean_command(action)
        if command.lower() in RESET_COMMANDS:
            return RESET_REFUSED, 0.0, False, self._info()
        moves = self._moves
        obs, reward, completed, raw = self._sw.step(command)
        self._update(raw)
        if self._on_path and self._gold_index < len(self._gold) and same_command(command,
                                                                                 self._gold[self._gold_index]):
            self._gold_index += 1
        elif self._moves != moves:  # game time passed on an action off the gold path: the path no longer holds
            self._on_path = False
        self._won = bool(completed) and self._score >= MAX_SCORE
        self._lost = bool(completed) and not self._won
        return obs, float(reward), self._won or self._lost, self._info()

    def _update(self, raw: dict[str, Any]) -> None:
        self._moves = int(raw["moves"])
        self._score = float(raw["score"])
        self._admissible = present_actions(raw["valid"], self._task, self.admissible)

    def _info(self, **extra: Any) -> dict[str, Any]:
        done = self._won or self._lost
        plan = self._on_path and not done and self._gold_index < len(self._gold)
        return {"won": self._won, "lost": self._lost, "score": self._score, "max_score": MAX_SCORE,
                "admissible_actions": list(self._admissible),
                "expert_action": self._gold[self._gold_index] if plan else None, **extra}

    def close(self) -> None:
        if self._sw is not None:
            sw, self._sw = self._sw, None
            release_engine(sw, self.java)
        super().close()


def make(**kwargs: Any):
    """Entry point of ``R2V/ScienceWorld-v0`` (see :func:`r2v_envs.core.build_env`)."""
    return build_env(ScienceWorldTextEnv, **kwargs)


__all__ = ["MAX_SCORE", "SIMPLIFICATIONS", "ScienceWorldTextEnv", "make"]
