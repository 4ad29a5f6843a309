"""The routed R2V agent (Algorithm 2): SLM candidates -> verifier -> best -> features -> router -> teacher
if p >= tau and budget remains, else the best SLM candidate.

The teacher budget is a hard cap on teacher *queries* (a failed query still spends one), per episode
(``budget_per_episode``) and over the policy's lifetime (``total_budget``). A teacher that returns nothing
(its own budget spent, a failed request) leaves the SLM's action in place.

Example:
    >>> from r2v_agents.context import Context
    >>> from r2v_agents.policy import Candidate
    >>> from r2v_agents.routers import AlwaysLLM
    >>> from r2v_agents.slm import SLMPolicy
    >>> from r2v_agents.teachers import OracleTeacher
    >>> class Fixed:
    ...     def sample(self, prompts, k):
    ...         return [[Candidate("look", -0.1)] for _ in prompts]
    >>> agent = RoutedPolicy(SLMPolicy(Fixed(), k=1), OracleTeacher(), AlwaysLLM(), total_budget=1)
    >>> ctx = Context.start("g", "o", {})
    >>> [d.source for d in agent.act_batch([ctx, ctx], [{"expert_action": "go east"}] * 2)]
    ['oracle', 'slm']
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

import numpy as np

from r2v_agents.features import apply_mask
from r2v_agents.policy import BatchPolicy, Decision, visible_info
from r2v_agents.routers import Router
from r2v_agents.slm import SLMPolicy


class RoutedPolicy(BatchPolicy):
    """Risk-calibrated escalation from an SLM policy to a teacher."""

    name = "r2v"

    def __init__(self, slm: SLMPolicy, teacher: Any, router: Router, threshold: float | None = None,
                 budget_per_episode: int | None = None, total_budget: int | None = None, ablation: str = "all"):
        for b in (budget_per_episode, total_budget):
            if b is not None and b < 0:
                raise ValueError("budgets must be >= 0 or None")
        self.slm, self.teacher, self.router = slm, teacher, router
        self.threshold = router.threshold if threshold is None else float(threshold)
        self.budget_per_episode, self.total_budget, self.ablation = budget_per_episode, total_budget, ablation
        self.sees_oracle = bool(getattr(teacher, "sees_oracle", False))
        self.teacher_queries = 0
        self._episode_queries: Counter = Counter()
        variant = getattr(router, "variant", None)
        if variant is not None:
            slm.feature_variant = variant  # the router dictates which feature variant it was trained on

    def _budget_left(self, episode: str) -> bool:
        if self.total_budget is not None and self.teacher_queries >= self.total_budget:
            return False
        return self.budget_per_episode is None or self._episode_queries[episode] < self.budget_per_episode

    def act_batch(self, contexts, infos):
        decisions = self.slm.act_batch(contexts, [visible_info(i) for i in infos])
        feats = np.stack([np.asarray(d.features, dtype=np.float32) for d in decisions])
        p = self.router.predict(apply_mask(feats, self.ablation) if self.ablation != "all" else feats, contexts)
        escalate = []
        for i, (ctx, prob) in enumerate(zip(contexts, p)):
            key = str(ctx.extra.get("episode_id", ""))
            if prob >= self.threshold and self._budget_left(key):
                self.teacher_queries += 1  # reserve before asking: a failed query spends budget too
                self._episode_queries[key] += 1
                escalate.append(i)
        replies = self.teacher.query_batch([contexts[i] for i in escalate], [infos[i] for i in escalate]) \
            if escalate else []
        out = [replace(d, router_prob=float(prob), meta={**d.meta, "threshold": self.threshold})
               for d, prob in zip(decisions, p)]
        for i, reply in zip(escalate, replies):
            if reply is None:
                out[i].meta["teacher_failed"] = True
                continue
            out[i] = Decision(action=reply.action, source=reply.source, candidates=out[i].candidates,
                              verifier_score=None, features=out[i].features, router_prob=out[i].router_prob,
                              cost=reply.cost, meta={**out[i].meta, **reply.meta, "slm_action": out[i].action})
        return out

    def end_episodes(self, episode_ids):
        for key in episode_ids:
            self._episode_queries.pop(str(key), None)
        for part in (self.slm, self.teacher):
            if hasattr(part, "end_episodes"):
                part.end_episodes(episode_ids)
