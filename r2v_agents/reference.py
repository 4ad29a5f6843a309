"""Reference agents that frame any report: a seeded uniform ``random`` floor, the benchmark's ``verifier`` alone
and the env's ``expert`` ceiling.

:class:`RandomAgent` plays an admissible action drawn uniformly with a generator seeded by ``(seed, episode id,
step)``, so its choices depend on neither batching nor worker count, and a rerun plays the same actions. With
no admissible list (R2V/TerminalBench-v0) it plays an empty action, which the env answers with its usage
text. :class:`ExpertAgent` plays ``info["expert_action"]`` (TextWorld's planner, ALFWorld's handcoded expert,
the canonical HumanEval+ solution, the Terminal-Bench solution): privileged, so it sees oracle keys.
:class:`VerifierAgent` plays the visible admissible action the benchmark's verifier (Appendix C) scores highest,
ties drawn as ``random`` draws: no model at all. The SLM-only agent acts with the verifier's pick among K samples of
the SLM, so this is what that protocol scores when the samples carry no knowledge; an SLM is worth the SR it adds
over it.

Example:
    >>> from r2v_agents.context import Context
    >>> ctx = Context.start("g", "o", {"admissible_actions": ["go south", "look", "inventory"]})
    >>> a = RandomAgent(seed=0).act_batch([ctx], [{}])[0].action
    >>> a in ("go south", "look", "inventory"), a == RandomAgent(seed=0).act_batch([ctx], [{}])[0].action
    (True, True)
    >>> ExpertAgent().act_batch([ctx], [{"expert_action": "go south"}])[0].action
    'go south'
    >>> goal = Context.start("Take the coin.", "A coin lies here.", {"admissible_actions": ["look", "take coin"],
    ...                                                               "benchmark": "textworld"})
    >>> VerifierAgent().act_batch([goal], [{}])[0].action
    'take coin'
"""

from __future__ import annotations

import random

from r2v_agents.context import Context
from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.teachers import OracleTeacher
from r2v_agents.verifiers import Verifier, verifier_for


def step_rng(seed: int, ctx: Context) -> random.Random:
    """The generator of one decision, seeded by (seed, episode id, step) alone: the draws depend on neither batching
    nor worker count (a str seed hashes stably across processes)."""
    episode = ctx.extra.get("episode_id", f"{ctx.task_id}@?")
    return random.Random(f"{seed}:{episode}:{ctx.step}")


class RandomAgent(BatchPolicy):
    """Uniform over the admissible actions of each step, seeded per (seed, episode, step)."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def act_batch(self, contexts, infos):
        out = []
        for ctx in contexts:
            actions = list(ctx.admissible_actions or ())
            out.append(Decision(action=step_rng(self.seed, ctx).choice(actions) if actions else "", source="agent",
                                meta={"choices": len(actions)}))
        return out


class VerifierAgent(BatchPolicy):
    """The visible admissible action the benchmark's verifier scores highest; ties drawn uniformly, seeded per
    (seed, episode, step) as :class:`RandomAgent` draws. No admissible list: an empty action."""

    name = "verifier"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)
        self._verifiers: dict[str, Verifier] = {}

    def act_batch(self, contexts, infos):
        out = []
        for ctx in contexts:
            actions = list(ctx.admissible_actions or ())
            if not actions:
                out.append(Decision(action="", source="agent", meta={"choices": 0}))
                continue
            if ctx.benchmark not in self._verifiers:
                self._verifiers[ctx.benchmark] = verifier_for(ctx.benchmark)
            scores = list(self._verifiers[ctx.benchmark].score_batch(ctx, actions))
            best = max(scores)
            ties = [a for a, v in zip(actions, scores) if v >= best - 1e-12]
            out.append(Decision(action=step_rng(self.seed, ctx).choice(ties), source="agent", verifier_score=float(best),
                                meta={"choices": len(actions), "ties": len(ties)}))
        return out


class ExpertAgent(OracleTeacher):
    """The env's expert action at every step (its fallback when the env has none), logged as the agent's."""

    name = "expert"

    def act_batch(self, contexts, infos):
        out = super().act_batch(contexts, infos)
        for d in out:
            d.source = "agent"
        return out
