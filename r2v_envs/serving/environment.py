"""One served env session: an r2v Gymnasium env behind OpenEnv's ``Environment`` interface.

OpenEnv's server (``create_fastapi_app``) calls the factory once per WebSocket session and runs that session's calls
on a thread of its own. Each session owns one env built exactly as ``gym.make(env_id, **env_kwargs)`` builds it, in
one of the server's env worker processes (:mod:`r2v_envs.serving.pool`: engines are not thread-safe), so the same
seeds, perturbations and task selection give the same bytes as in process. Every failure becomes a
:class:`~r2v_envs.serving.errors.ServedError` (``"[Kind] message"``), which OpenEnv turns into a typed error answer on
that session only.

The :class:`SessionBook` counts the live envs of one app (``GET /r2v/sessions``): a dropped client or a reaped
session shows up there as an env freed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Mapping
from typing import Any

import r2v_envs
from r2v_envs.serving.errors import BadRequestError, EpisodeOverError, ResetNeededError, ServedError, SessionClosedError
from r2v_envs.serving.openenv_api import Environment, EnvironmentMetadata
from r2v_envs.serving.pool import EnvWorkerPool
from r2v_envs.serving.wire import TextAction, TextEnvState, TextObservation, jsonable
from r2v_envs.visibility import visible_info

# info keys served besides the agent-visible ones: the perturbation events of the step and the episode's
# bookkeeping (nothing an agent could not know: it chose the seed and sees the text).
SERVED_EXTRA_INFO = ("perturbations", "perturbation_seed", "episode_index", "split")
RESET_OPTIONS = ("task_id", "task_index", "episode_index")


def served_info(info: Mapping[str, Any], oracle: bool) -> dict[str, Any]:
    """The part of an env ``info`` a client gets, as JSON types: every key with ``oracle``, else the agent-visible
    keys and :data:`SERVED_EXTRA_INFO` (the rule of ``r2v eval``: only the oracle agent sees oracle keys).

    Example:
        >>> served_info({"goal": "g", "won": True, "perturbations": [], "admissible_actions": ("a",)}, oracle=False)
        {'goal': 'g', 'admissible_actions': ['a'], 'perturbations': []}
    """
    return jsonable(dict(info) if oracle else visible_info(info, extra=SERVED_EXTRA_INFO))


class SessionBook:
    """The live env sessions of one server: opened, closed, and how many are alive now (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self.live: dict[int, float] = {}  # session number -> time of its last call
        self.opened = self.closed = 0

    def open(self) -> int:
        with self._lock:
            n = next(self._ids)
            self.live[n] = time.monotonic()
            self.opened += 1
            return n

    def touch(self, n: int) -> None:
        with self._lock:
            if n in self.live:
                self.live[n] = time.monotonic()

    def close(self, n: int) -> None:
        with self._lock:
            if self.live.pop(n, None) is not None:
                self.closed += 1

    def summary(self) -> dict[str, int]:
        with self._lock:
            return {"live": len(self.live), "opened": self.opened, "closed": self.closed}


class R2VEnvironment(Environment[TextAction, TextObservation, TextEnvState]):
    """An r2v env as an OpenEnv ``Environment``: ``reset(seed=, task_id=, task_index=, episode_index=)`` and
    ``step(TextAction)`` map onto ``gym.Env.reset(seed=, options=)`` and ``gym.Env.step(text)``."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # one env per session, no state shared between sessions

    def __init__(self, pool: EnvWorkerPool, *, oracle: bool = False, book: SessionBook | None = None):
        super().__init__()
        self.env_id, self.oracle = pool.env_id, oracle
        self._env = pool.open()
        self._book = book
        self._number = book.open() if book is not None else 0
        self._state = TextEnvState(env_id=self.env_id)
        self._started = self._done = self._closed = False

    # ------------------------------------------------------------------------------------------- protocol
    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> TextObservation:
        self._check_open()
        options = self._reset_options(seed, kwargs)
        obs, info = self._env.reset(seed=seed, options=options or None)
        self._started, self._done = True, False
        self._state = TextEnvState(env_id=self.env_id, episode_id=episode_id, step_count=0,
                                   task_id=info.get("task_id"), episode_index=info.get("episode_index"),
                                   perturbation_seed=info.get("perturbation_seed"))
        return TextObservation(text=obs, info=served_info(info, self.oracle), reward=None, done=False)

    def step(self, action: TextAction, timeout_s: float | None = None, **kwargs: Any) -> TextObservation:
        self._check_open()
        if not self._started:
            raise ServedError.wrap(ResetNeededError("reset the session before its first step"))
        if self._done:
            raise ServedError.wrap(EpisodeOverError("the episode has ended (terminated or truncated): reset first"))
        obs, reward, terminated, truncated, info = self._env.step(action.text)
        self._done = bool(terminated or truncated)
        self._state.step_count += 1
        self._state.done = self._done
        return TextObservation(text=obs, info=served_info(info, self.oracle), reward=float(reward), done=self._done,
                               terminated=bool(terminated), truncated=bool(truncated))

    @property
    def state(self) -> TextEnvState:
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        return EnvironmentMetadata(name=self.env_id, version=r2v_envs.__version__,
                                   description=f"{self.env_id}: an r2v perturbed text env (actions and observations "
                                               f"are text; oracle info keys {'on' if self.oracle else 'off'})")

    def close(self) -> None:
        """Free the env in its worker (a Terminal-Bench sandbox, a TextWorld game, a HumanEval judge); idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._env.close()
        finally:
            if self._book is not None:
                self._book.close(self._number)

    # -------------------------------------------------------------------------------------------- helpers
    def _check_open(self) -> None:
        if self._closed:
            raise ServedError.wrap(SessionClosedError("this session's env was freed (idle too long, or the server "
                                                      "is stopping): open a new session"))
        if self._book is not None:
            self._book.touch(self._number)

    @staticmethod
    def _reset_options(seed: Any, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """``gym`` reset options from the request's fields; anything else is a typed :class:`BadRequestError`."""
        extra = {k: v for k, v in kwargs.items() if k not in (*RESET_OPTIONS, "options")}
        options = dict(kwargs.get("options") or {})
        options.update({k: kwargs[k] for k in RESET_OPTIONS if kwargs.get(k) is not None})
        bad = []
        if extra:
            bad.append(f"unknown reset fields {sorted(extra)} (valid: seed, episode_id, {', '.join(RESET_OPTIONS)})")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
            bad.append(f"seed must be a non-negative int, got {seed!r}")
        if not isinstance(kwargs.get("options") or {}, Mapping):
            bad.append("options must be an object")
        if "task_id" in options and not isinstance(options["task_id"], str):
            bad.append(f"task_id must be a string, got {options['task_id']!r}")
        for k in ("task_index", "episode_index"):
            if k in options and (isinstance(options[k], bool) or not isinstance(options[k], int)):
                bad.append(f"{k} must be an int, got {options[k]!r}")
        if bad:
            raise ServedError.wrap(BadRequestError("; ".join(bad)))
        return options
