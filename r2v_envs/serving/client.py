"""The client side of ``r2v serve``: OpenEnv's ``EnvClient`` for r2v's wire types, and :class:`RemoteEnv`, a
Gymnasium env whose episodes run on a server.

:class:`RemoteEnv` is a drop-in for ``gym.make(env_id, ...)``: ``reset(seed=, options=)`` returns ``(text, info)``
and ``step(text)`` the usual five values, the same bytes as the env in process (the server builds it with the same
arguments). An error answer raises :class:`~r2v_envs.serving.errors.RemoteEnvError` with the server-side ``kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from r2v_envs.core import TextSpace
from r2v_envs.errors import InvalidActionError, UnknownChoiceError
from r2v_envs.serving.config import TOKEN_ENV
from r2v_envs.serving.errors import RemoteEnvError, parse_server_error
from r2v_envs.serving.openenv_api import EnvClient, StepResult
from r2v_envs.serving.wire import TextAction, TextEnvState, TextObservation


class R2VEnvClient(EnvClient[TextAction, TextObservation, TextEnvState]):
    """OpenEnv's WebSocket client, typed for ``r2v serve`` (``R2VEnvClient(base_url=url).sync()`` for sync use)."""

    def _step_payload(self, action: TextAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[TextObservation]:
        obs = TextObservation(**payload.get("observation", {}), reward=payload.get("reward"),
                              done=payload.get("done", False))
        return StepResult(observation=obs, reward=payload.get("reward"), done=payload.get("done", False))

    def _parse_state(self, payload: dict[str, Any]) -> TextEnvState:
        return TextEnvState(**payload)


def auth_headers(token: str | None) -> dict[str, str] | None:
    return {"Authorization": f"Bearer {token}"} if token else None


class RemoteEnv(gym.Env[str, str]):
    """A served r2v env as a Gymnasium env: one server session (and one env on the server) per instance.

    Args:
        url: the server's base URL (``http://127.0.0.1:8000``; ``ws://`` also works).
        token: bearer token (default: ``$R2V_SERVE_TOKEN`` when set).
        message_timeout_s: how long one reset or step may take on the server.
        reset_options: options sent with every reset unless ``reset(options=...)`` overrides them (e.g. a
            ``task_id``).
        seed: the seed of every reset that names none (so ``RemoteEnv(url, seed=z)`` plays what the in-process
            ``gym.make(id, seed=z)`` plays: the server makes its env without a seed, and a seeded reset sets z).
        served: the server's ``GET /r2v/info`` (:func:`r2v_envs.resolve.served_info`): task ids, benchmark, step
            cap. :func:`r2v_envs.resolve.open_env` fills it (and checks the env arguments against it).
    """

    metadata = {"render_modes": []}

    def __init__(self, url: str, *, token: str | None = None, message_timeout_s: float = 300.0,
                 connect_timeout_s: float = 30.0, reset_options: Mapping[str, Any] | None = None,
                 seed: int | None = None, served: Mapping[str, Any] | None = None):
        import os

        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        self.url = url
        self.observation_space = TextSpace()
        self.action_space = TextSpace()
        self.reset_options = dict(reset_options or {})
        self.reset_seed = None if seed is None else int(seed)
        self.served = dict(served or {})
        self.benchmark = str(self.served.get("benchmark") or self.served.get("env_id") or url)
        self.max_episode_steps = self.served.get("max_episode_steps")
        self._client_args = {"base_url": url, "message_timeout_s": message_timeout_s,
                             "connect_timeout_s": connect_timeout_s, "headers": auth_headers(token)}
        self._client: Any = None
        self._open = False

    @property
    def client(self) -> Any:
        """OpenEnv's sync client, made at the first call: an env made before a fork (the runner's task listing)
        holds no connection or event-loop thread, and one made in a worker connects from there."""
        if self._client is None:
            self._client = R2VEnvClient(**self._client_args).sync()
        return self._client

    def task_ids(self, split: str = "all") -> list[str]:
        """The served env's tasks of ``split`` (``"all"``: every task, sorted), from the server's ``/r2v/info``
        (as ``env.unwrapped.task_ids`` of an env in process)."""
        by_split = self.served.get("task_ids") or {}
        if split == "all":
            return sorted({t for ids in by_split.values() for t in ids})
        if split not in by_split:
            raise UnknownChoiceError("split", split, [*by_split, "all"])
        return list(by_split[split])

    def _call(self, fn, *args: Any, **kwargs: Any) -> StepResult[TextObservation]:
        try:
            return fn(*args, **kwargs)
        except RuntimeError as e:
            if str(e).startswith("Server error:"):
                raise parse_server_error(str(e)) from None
            raise
        except ConnectionError as e:
            raise RemoteEnvError("ConnectionError", "CONNECTION", str(e)) from None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        fields = {**self.reset_options, **dict(options or {})}
        seed = self.reset_seed if seed is None else seed  # gym.make(id, seed=z)'s meaning: z unless a reset names one
        if seed is not None:
            fields["seed"] = int(seed)
        result = self._call(self.client.reset, **fields)
        self._open = True
        return result.observation.text, dict(result.observation.info)

    def step(self, action: str) -> tuple[str, float, bool, bool, dict]:
        if not isinstance(action, str):  # as TextEnv: a programming error, caught before it travels
            raise InvalidActionError(f"actions are str, got {type(action).__name__}")
        # built unchecked: the server validates (one rule, one typed answer: an oversized text is a ValidationError)
        result = self._call(self.client.step, TextAction.model_construct(text=action))
        obs = result.observation
        return obs.text, float(result.reward or 0.0), bool(obs.terminated), bool(obs.truncated), dict(obs.info)

    def state(self) -> TextEnvState:
        return self._call(self.client.state)

    def close(self) -> None:
        """End the session: the server frees its env."""
        if self._client is None:  # never connected: nothing to end
            return
        try:
            self._client.close()
        except Exception:  # noqa: BLE001 - closing a session whose server is gone is not an error
            pass
