"""R2V/ALFWorld-v0: ALFWorld's household tasks on its real TextWorld/PDDL engine (the paper's "TextWorld"
benchmark, Sec. 5.1, Appendix C).

Two sources of games, one engine (``.tw-pddl`` with alfworld's AlfredDemangler, AlfredInfos and handcoded
expert, see :mod:`r2v_envs.alfworld.engine`):

* ``source="alfworld"``: the official data from ``alfworld-download`` under ``$ALFWORLD_DATA/json_2.1.1``
  (``train``, ``valid_seen``, ``valid_unseen``). With ``splits="official"`` (default for this source) the env's
  train/valid/test splits are ALFWorld's train / seen / unseen; ``splits="r2v"`` takes the contract's 70/15/15
  task-level split over all games instead.
* ``source="offline"``: games generated here from the PDDL domain and grammar in the alfworld wheel
  (:mod:`r2v_envs.alfworld.generate`), ``n_games`` of them (default 60, ten per family), deterministic in
  ``suite_seed``, generated on first use and cached under ``$R2V_CACHE`` (default ``~/.cache/r2v``).

``source="auto"`` (default) uses the official data when ``$ALFWORLD_DATA/json_2.1.1`` exists, else offline.

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/ALFWorld-v0", seed=0, split="test", source="offline")  # doctest: +SKIP
    >>> obs, info = env.reset()                                                     # doctest: +SKIP
    >>> info["goal"]                                                                # doctest: +SKIP
    'Your task is to: put a clean tomato in microwave.'
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from r2v_envs.alfworld import generate
from r2v_envs.alfworld.engine import expert_action, keep_engine, take_engine
from r2v_envs.core import SPLITS, TextEnv, build_env
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError

SOURCES = ("auto", "offline", "alfworld")
SPLIT_MODES = ("official", "r2v")
# ALFWorld's data folders for the env's splits: train, seen (in distribution), unseen (out of distribution).
OFFICIAL_SPLITS = {"train": "train", "valid": "valid_seen", "test": "valid_unseen"}


def alfworld_data_dir(data_path: str | os.PathLike | None = None) -> Path | None:
    """``json_2.1.1`` of the official ALFWorld data, or None when it is not there."""
    if data_path is not None:
        return Path(data_path)
    root = os.environ.get("ALFWORLD_DATA")
    if root and (Path(root) / "json_2.1.1").is_dir():
        return Path(root) / "json_2.1.1"
    return None


def collect_official_games(data_dir: Path, families: Sequence[str]) -> dict[str, Path]:
    """Solvable games of the six families under ``data_dir`` (as ``AlfredTWEnv.collect_game_files``):
    task id = path of the trial folder relative to ``data_dir``."""
    import json

    games: dict[str, Path] = {}
    for traj in sorted(data_dir.rglob("traj_data.json")):
        folder = traj.parent
        game = folder / "game.tw-pddl"
        rel = folder.relative_to(data_dir).as_posix()
        if "movable" in rel or "Sliced" in rel or not game.exists():
            continue
        if json.loads(traj.read_text()).get("task_type") not in families:
            continue
        if not json.loads(game.read_text()).get("solvable", False):
            continue
        games[rel] = game
    return games


class ALFWorldEnv(TextEnv):
    """ALFWorld household tasks (six families) on alfworld's tw-pddl engine, with its handcoded expert."""

    benchmark = "alfworld"
    perturbation_profile = "game"
    default_perturbations = "composite"

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None, source: str = "auto",
                 n_games: int = generate.DEFAULT_N_GAMES, suite_seed: int = 0,
                 cache_dir: str | os.PathLike | None = None, data_path: str | os.PathLike | None = None,
                 splits: str | None = None, task_families: Sequence[str] | None = None, expert: bool = True):
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        if source not in SOURCES:
            raise UnknownChoiceError("alfworld source", source, SOURCES)
        self.families = tuple(task_families or generate.FAMILIES)
        for fam in self.families:
            if fam not in generate.FAMILIES:
                raise UnknownChoiceError("alfworld task family", fam, generate.FAMILIES)
        data_dir = alfworld_data_dir(data_path)
        if source == "alfworld" and (data_dir is None or not data_dir.is_dir()):
            raise BackendUnavailableError("alfworld data", "run `alfworld-download` and set $ALFWORLD_DATA, "
                                          "or pass data_path=.../json_2.1.1 (or use source='offline')")
        self.source = "alfworld" if source == "alfworld" or (source == "auto" and data_dir) else "offline"
        self.data_dir = data_dir if self.source == "alfworld" else None
        self.splits = splits or ("official" if self.source == "alfworld" else "r2v")
        if self.splits not in SPLIT_MODES:
            raise UnknownChoiceError("alfworld split mode", self.splits, SPLIT_MODES)
        if n_games < 1:
            raise ValueError(f"n_games must be positive, got {n_games}")
        self.n_games, self.suite_seed, self.cache_dir = int(n_games), int(suite_seed), cache_dir
        self.expert = expert
        self._official: dict[str, Path] | None = None
        self._engine: Any = None  # the loaded game played now; the others wait in the process's kept engines
        self._won = False

    # ----------------------------------------------------------------------------------------- tasks
    def _task_ids(self) -> list[str]:
        if self.source == "alfworld":
            if self._official is None:
                self._official = collect_official_games(self.data_dir, self.families)
            return list(self._official)
        return [t for t in generate.task_ids(self.n_games) if t.split("-", 1)[1] in self.families]

    def _split_ids(self, split: str) -> list[str]:
        if self.source == "alfworld" and self.splits == "official" and split != "all":
            folder = OFFICIAL_SPLITS[split] + "/"
            return sorted(t for t in self._task_ids() if t.startswith(folder))
        return super()._split_ids(split)

    def prepare(self, split: str | None = None, workers: int = 2) -> list[Path]:
        """Generate (in parallel worker processes, once) the offline games of ``split`` (default: this env's)."""
        if self.source != "offline":
            return [self._gamefile(t) for t in self._task_ids()]
        ids = self.task_ids(split)
        return list(generate.ensure_games(ids, self.suite_seed, self.cache_dir, workers=workers).values())

    def _gamefile(self, task_id: str) -> Path:
        if self.source == "alfworld":
            self._task_ids()
            return self._official[task_id]
        return generate.ensure_games([task_id], self.suite_seed, self.cache_dir, workers=1)[task_id]

    def _load(self, task_id: str) -> Any:
        """The loaded game of ``task_id``: the one played now, one this process kept (r2v_envs.alfworld.engine), or a
        new load (the PDDL translator, about 1.5 s)."""
        gamefile = str(self._gamefile(task_id))
        if self._engine is not None and self._engine.gamefile == gamefile:
            return self._engine
        self._release()
        return take_engine(gamefile, expert=self.expert)

    def _release(self) -> None:
        if self._engine is not None:
            engine, self._engine = self._engine, None
            keep_engine(engine)

    # ------------------------------------------------------------------------------------- episodes
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._engine = self._load(task_id)
        state = self._engine.reset()
        self._won = bool(state["won"])
        obs = state.feedback
        goal = next((ln.strip() for ln in obs.splitlines() if ln.startswith("Your task is to:")), "")
        return obs, self._info(state, goal=goal)

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._won:
            return "The task is already done.", 0.0, True, self._info(None)
        # The engine matches commands exactly; normalise case and spacing as ALFWorld agents do.
        state = self._engine.step(" ".join(action.lower().split()))
        newly_won = bool(state["won"]) and not self._won
        self._won = self._won or bool(state["won"])
        return state.feedback, float(newly_won), self._won, self._info(state)

    def _info(self, state: Any, **extra: Any) -> dict[str, Any]:
        info: dict[str, Any] = {"won": self._won, "lost": False, "score": float(self._won), **extra}
        if state is not None:
            info["admissible_actions"] = list(state["admissible_commands"])
            info["expert_action"] = None if self._won or not self.expert else expert_action(state)
        return info

    def close(self) -> None:
        self._release()  # its loaded game serves this process's next envs (r2v_envs.alfworld.engine)
        super().close()


def make(**kwargs: Any):
    """Entry point of ``R2V/ALFWorld-v0`` (see :func:`r2v_envs.core.build_env`)."""

    return build_env(ALFWorldEnv, **kwargs)


__all__ = ["ALFWorldEnv", "OFFICIAL_SPLITS", "SPLITS", "alfworld_data_dir", "collect_official_games", "make"]
