"""R2V/BabyAI-v0: minigrid's BabyAI levels as a text env, with minigrid's BabyAI bot as the expert.

* Engine: the real minigrid ``BabyAI-<level>-v0`` envs (optional extra ``babyai``: ``pip install 'r2v[babyai]'``),
  one per level, made on first use. The agent's view is rendered as text by :mod:`r2v_envs.babyai.text`.
* Actions: six text commands, minigrid's actions in order: ``turn left``, ``turn right``, ``go forward``,
  ``pick up``, ``drop``, ``toggle`` (case, spacing and a few aliases forgiven; :func:`~r2v_envs.babyai.text.normalise`).
  Anything else gets an in-game answer and leaves the level as it was (the step still counts).
* Expert: ``minigrid.utils.baby_ai_bot.BabyAIBot``, replanned after every engine step with the action actually
  taken (the bot is built for DAgger-style advice), so ``expert_action`` is right even after the agent strays.
* Tasks: ``<level>-<seed>`` (e.g. ``GoToLocal-0007``): level ``BabyAI-<level>-v0`` reset with that seed.
  The 70/15/15 split is taken per level over its ``seeds_per_level`` seeds, so every split holds every level; a
  split's tasks are listed level by level in turn (``--tasks N`` of ``r2v eval`` covers all levels).
* Ends: success terminates (``won``, reward 1); a BabyAI failure (e.g. putting the wrong object down in a
  PutNext level) terminates as ``lost``; the level's own step budget (``max_steps`` of minigrid) truncates, as
  the registered cap does.

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/BabyAI-v0", seed=0, split="test", perturbations=None)   # doctest: +SKIP
    >>> obs, info = env.reset()                                                       # doctest: +SKIP
    >>> print(obs.splitlines()[0])                                                    # doctest: +SKIP
    Mission: go to the red ball
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Sequence
from typing import Any

from r2v_envs.babyai import text
from r2v_envs.core import SPLITS, TextEnv, build_env, split_tasks
from r2v_envs.errors import BackendUnavailableError, PerturbationConfigError, UnknownChoiceError

# The default levels: one per BabyAI skill (navigation with distractors, local goto, pick up by location, open a
# door by location, put next to, unlock with a key, a sequence over rooms); short enough for the 64-step cap.
LEVELS: tuple[str, ...] = ("GoToRedBallGrey", "GoToLocal", "PickupLoc", "OpenDoorLoc", "PutNextLocal",
                           "UnlockLocal", "GoToSeqS5R2")
SEEDS_PER_LEVEL = 60


def _import_minigrid() -> None:
    os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")
    try:
        import minigrid  # noqa: F401 - registers the BabyAI-* ids
    except ImportError as e:
        raise BackendUnavailableError("minigrid", "pip install 'r2v[babyai]' (minigrid from PyPI)") from e


def babyai_levels() -> list[str]:
    """Every BabyAI level minigrid registers (``BabyAI-<level>-v0`` -> ``<level>``)."""
    import gymnasium as gym

    _import_minigrid()
    return sorted(i[len("BabyAI-"):-len("-v0")] for i in gym.registry if i.startswith("BabyAI-") and i.endswith("-v0"))


class BabyAIEnv(TextEnv):
    """BabyAI levels on minigrid, as text, with the BabyAI bot's expert action."""

    benchmark = "babyai"
    perturbation_profile = "game"
    default_perturbations = "composite"

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None,
                 levels: Sequence[str] = LEVELS, seeds_per_level: int = SEEDS_PER_LEVEL, expert: bool = True):
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        _import_minigrid()
        known = babyai_levels()
        self.levels = tuple(levels)
        if not self.levels:
            raise PerturbationConfigError("levels must name at least one BabyAI level")
        for level in self.levels:
            if level not in known:
                raise UnknownChoiceError("BabyAI level", level, known)
        if int(seeds_per_level) < 1:
            raise ValueError(f"seeds_per_level must be positive, got {seeds_per_level}")
        self.seeds_per_level, self.expert = int(seeds_per_level), bool(expert)
        self._games: dict[str, Any] = {}
        self._game: Any = None
        self._image: Any = None  # minigrid's encoding of the agent's current view (see text.describe_view)
        self._bot: Any = None
        self._expert_action: str | None = None
        self._won = self._over = self._truncated = False

    # ----------------------------------------------------------------------------------------- tasks
    def _task_ids(self) -> list[str]:
        return [f"{level}-{k:04d}" for level in self.levels for k in range(self.seeds_per_level)]

    def _split_ids(self, split: str) -> list[str]:
        if split == "all":
            return sorted(self._task_ids())
        per_level = [split_tasks([f"{level}-{k:04d}" for k in range(self.seeds_per_level)])[split]
                     for level in self.levels]
        # level by level in turn, so the first N tasks of a split cover every level
        return [ids[i] for i in range(max(map(len, per_level), default=0)) for ids in per_level if i < len(ids)]

    # ------------------------------------------------------------------------------------- episodes
    def _level_env(self, level: str) -> Any:
        if level not in self._games:
            import gymnasium as gym

            self._games[level] = gym.make(f"BabyAI-{level}-v0").unwrapped  # no wrappers: we own the step cap
        return self._games[level]

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        level, seed = task_id.rsplit("-", 1)
        self._game = self._level_env(level)
        with contextlib.redirect_stdout(io.StringIO()):  # minigrid prints its level-sampling retries
            observation, _ = self._game.reset(seed=int(seed))
        self._image = observation["image"]
        self._won = self._over = self._truncated = False
        self._bot = None
        if self.expert:
            from minigrid.utils.baby_ai_bot import BabyAIBot

            self._bot = BabyAIBot(self._game)
        self._expert_action = self._replan(None)
        mission = self._game.mission
        obs = "\n".join([f"Mission: {mission}", *text.describe_view(self._game, self._image)])
        return obs, self._info(goal=mission, level=level)

    def _replan(self, taken: int | None) -> str | None:
        """The bot's next action; None once it cannot plan (it raises on states it was not built for)."""
        if self._bot is None or self._over:
            return None
        try:
            action = int(self._bot.replan(taken))
        except Exception:  # noqa: BLE001 - e.g. DisappearedBoxError after a box was opened: no expert from here
            self._bot = None
            return None
        return text.COMMANDS[action] if action < len(text.COMMANDS) else None

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._over:
            return "The level is over.", 0.0, True, self._info()
        command = text.normalise(action)
        if command is None:
            shown = action if len(action) <= 40 else action[:40] + "..."
            lines = [f"Unknown command {shown!r}. Commands: {', '.join(text.COMMANDS)}.",
                     *text.describe_view(self._game, self._image)]
            return "\n".join(lines), 0.0, False, self._info()
        index = text.COMMANDS.index(command)
        before = text.snapshot(self._game)
        observation, reward, terminated, truncated, _ = self._game.step(index)
        self._image = observation["image"]
        said = text.feedback(command, before, text.snapshot(self._game))
        self._won = bool(terminated and reward > 0)
        self._over = bool(terminated or truncated)
        self._truncated = bool(truncated and not terminated)
        lines = [said, *text.describe_view(self._game, self._image)]
        if self._won:
            lines.append("Mission complete!")
        elif terminated:
            lines.append("Mission failed.")
        elif truncated:
            lines.append("Out of time: the level's step budget is spent.")
        self._expert_action = self._replan(index)
        return "\n".join(lines), float(self._won), bool(terminated), self._info(level_reward=float(reward))

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        # the level's own step budget is a truncation (as the registered cap is), not a loss
        return obs, reward, terminated, truncated or self._truncated, info

    def _info(self, **extra: Any) -> dict[str, Any]:
        lost = self._over and not self._won and not self._truncated
        return {"admissible_actions": list(text.COMMANDS), "expert_action": self._expert_action,
                "won": self._won, "lost": lost, "score": float(self._won), **extra}

    def close(self) -> None:
        for game in self._games.values():
            game.close()
        self._games.clear()
        super().close()


def make(**kwargs: Any):
    """Entry point of ``R2V/BabyAI-v0`` (see :func:`r2v_envs.core.build_env`)."""

    return build_env(BabyAIEnv, **kwargs)


__all__ = ["LEVELS", "SEEDS_PER_LEVEL", "SPLITS", "BabyAIEnv", "babyai_levels", "make"]
