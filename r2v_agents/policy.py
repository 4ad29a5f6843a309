"""The policy protocol, decisions, and the adapter that turns any agent into a policy.

A policy is anything with ``reset(goal, info)`` and ``act(obs, info) -> Decision``. Policies that can act on
many environments at once also expose the batched form ``act_batch(contexts, infos) -> list[Decision]``,
which is what the rollout runner calls: the runner owns each episode's :class:`Context` (goal,
observations, action history) and hands the policy one context per live environment.
:func:`as_policy` adapts a plain callable ``(obs, info) -> str`` or an object with ``act`` to that form.

Policies see only agent-visible ``info`` keys (:data:`r2v_agents.context.AGENT_VISIBLE_INFO`) unless they
set ``sees_oracle = True`` (the oracle teacher: it reads ``expert_action``).

Example:
    >>> from r2v_agents.context import Context
    >>> pol = as_policy(lambda obs, info: "go east")
    >>> pol.act_batch([Context.start("g", "o", {})], [{}])[0].action
    'go east'
    >>> pol.reset("g", {}); pol.act("o", {}).source
    'agent'
"""

from __future__ import annotations

import copy
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from r2v_agents.context import AGENT_VISIBLE_INFO, Context  # noqa: F401 - AGENT_VISIBLE_INFO: documented here
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.visibility import visible_info  # noqa: F401 - re-exported: the agent-visible part of an info


def parse_run_spec(arg: str, options: Sequence[str], kind: str) -> tuple[str, dict[str, str]]:
    """The ``RUN_DIR?key=value&...`` of an ``r2v eval --agent KIND:RUN_DIR?...`` spec -> (RUN_DIR, options); a key
    not in ``options`` raises (``kind`` names the agent kind in the message). ``slm:``, ``r2v:`` and ``drrn:`` read
    their run directories this way.

    Example:
        >>> parse_run_spec("runs/r2v?k=1&greedy=1", ("k", "greedy"), "slm")
        ('runs/r2v', {'k': '1', 'greedy': '1'})
        >>> parse_run_spec("runs/drrn", ("temperature",), "drrn")
        ('runs/drrn', {})
    """
    run_dir, _, query = arg.partition("?")
    opts = dict(urllib.parse.parse_qsl(query, keep_blank_values=True))
    for key in opts:
        if key not in options:
            raise UnknownChoiceError(f"{kind}: option", key, options)
    return run_dir, opts


@dataclass
class Candidate:
    """One sampled action with its token statistics (None where the backend hides them)."""

    action: str
    logprob: float | None = None
    token_logprobs: tuple[float, ...] | None = None
    token_entropies: tuple[float, ...] | None = None
    verifier_score: float | None = None
    token_ids: tuple[int, ...] | None = None  # the sampled ids (not logged; for re-scoring)
    prompt_token_ids: tuple[int, ...] | None = None  # the ids the model was conditioned on (after truncation)
    text: str | None = None  # the decoded completion before parsing (a chat agent grounds it itself; not logged)

    @property
    def mean_logprob(self) -> float | None:
        if self.token_logprobs:
            return sum(self.token_logprobs) / len(self.token_logprobs)
        return self.logprob


@dataclass(frozen=True)
class TokenTrace:
    """What an SLM generated for the action it took, as PPO/GRPO-style trainers consume it.

    ``completion_logprobs[i]`` is log p(completion_ids[i] | prompt_ids, completion_ids[:i]) under the model's
    raw logits (temperature 1, no top-p): the behaviour policy's log-probs when sampling at temperature 1.
    """

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    completion_logprobs: tuple[float, ...]


@dataclass
class Decision:
    """The action a policy takes, plus what the runner logs about how it was chosen.

    ``source`` is "slm", "teacher", "oracle" or "agent"; ``cost`` is the money/compute spent on this step
    (teacher tokens), ``meta`` holds anything else JSON-serialisable.
    """

    action: str
    source: str = "agent"
    candidates: list[Candidate] = field(default_factory=list)
    verifier_score: float | None = None
    features: Sequence[float] | None = None
    router_prob: float | None = None
    cost: float = 0.0
    meta: dict[str, Any] = field(default_factory=dict)
    tokens: TokenTrace | None = None  # opt-in (SLMPolicy(record_tokens=True)); None for teachers


