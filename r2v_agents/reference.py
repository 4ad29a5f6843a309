"""Reference agents that frame any report: a seeded uniform ``random`` floor and the env's ``expert`` ceiling.

:class:`RandomAgent` plays an admissible action drawn uniformly with a generator seeded by ``(seed, episode id,
step)``, so its choices depend on neither batching nor worker count, and a rerun plays the same actions. With
no admissible list (R2V/TerminalBench-v0) it plays an empty action, which the env answers with its usage
text. :class:`ExpertAgent` plays ``info["expert_action"]`` (TextWorld's planner, ALFWorld's handcoded expert,
the canonical HumanEval+ solution, the Terminal-Bench solution): privileged, so it sees oracle keys.

Example:
    >>> from r2v_agents.context import Context
    >>> ctx = Context.start("g", "o", {"admissible_actions": ["go south", "look", "inventory"]})
    >>> a = RandomAgent(seed=0).act_batch([ctx], [{}])[0].action
    >>> a in ("go south", "look", "inventory"), a == RandomAgent(seed=0).act_batch([ctx], [{}])[0].action
    (True, True)
    >>> ExpertAgent().act_batch([ctx], [{"expert_action": "go south"}])[0].action
    'go south'
"""

from __future__ import annotations

import random

from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.teachers import OracleTeacher


class RandomAgent(BatchPolicy):
    """Uniform over the admissible actions of each step, seeded per (seed, episode, step)."""

    name = "random"

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def act_batch(self, contexts, infos):
        out = []
        for ctx in contexts:
            actions = list(ctx.admissible_actions or ())
            episode = ctx.extra.get("episode_id", f"{ctx.task_id}@?")
            rng = random.Random(f"{self.seed}:{episode}:{ctx.step}")  # str seeds hash stably across processes
            out.append(Decision(action=rng.choice(actions) if actions else "", source="agent",
                                meta={"choices": len(actions)}))
        return out


class ExpertAgent(OracleTeacher):
    """The env's expert action at every step (its fallback when the env has none), logged as the agent's."""

    name = "expert"

    def act_batch(self, contexts, infos):
        out = super().act_batch(contexts, infos)
        for d in out:
            d.source = "agent"
        return out
