"""R2V/TextWorld-v0: locally generated TextWorld games behind the r2v text-env contract.

The game stays loaded between episodes of the same game (``textworld.start`` + ``reset``, 3-11 ms, instead
of ``textworld.gym``'s close-and-reload), and the planner behind ``expert_action`` (TextWorld's
``policy_commands``, the expensive part of a step) runs only when ``expert=True``.

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/TextWorld-v0", seed=7, suite="small", split="test", perturbations=None)
    >>> obs, info = env.reset()
    >>> info["task_id"] in env.unwrapped.task_ids(), info["expert_action"] is not None
    (True, True)
    >>> obs, reward, terminated, truncated, info = env.step("xyzzy")
    >>> obs.strip()
    "That's not a verb I recognise."
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from r2v_envs.core import TextEnv, build_env
from r2v_envs.errors import BackendUnavailableError
from r2v_envs.textworld.commands import sanitize_command
from r2v_envs.textworld.generate import ensure_game
from r2v_envs.textworld.suite import GameSpec, get_suite

GAME_OVER = "The game has ended. Call reset() to start a new episode."


@contextmanager
def _quiet_engine():
    """TextWorld plays .z8 games through Jericho and asks it for valid actions, which Jericho refuses with an
    UnsupportedGameWarning on every reset/step; TextWorld then computes the admissible commands itself. The
    warning says nothing about our game, so it is silenced (only that category, only around engine calls)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Unable to find valid actions in an unsupported game")
        yield


class TextWorldEnv(TextEnv):
    """A TextWorld game of a locally generated suite.

    Args:
        seed: the perturbation seed z (also the first task draw).
        split: ``train``/``valid``/``test`` (70/15/15 over the suite's games, seed 42) or ``all``.
        task_id / task_index: a fixed game instead of sampling one from the split.
        suite: ``default`` (264 games: 4 families x 3 levels x 22 seeds) or ``small`` (24, a subset).
        expert: compute ``expert_action`` with TextWorld's planner (about 2 ms per step extra).
        admissible: report ``admissible_actions``.
        cache_dir: where generated games live (default ``$R2V_CACHE/textworld``).
    """

    benchmark = "textworld"
    perturbation_profile = "game"
    default_perturbations = "composite"

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None, suite: str = "default",
                 expert: bool = True, admissible: bool = True, cache_dir: str | None = None):
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        self.suite_name = suite
        self.games: dict[str, GameSpec] = get_suite(suite)
        self.expert = expert
        self.admissible = admissible
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self._game = None  # the loaded textworld env
        self._game_path: Path | None = None
        self._state = None  # last textworld GameState
        self._done = False

    def _task_ids(self) -> list[str]:
        return list(self.games)

    def _load(self, path: Path):
        try:
            import textworld
        except ImportError as exc:
            raise BackendUnavailableError("textworld", "pip install 'r2v[textworld]'") from exc
        if self._game is not None:
            self._game.close()
        infos = textworld.EnvInfos(won=True, lost=True, score=True, max_score=True, objective=True,
                                   admissible_commands=self.admissible, policy_commands=self.expert)
        self._game, self._game_path = textworld.start(str(path), infos), path

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        path = ensure_game(self.games[task_id], self.cache_dir)
        if path != self._game_path:
            self._load(path)
        with _quiet_engine():
            self._state = self._game.reset()
        self._done = False
        return self._state.feedback, self._info(goal=self._state["objective"])

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._done:
            return GAME_OVER, 0.0, True, self._info()
        command, rejection = sanitize_command(action)
        if rejection is not None:
            return rejection, 0.0, False, self._info()
        before = self._state["score"]
        with _quiet_engine():
            self._state, _, done = self._game.step(command)
        self._done = bool(done)
        return self._state.feedback, float(self._state["score"] - before), self._done, self._info()

    def _info(self, **extra: Any) -> dict[str, Any]:
        s = self._state
        info: dict[str, Any] = {"won": bool(s["won"]), "lost": bool(s["lost"]), "score": float(s["score"]),
                                "max_score": float(s["max_score"]), **extra}
        if self.admissible:
            info["admissible_actions"] = list(s["admissible_commands"] or [])
        if self.expert and not self._done:
            policy = s["policy_commands"] or []
            info["expert_action"] = policy[0] if policy else None
        return info

    def close(self) -> None:
        if self._game is not None:
            self._game.close()
            self._game, self._game_path = None, None
        super().close()


def make(**kwargs: Any):
    """Entry point of ``R2V/TextWorld-v0`` (see :func:`r2v_envs.core.build_env`)."""
    return build_env(TextWorldEnv, **kwargs)