@runtime_checkable
class Policy(Protocol):
    def reset(self, goal: str, info: Mapping[str, Any]) -> None: ...

    def act(self, obs: str, info: Mapping[str, Any]) -> Decision: ...


class BatchPolicy:
    """Base class of r2v's own policies: implement :meth:`act_batch`; ``reset``/``act`` come for free
    (they keep one context, for single-env use outside the runner)."""

    name: str = "policy"
    sees_oracle: bool = False

    def act_batch(self, contexts: Sequence[Context], infos: Sequence[Mapping[str, Any]]) -> list[Decision]:
        raise NotImplementedError

    def end_episodes(self, episode_ids: Sequence[str]) -> None:
        """Called by the runner when episodes finish (lets stateful policies free per-episode state)."""

    # -- the single-env protocol on top of the batched form
    def reset(self, goal: str, info: Mapping[str, Any]) -> None:
        self._ctx: Context | None = None
        self._goal, self._start_info = goal, dict(info)

    def act(self, obs: str, info: Mapping[str, Any]) -> Decision:
        ctx = getattr(self, "_ctx", None)
        if ctx is None:
            ctx = Context.start(getattr(self, "_goal", info.get("goal", "")), obs, info)
        else:
            ctx = ctx.advance(self._last_action, obs, None, info)
        decision = self.act_batch([ctx], [info])[0]
        self._ctx, self._last_action = ctx, decision.action
        return decision


def to_decision(out: Any, source: str = "agent") -> Decision:
    if isinstance(out, Decision):
        return out
    if isinstance(out, str):
        return Decision(action=out, source=source)
    raise TypeError(f"a policy must return a str or a Decision, got {type(out).__name__}")


class CallablePolicy(BatchPolicy):
    """A stateless ``(obs, info) -> str | Decision`` callable as a policy."""

    def __init__(self, fn: Callable[[str, Mapping[str, Any]], Any], name: str | None = None):
        self.fn, self.name = fn, name or getattr(fn, "__name__", "callable")

    def act_batch(self, contexts, infos):
        return [to_decision(self.fn(c.observation, i)) for c, i in zip(contexts, infos)]


class AgentPolicy(BatchPolicy):
    """An object with ``act(obs, info)`` (and optionally ``reset(goal, info)``) as a batched policy.

    Each episode gets its own deep copy of the prototype, so a stateful agent can run on many envs at once.
    """

    def __init__(self, agent: Any, name: str | None = None):
        self.prototype, self.name = agent, name or type(agent).__name__
        self.sees_oracle = bool(getattr(agent, "sees_oracle", False))
        self._live: dict[str, Any] = {}

    def act_batch(self, contexts, infos):
        out = []
        for ctx, info in zip(contexts, infos):
            key = str(ctx.extra.get("episode_id", id(ctx)))
            agent = self._live.get(key)
            if agent is None or not ctx.history:
                agent = self._live[key] = copy.deepcopy(self.prototype)
                if hasattr(agent, "reset"):
                    agent.reset(ctx.goal, info)
            out.append(to_decision(agent.act(ctx.observation, info)))
        return out

    def end_episodes(self, episode_ids):
        for key in episode_ids:
            self._live.pop(str(key), None)


def as_policy(agent: Any, name: str | None = None) -> BatchPolicy:
    """Adapt ``agent`` to the batched policy form the runner uses (returned unchanged if it has one)."""
    if hasattr(agent, "act_batch"):
        return agent
    if hasattr(agent, "act"):
        return AgentPolicy(agent, name)
    if callable(agent):
        return CallablePolicy(agent, name)
    raise TypeError(f"cannot make a policy of {type(agent).__name__}: give a callable (obs, info) -> str, "
                    "or an object with act(obs, info)")
