"""The agent-visible context x_t = (G, o_<=t, a_<t) (Sec. 3, Eq. 1), shared by prompts, verifiers and features.

Only what the agent sees goes in: the (possibly perturbed) goal, observations and agent-visible info. The
oracle keys of ``info`` (``expert_action``, ``won``, ``score``) never enter a Context, so verifiers and
features cannot leak hindsight.

Example:
    >>> ctx = Context.start(goal="Take the coin.", observation="You are in a room.", info={"step": 0})
    >>> ctx = ctx.advance("go east", "You see a coin.", reward=0.0, info={"step": 1})
    >>> ctx.step, ctx.last_action, ctx.observation
    (1, 'go east', 'You see a coin.')
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

# info keys a policy may see (r2v_envs/visibility.py: `r2v serve` hides the same keys); everything else in info is
# bookkeeping or oracle-only.
from r2v_envs.visibility import AGENT_VISIBLE_INFO  # noqa: F401 - part of this module's interface


@dataclass(frozen=True)
class Turn:
    action: str
    observation: str
    reward: float | None = None


@dataclass(frozen=True)
class Context:
    goal: str
    observation: str
    history: tuple[Turn, ...] = ()
    admissible_actions: tuple[str, ...] | None = None
    step: int = 0
    max_steps: int | None = None
    benchmark: str = ""
    task_id: str = ""
    last_reward: float | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def start(cls, goal: str, observation: str, info: Mapping[str, Any], max_steps: int | None = None
              ) -> Context:
        return cls(goal=goal, observation=observation, admissible_actions=_tuple(info.get("admissible_actions")),
                   step=int(info.get("step", 0)), max_steps=max_steps, benchmark=str(info.get("benchmark", "")),
                   task_id=str(info.get("task_id", "")))

    def advance(self, action: str, observation: str, reward: float | None, info: Mapping[str, Any]) -> Context:
        """The context after ``action`` was executed and ``observation`` came back."""
        turn = Turn(action=action, observation=observation, reward=reward)
        return replace(self, goal=str(info.get("goal", self.goal)), observation=observation,
                       history=(*self.history, turn), admissible_actions=_tuple(info.get("admissible_actions")),
                       step=int(info.get("step", self.step + 1)), last_reward=reward)

    @property
    def last_action(self) -> str | None:
        return self.history[-1].action if self.history else None

    @property
    def actions(self) -> list[str]:
        return [t.action for t in self.history]


def _tuple(x: Sequence[str] | None) -> tuple[str, ...] | None:
    return None if x is None else tuple(x)
