"""The 15-dim risk features f_t = Phi(x_t, pi, V) of Sec. 4.1 (Eq. 6) and Appendix C.

Layout (:data:`FEATURE_NAMES`, grouped in :data:`FEATURE_GROUPS`):

* ``entropy`` (policy uncertainty, needs token log-probs): mean and max token entropy over the K
  candidates; mean per-token log-prob, and the worst candidate's mean per-token log-prob.
* ``verifier``: mean, std, spread (max - min), best and worst verifier score over the candidates.
* ``consistency``: candidate consistency (share of candidates equal to the most common action) and
  semantic entropy (entropy of the candidates' clusters of equivalent actions / log K; Kuhn et al. 2023,
  with equivalence = same normalised command).
* ``context``: horizon fraction t/H, absolute step t, normalised context length (prompt characters / the
  prompt builder's character budget, untrimmed, so it keeps growing) and a goal-length proxy (goal words / 100).

Closed-source variants (Sec. 5.4): ``"no_entropy"`` zeros the ``entropy`` group; ``"pseudo_entropy"``
replaces both token-entropy dims by the normalised entropy of softmax(verifier scores) and zeros the
log-prob dims (an API that hides entropies hides log-probs too). Masks for the ablations of Table 9 are in
:data:`ABLATIONS`; masking zeros dims at inference time without retraining, as in the paper.

Example:
    >>> from r2v_agents.context import Context
    >>> from r2v_agents.policy import Candidate
    >>> ctx = Context.start("Take the coin.", "A room.", {}, max_steps=10)
    >>> cands = [Candidate("go east", token_logprobs=(-0.1, -0.3), token_entropies=(0.2, 0.4),
    ...                    verifier_score=0.8),
    ...          Candidate("go east", token_logprobs=(-0.2, -0.2), token_entropies=(0.3, 0.3),
    ...                    verifier_score=0.8),
    ...          Candidate("look", token_logprobs=(-2.0,), token_entropies=(1.0,), verifier_score=0.2)]
    >>> f = dict(zip(FEATURE_NAMES, compute_features(ctx, cands).tolist()))
    >>> round(f["verifier_spread"], 3), round(f["candidate_consistency"], 3), f["horizon_fraction"]
    (0.6, 0.667, 0.0)
    >>> len(FEATURE_NAMES), sum(len(g) for g in FEATURE_GROUPS.values())
    (15, 15)
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from r2v_agents.context import Context
from r2v_agents.policy import Candidate
from r2v_agents.prompts import DEFAULT_PROMPT
from r2v_envs.errors import R2VError, UnknownChoiceError


class FeatureSpecError(R2VError, ValueError):
    """Router features whose names, order, count or normalisation do not match what the router was trained on."""

FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    "entropy": ("token_entropy_mean", "token_entropy_max", "token_logprob_mean", "token_logprob_worst"),
    "verifier": ("verifier_mean", "verifier_std", "verifier_spread", "verifier_best", "verifier_worst"),
    "consistency": ("candidate_consistency", "semantic_entropy"),
    "context": ("horizon_fraction", "step", "context_length", "goal_length"),
}
FEATURE_NAMES: tuple[str, ...] = tuple(n for group in FEATURE_GROUPS.values() for n in group)
N_FEATURES = len(FEATURE_NAMES)
VARIANTS: tuple[str, ...] = ("full", "no_entropy", "pseudo_entropy")
# Feature-group ablations (Appendix E, Table 9): which groups stay on.
ABLATIONS: dict[str, tuple[str, ...]] = {
    "all": tuple(FEATURE_GROUPS),
    "verifier+entropy": ("verifier", "entropy"),
    "verifier_only": ("verifier",),
    "entropy_only": ("entropy",),
    "context_only": ("context",),
    "no_verifier": ("entropy", "consistency", "context"),
    "no_entropy": ("verifier", "consistency", "context"),
}
GOAL_WORDS_NORM = 100.0
_ARTICLES = re.compile(r"\b(the|a|an|to|at|on|in)\b")


def feature_mask(groups: Sequence[str]) -> np.ndarray:
    """Boolean mask over :data:`FEATURE_NAMES` keeping the named groups (or an :data:`ABLATIONS` name)."""
    if isinstance(groups, str):
        if groups not in ABLATIONS:
            raise UnknownChoiceError("feature ablation", groups, ABLATIONS)
        groups = ABLATIONS[groups]
    unknown = [g for g in groups if g not in FEATURE_GROUPS]
    if unknown:
        raise UnknownChoiceError("feature group", unknown[0], FEATURE_GROUPS)
    keep = {n for g in groups for n in FEATURE_GROUPS[g]}
    return np.array([n in keep for n in FEATURE_NAMES])


def apply_mask(features: np.ndarray, groups: Sequence[str] | str) -> np.ndarray:
    """Zero the dims outside ``groups`` (works on one vector or a (N, 15) matrix)."""
    return np.where(feature_mask(groups), features, 0.0)


def normalize_action(action: str) -> str:
    """Equivalence key for consistency/semantic entropy: lower-case, no articles, single spaces."""
    return " ".join(_ARTICLES.sub(" ", action.lower()).split())


def pseudo_entropy(scores: Sequence[float]) -> float:
    """H_ver of Sec. 5.4: normalised entropy of softmax(scores) (1.0 for a single candidate)."""
    if len(scores) <= 1:
        return 1.0 if scores else 0.0
    s = np.asarray(scores, dtype=float)
    p = np.exp(s - s.max())
    p /= p.sum()
    return float(-(p * np.log(np.clip(p, 1e-12, None))).sum() / math.log(len(s)))


def compute_features(ctx: Context, candidates: Sequence[Candidate], *, variant: str = "full",
                     context_chars: int | None = None) -> np.ndarray:
    """Phi(x_t, pi, V) as a float32 vector ordered like :data:`FEATURE_NAMES`.

    Candidates carry their token statistics and ``verifier_score`` (missing values count as absent: token
    dims become 0 when no candidate has log-probs). ``context_chars`` defaults to the characters of the
    whole context (goal, every action and observation).
    """
    if variant not in VARIANTS:
        raise UnknownChoiceError("feature variant", variant, VARIANTS)

    f = dict.fromkeys(FEATURE_NAMES, 0.0)
    with_tokens = [c for c in candidates if c.token_logprobs]
    if with_tokens and variant == "full":
        ents = [c.token_entropies or () for c in with_tokens]
        f["token_entropy_mean"] = float(np.mean([np.mean(e) for e in ents if e])) if any(ents) else 0.0
        f["token_entropy_max"] = float(max((max(e) for e in ents if e), default=0.0))
        means = [float(np.mean(c.token_logprobs)) for c in with_tokens]
        f["token_logprob_mean"], f["token_logprob_worst"] = float(np.mean(means)), float(min(means))
    scores = [c.verifier_score for c in candidates if c.verifier_score is not None]
    if scores:
        s = np.asarray(scores, dtype=float)
        f.update(verifier_mean=float(s.mean()), verifier_std=float(s.std()),
                 verifier_spread=float(s.max() - s.min()), verifier_best=float(s.max()),
                 verifier_worst=float(s.min()))
    if variant == "pseudo_entropy":
        f["token_entropy_mean"] = f["token_entropy_max"] = pseudo_entropy(scores)
    if candidates:
        counts = Counter(normalize_action(c.action) for c in candidates)
        k = len(candidates)
        f["candidate_consistency"] = counts.most_common(1)[0][1] / k
        if k > 1:
            p = np.array(list(counts.values()), dtype=float) / k
            f["semantic_entropy"] = float(-(p * np.log(p)).sum() / math.log(k))
    f["horizon_fraction"] = ctx.step / ctx.max_steps if ctx.max_steps else 0.0
    f["step"] = float(ctx.step)
    chars = context_chars if context_chars is not None else context_length(ctx)
    f["context_length"] = chars / DEFAULT_PROMPT.max_chars
    f["goal_length"] = len(ctx.goal.split()) / GOAL_WORDS_NORM
    return np.array([f[n] for n in FEATURE_NAMES], dtype=np.float32)


def context_length(ctx: Context) -> int:
    """Characters in the whole context x_t (goal, actions and observations so far)."""
    # the last turn's observation is the current observation: count it once
    turns = sum(len(t.action) + len(t.observation) for t in ctx.history)
    return len(ctx.goal) + (turns if ctx.history else len(ctx.observation))
