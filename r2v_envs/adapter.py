"""``perturb()``: r2v's perturbation wrappers on anyone's text env, not only the registered benchmarks.

The wrappers in :mod:`r2v_envs.perturbations` assume the text-env contract of :mod:`r2v_envs.core` (a ``str``
observation, ``info`` keys ``goal``/``admissible_actions``/``step``/``episode_index``, a perturbation seed z on
the unwrapped env). :class:`TextEnvAdapter` gives a user's Gymnasium env that contract by *being* a
:class:`~r2v_envs.core.TextEnv` whose three hooks call the user's env. So the seed story, the ``(z, episode,
step)`` noise streams, the task splits and every shared ``info`` key are the registered benchmarks' own code, not
a copy, and the runner, ``r2v eval`` and ``gym.make_vec`` see an env like any other.

What the adapter reads from the user's env (all declared, none guessed):

* the text: the observation itself when it is a ``str``; ``obs[obs_key]`` for a dict observation (the other
  fields go, unperturbed, to ``info["observation_fields"]``); the action is passed as ``str``, or as
  ``{action_key: text}``;
* ``info[goal_key]`` (the goal), ``info[admissible_key]`` (the admissible actions), ``info[expert_key]`` (an oracle
  action, for ``--agent expert``), ``info[won_key]`` (success). When the goal or the admissible list is missing
  at the first reset, the wrapper channel that needs it (injection into the goal; hiding admissible actions) is
  skipped (the wrappers already do nothing on an empty goal or list) and a :class:`ChannelSkippedWarning` says
  so, once per env; ``env.unwrapped.skipped_channels`` lists them. Without ``won_key`` in ``info``, an episode is
  won when it terminates on a positive reward (said once as well).
* tasks: ``tasks=N`` makes the tasks ``seed-0`` .. ``seed-<N-1>``, task ``seed-k`` being ``env.reset(seed=k)``
  (Gymnasium's own meaning of a reset seed); a list of names makes task ``t`` (at position k) be
  ``env.reset(seed=k, options={"task_id": t})``. Splits are the contract's 70/15/15 split over those ids.

Example:
    >>> import gymnasium as gym
    >>> class Echo(gym.Env):
    ...     observation_space = action_space = gym.spaces.Text(100)
    ...     def reset(self, *, seed=None, options=None):
    ...         super().reset(seed=seed)
    ...         return "You are in a room.\\nThere is a door.", {"goal": "Open the door."}
    ...     def step(self, action):
    ...         won = action == "open door"
    ...         return ("The door opens." if won else "Nothing happens."), float(won), won, False, {"won": won}
    >>> env = perturb(Echo(), perturbations={"distractor": {"prob": 1.0}}, seed=3)  # doctest: +ELLIPSIS
    >>> obs, info = env.reset()
    >>> info["goal"], [e["type"] for e in info["perturbations"]][:1], env.unwrapped.skipped_channels
    ('Open the door.', ['distractor'], {})
    >>> obs, reward, terminated, truncated, info = env.step("open door")
    >>> reward, terminated, info["won"]
    (1.0, True, True)
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import gymnasium as gym

from r2v_envs.core import DEFAULT, TextEnv
from r2v_envs.errors import PerturbationConfigError, UnknownChoiceError
from r2v_envs.perturbations.composite import apply_perturbations, parse_perturbations
from r2v_envs.perturbations.templates import INJECTION_DIRECTIVES
from r2v_envs.resolve import open_env

PROFILES = tuple(INJECTION_DIRECTIVES)  # "game", "code", "terminal": which templates the wrappers draw
DEFAULT_TASKS = 100


class ChannelSkippedWarning(UserWarning):
    """A perturbation channel is off because the user's env does not give what it needs (a goal, a list of
    admissible actions)."""


# wrapper kind -> (what it needs, the info key attribute that declares it, what is skipped without it)
_NEEDS = {"injection": ("goal", "goal_key", "injection into the goal"),
          "partial": ("admissible_actions", "admissible_key", "hiding admissible actions")}


def _resolve(env: Any) -> gym.Env:
    """A Gymnasium env from an instance, a zero-argument callable, or a spec string (``"module:callable"``, and
    anything else :func:`r2v_envs.resolve.open_env` takes: a registered id, ``module:Id``, a server URL)."""
    if isinstance(env, str):
        return open_env(env)
    if isinstance(env, gym.Env):
        return env
    if callable(env):
        made = env()
        if isinstance(made, gym.Env):
            return made
        raise PerturbationConfigError(f"{env!r} returned {type(made).__name__}, not a gymnasium.Env")
    raise PerturbationConfigError(f"perturb() needs a gymnasium.Env, got {type(env).__name__}")


class TextEnvAdapter(TextEnv):
    """A user's text env on the r2v contract (see the module doc); the user's env is ``self.inner``."""

    def __init__(self, env: Any, *, name: str | None = None, tasks: int | Sequence[str] = DEFAULT_TASKS,
                 obs_key: str | None = None, action_key: str | None = None, goal_key: str = "goal",
                 admissible_key: str = "admissible_actions", expert_key: str = "expert_action",
                 won_key: str = "won", profile: str = "game", wrapper_kinds: Sequence[str] = (),
                 seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None):
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        self.inner = _resolve(env)
        if profile not in PROFILES:
            raise UnknownChoiceError("perturbation profile", profile, PROFILES)
        self.perturbation_profile = profile  # read by the wrappers (instance value over the class default)
        spec_id = getattr(getattr(self.inner, "spec", None), "id", None)
        self.benchmark = name or spec_id or type(self.inner).__name__.lower()
        if isinstance(tasks, int):
            if tasks < 1:
                raise PerturbationConfigError(f"tasks must be >= 1, got {tasks}")
            self._tasks = {f"seed-{k}": (k, None) for k in range(tasks)}
        else:
            names = [str(t) for t in tasks]
            if not names or len(set(names)) != len(names):
                raise PerturbationConfigError("tasks must be a positive count or a list of distinct task names")
            self._tasks = {t: (k, t) for k, t in enumerate(names)}
        self.obs_key, self.action_key = obs_key, action_key
        self.goal_key, self.admissible_key, self.expert_key, self.won_key = goal_key, admissible_key, expert_key, won_key
        self.wrapper_kinds = tuple(wrapper_kinds)
        self.skipped_channels: dict[str, str] = {}
        self._said: set[str] = set()
        self._inner_truncated = False

    # ----------------------------------------------------------------------------------------- tasks
    def _task_ids(self) -> list[str]:
        return list(self._tasks)

    # ---------------------------------------------------------------------------------------- text I/O
    def _text(self, obs: Any, info: dict[str, Any]) -> str:
        if isinstance(obs, str):
            return obs
        if self.obs_key is not None and isinstance(obs, Mapping):
            if self.obs_key not in obs:
                raise UnknownChoiceError("observation field", self.obs_key, [str(k) for k in obs])
            text = obs[self.obs_key]
            if isinstance(text, str):
                info["observation_fields"] = {k: v for k, v in obs.items() if k != self.obs_key}
                return text
        raise PerturbationConfigError(
            f"{self.benchmark} returned a {type(obs).__name__} observation: perturb() needs text (a str, or a dict "
            "whose text field is declared with obs_key=...)")

    def _say_once(self, key: str, message: str) -> None:
        if key not in self._said:
            self._said.add(key)
            warnings.warn(message, ChannelSkippedWarning, stacklevel=4)

    def _check_channels(self, info: Mapping[str, Any]) -> None:
        """Name, once, each channel of the stack that this env cannot feed."""
        for kind in self.wrapper_kinds:
            if kind not in _NEEDS:
                continue
            channel, attr, what = _NEEDS[kind]
            key = getattr(self, attr)
            if not info.get(key):
                self.skipped_channels[channel] = f"{kind}: no info[{key!r}], {what} is skipped"
                self._say_once(channel, f"perturb({self.benchmark}): the env gives no info[{key!r}]; the {kind} "
                                        f"wrapper skips {what} (declare {attr}= to name the key)")

    def _info(self, raw: Mapping[str, Any], obs: Any, reward: float, terminated: bool) -> dict[str, Any]:
        info: dict[str, Any] = dict(raw)
        text = self._text(obs, info)
        info["goal"] = str(raw.get(self.goal_key) or "")
        actions = raw.get(self.admissible_key)
        info["admissible_actions"] = None if actions is None else [str(a) for a in actions]
        info["expert_action"] = raw.get(self.expert_key)
        if self.won_key in raw:
            won = bool(raw[self.won_key])
        else:
            won = bool(terminated and reward > 0)
            if terminated:
                self._say_once("won", f"perturb({self.benchmark}): no info[{self.won_key!r}]; an episode that "
                                      "terminates on a positive reward counts as won")
        info["won"] = won
        info.setdefault("lost", bool(terminated and not won))
        info.setdefault("score", float(won))
        info["channel"] = "observation"
        info["_text"] = text
        return info

    # ------------------------------------------------------------------------------------- episodes
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        k, name = self._tasks[task_id]
        self._inner_truncated = False
        obs, raw = self.inner.reset(seed=k, options=None if name is None else {"task_id": name})
        info = self._info(raw, obs, 0.0, False)
        self._check_channels(info)
        return info.pop("_text"), info

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        sent: Any = action if self.action_key is None else {self.action_key: action}
        obs, reward, terminated, truncated, raw = self.inner.step(sent)
        self._inner_truncated = bool(truncated)
        info = self._info(raw, obs, float(reward), bool(terminated))
        return info.pop("_text"), float(reward), bool(terminated), info

    def step(self, action: str):
        obs, reward, terminated, truncated, info = super().step(action)
        # the user's own time limit is a truncation, not a loss: keep Gymnasium's distinction
        return obs, reward, terminated, truncated or self._inner_truncated, info

    def close(self) -> None:
        self.inner.close()
        super().close()


def perturb(env: Any, perturbations: Any = "composite", seed: int | None = None, **declared: Any) -> gym.Env:
    """Wrap a user's text env (an instance, a zero-argument callable, or ``"module:callable"``) in r2v's
    perturbation wrappers. ``perturbations`` is any specification :func:`~r2v_envs.perturbations.parse_perturbations`
    reads (``None``: clean); ``seed`` is z (None: the next seeded reset sets it, as for the registered envs);
    ``declared`` are :class:`TextEnvAdapter`'s keywords (``obs_key``, ``goal_key``, ``tasks``, ...)."""
    spec = "composite" if perturbations == DEFAULT else perturbations
    kinds = [name for name, _ in parse_perturbations(spec)]  # a typed error before the env is built
    base = TextEnvAdapter(env, seed=seed, wrapper_kinds=kinds, **declared)
    return apply_perturbations(base, spec, seed=None if base.z_from_reset else base.perturbation_seed)


def make(env: Any = None, perturbations: Any = "composite", **kwargs: Any) -> gym.Env:
    """The entry point :func:`register_text_env` registers (``gym.make(id, seed=z, perturbations=...)``)."""
    if env is None:
        raise PerturbationConfigError("register_text_env(...) needs env='module:callable' (or a callable)")
    return perturb(env, perturbations=perturbations, **kwargs)


def register_text_env(env_id: str, env: str | Callable[[], gym.Env], max_episode_steps: int = 50,
                      **declared: Any) -> None:
    """Register ``env_id`` so that ``gym.make(env_id, seed=z, perturbations=...)``, ``gym.make_vec``, the runner
    and ``r2v eval`` build the user's env behind :func:`perturb`. Give ``env`` as ``"module:callable"`` and name
    the id ``"module:Id"`` on the command line, so worker processes import (and register) it themselves."""
    if env_id in gym.registry:
        return  # importing the user's module twice (a worker, a test) registers once
    gym.register(id=env_id, entry_point="r2v_envs.adapter:make", max_episode_steps=max_episode_steps,
                 kwargs={"env": env, **declared})


__all__ = ["PROFILES", "ChannelSkippedWarning", "TextEnvAdapter", "make", "perturb", "register_text_env"]
