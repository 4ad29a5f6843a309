"""The wire types of ``r2v serve``: OpenEnv ``Action`` / ``Observation`` / ``State`` models of a text env.

They are what the server's ``/schema`` publishes and what both OpenEnv's generic client (plain dicts) and
:class:`r2v_envs.serving.client.R2VEnvClient` (these models) exchange: an action is ``{"text": str}``; an observation
carries the env's text, its (agent-visible) info and Gymnasium's two end flags, with OpenEnv's ``reward`` and
``done`` (= terminated or truncated) beside them.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from r2v_envs.serving.jsonvalues import jsonable  # noqa: F401 - re-exported: the wire's value form
from r2v_envs.serving.openenv_api import Action, Observation, State

MAX_ACTION_CHARS = 100_000
"""longest action text the server takes (an env command or a code submission is far shorter)"""


class TextAction(Action):
    """One agent action: the text the env reads (a command, a shell line, a code submission)."""

    text: str = Field(max_length=MAX_ACTION_CHARS, description="the action text, as env.step(text) takes it")


class TextObservation(Observation):
    """What ``reset``/``step`` return: the observation text and the served part of ``info``."""

    text: str = Field(description="the (possibly perturbed) observation text")
    info: dict[str, Any] = Field(default_factory=dict, description="agent-visible info keys (oracle keys with --oracle)")
    terminated: bool = Field(default=False, description="the episode ended (won or lost)")
    truncated: bool = Field(default=False, description="the episode ran out of steps")


class TextEnvState(State):
    """The session's bookkeeping (``GET /state`` / the ``state`` message)."""

    env_id: str = Field(description="the served env id")
    task_id: str | None = Field(default=None, description="the task of the current episode")
    episode_index: int | None = Field(default=None, description="episodes since the last seeded reset")
    perturbation_seed: int | None = Field(default=None, description="the perturbation seed z")
    done: bool = Field(default=False, description="the current episode has ended")


