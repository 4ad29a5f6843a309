"""ALFWorld's own TextWorld/PDDL path: the ``.tw-pddl`` engine with AlfredDemangler, AlfredInfos and the
handcoded expert (``alfworld.agents.environment.alfred_tw_env``), kept loaded between resets.

The engine is not thread-safe: loading and resetting a game runs fast-downward's PDDL translator, which
rewrites ``sys.argv`` and swaps ``sys.stdout``. Every engine call therefore holds one process-wide lock;
generation runs in worker processes. alfworld's handcoded expert draws from the global ``random`` module: each
engine call runs under a private seed (from the game and the step), so expert actions are reproducible and
the caller's ``random`` stream is left as it was.

A closed env's loaded games serve the process's next envs (:func:`take_engine`, :func:`keep_engine`): a pipeline or an
evaluation makes fresh envs for every runner pass, and loading a game costs 1.5 s of PDDL translation and logic set-up
against 0.47 s for a reset of a loaded one (2-core AMD EPYC); the ALFWorld miniature pipeline
(r2v_train/configs/alfworld-miniature.yaml) loaded games 27 times, 40 s of its 179 s. A reset starts the game from
its initial state under the game's own seed, so a kept engine plays what a fresh one plays. An engine holds about
2 MB; up to 32 are kept per process (:data:`KEPT`, an :class:`r2v_envs.kept.KeptEngines`).
"""

from __future__ import annotations

import contextlib
import json
import random
import threading
import zlib
from collections.abc import Iterator
from typing import Any

from r2v_envs.errors import BackendUnavailableError
from r2v_envs.kept import KeptEngines

ENGINE_LOCK = threading.RLock()


@contextlib.contextmanager
def seeded_global_random(seed: int) -> Iterator[None]:
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _import_alfworld() -> tuple[Any, Any]:
    try:
        import textworld
        from alfworld.agents.environment import alfred_tw_env
    except ImportError as exc:
        raise BackendUnavailableError("alfworld", "pip install 'r2v[alfworld]' (compiles fast-downward and jericho "
                                      "from source: needs cmake and g++, about 2 min)") from exc
    return textworld, alfred_tw_env


class AlfredEngine:
    """One ALFWorld game, loaded once through alfworld's wrappers; ``reset`` and ``step`` return TextWorld
    game states with ``feedback``, ``won``, ``admissible_commands`` and ``extra.expert_plan``.

    ``expert=False`` skips the handcoded expert (and the facts it needs), for raw-speed play.
    """

    def __init__(self, gamefile: str, expert: bool = True):
        textworld, alfred = _import_alfworld()
        self.gamefile = gamefile
        self.expert = expert
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        wrappers: list[Any] = [alfred.AlfredDemangler(shuffle=False), alfred.AlfredInfos]
        if expert:
            wrappers.append(alfred.AlfredExpert(expert_type=alfred.AlfredExpertType.HANDCODED))
            infos.extras.append("expert_plan")
        # Seeded by the game's problem, not its path: the same game plays the same wherever it is cached.
        with open(gamefile) as f:
            self._seed = zlib.crc32(json.load(f)["pddl_problem"].encode())
        self._step = 0
        with ENGINE_LOCK:
            self._env = textworld.start(gamefile, infos, wrappers=wrappers)

    def reset(self) -> Any:
        self._step = 0
        with ENGINE_LOCK, seeded_global_random(self._seed):
            return self._env.reset()

    def step(self, command: str) -> Any:
        self._step += 1
        with ENGINE_LOCK, seeded_global_random(self._seed + self._step):
            try:
                state, _score, _done = self._env.step(command)
            except Exception:  # the handcoded expert gave up (timeout, no subgoal left) after the move was made
                state = self._env.state
                state["extra.expert_plan"] = []
        return state

    def close(self) -> None:
        with ENGINE_LOCK:
            self._env.close()


KEPT = KeptEngines(limit=32, close=AlfredEngine.close)
"""Loaded games of closed envs, by (game file, expert), up to 32 per process (the module docstring says why)."""


def take_engine(gamefile: str, expert: bool = True) -> AlfredEngine:
    """A loaded engine of ``gamefile`` that a closed env of this process left (:func:`keep_engine`), else a new one."""
    engine = KEPT.take((str(gamefile), bool(expert)))
    return engine if engine is not None else AlfredEngine(str(gamefile), expert=expert)


def keep_engine(engine: AlfredEngine) -> None:
    """Keep an engine an env no longer holds for the process's next envs (:data:`KEPT`; the oldest past 32 close)."""
    KEPT.keep((engine.gamefile, engine.expert), engine)


def expert_action(state: Any) -> str | None:
    """The handcoded expert's next command, or None when it has none (it answers "look" when lost)."""
    plan = state.get("extra.expert_plan") or []
    return plan[0] if plan else None


def play_expert(gamefile: str, max_steps: int = 120) -> list[str] | None:
    """Play ``gamefile`` with the handcoded expert; the winning command list, or None if it does not win."""
    engine = AlfredEngine(gamefile, expert=True)
    try:
        state = engine.reset()
        actions: list[str] = []
        for _ in range(max_steps):
            if state["won"]:
                return actions
            action = expert_action(state)
            if action is None:
                return None
            actions.append(action)
            state = engine.step(action)
        return actions if state["won"] else None
    except Exception:  # the expert raises on timeouts and dead ends: the game counts as unsolved
        return None
    finally:
        engine.close()
