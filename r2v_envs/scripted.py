"""``R2V/Scripted-v0``: a tiny scripted text env for unit tests of wrappers, policies, learners and the runner (no
game engine needed).

Task ``scripted-<i>`` is a corridor of ``2 + i % 4`` rooms; a coin lies in the last room. The agent wins by
walking east to it and taking it. Walking west from the first room or typing ``quit`` loses. Observations
are multi-line like a text game's, so line-level perturbations have something to act on.

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/Scripted-v0", seed=0, perturbations=None, task_id="scripted-0")
    >>> obs, info = env.reset()
    >>> print(obs.splitlines()[2])
    -= Room 0 =-
    >>> while not info["won"]:
    ...     obs, reward, terminated, truncated, info = env.step(info["expert_action"])
    >>> reward, terminated, info["score"]
    (1.0, True, 1.0)
"""

from __future__ import annotations

from typing import Any

from r2v_envs.core import TextEnv, build_env

N_TASKS = 40
ITEMS = ("coin", "key", "gem", "map")


class ScriptedTextEnv(TextEnv):
    benchmark = "scripted"
    perturbation_profile = "game"

    def _task_ids(self) -> list[str]:
        return [f"scripted-{i}" for i in range(N_TASKS)]

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        i = int(task_id.rsplit("-", 1)[1])
        self._n_rooms, self._item = 2 + i % 4, ITEMS[i % len(ITEMS)]
        self._room, self._has_item, self._done = 0, False, False
        goal = f"Find the {self._item} at the east end of the corridor and take it."
        return f"{goal}\n\n{self._describe()}", self._info(goal=goal)

    def _describe(self) -> str:
        lines = [f"-= Room {self._room} =-", f"You are in room {self._room} of a long corridor."]
        if self._room < self._n_rooms - 1:
            lines.append("There is an exit to the east.")
        lines.append("There is an exit to the west.")
        if self._room == self._n_rooms - 1 and not self._has_item:
            lines.append(f"You see a {self._item} on the floor.")
        return "\n".join(lines)

    def _expert(self) -> str | None:
        if self._done:
            return None
        return "go east" if self._room < self._n_rooms - 1 else f"take {self._item}"

    def _info(self, **extra: Any) -> dict[str, Any]:
        admissible = ["look", "inventory", "go west"]
        if self._room < self._n_rooms - 1:
            admissible.append("go east")
        if self._room == self._n_rooms - 1 and not self._has_item:
            admissible.append(f"take {self._item}")
        return {"admissible_actions": sorted(admissible), "expert_action": self._expert(),
                "won": self._has_item, "lost": self._done and not self._has_item,
                "score": float(self._has_item), **extra}

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._done:
            return "The game is over.", 0.0, True, self._info()
        cmd = " ".join(action.lower().split())
        reward = 0.0
        if cmd == "go east" and self._room < self._n_rooms - 1:
            self._room += 1
            obs = self._describe()
        elif cmd == "go west" and self._room > 0:
            self._room -= 1
            obs = self._describe()
        elif cmd in ("go west", "quit"):
            self._done = True
            obs = "You fall into a pit. *** You lost! ***"
        elif cmd == f"take {self._item}" and self._room == self._n_rooms - 1 and not self._has_item:
            self._has_item, self._done, reward = True, True, 1.0
            obs = f"You take the {self._item}.\n*** The End ***"
        elif cmd == "look":
            obs = self._describe()
        elif cmd == "inventory":
            obs = f"You are carrying: {'a ' + self._item if self._has_item else 'nothing'}."
        else:
            obs = "That's not a verb I recognise."
        return obs, reward, self._done, self._info()


def make(**kwargs: Any):
    """Entry point of ``R2V/Scripted-v0`` (see :func:`r2v_envs.core.build_env`)."""

    return build_env(ScriptedTextEnv, **kwargs)
