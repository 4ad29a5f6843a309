"""The SLM policy: K sampled candidates -> verifier scores -> best candidate, with the risk features f_t.

This is lines 3-5 of Algorithm 2; run alone (``SLMPolicy``) it is the SLM-only baseline whose rollouts
give the router its training data, and :class:`r2v_agents.routed.RoutedPolicy` wraps it.

Example:
    >>> from r2v_agents.context import Context
    >>> from r2v_agents.policy import Candidate
    >>> from r2v_agents.verifiers.textworld import TextWorldVerifier
    >>> class Fixed:   # a stand-in sampler: the same two candidates every time
    ...     def sample(self, prompts, k):
    ...         return [[Candidate("look", -0.5), Candidate("take coin", -2.0)] for _ in prompts]
    >>> slm = SLMPolicy(Fixed(), TextWorldVerifier(), k=2)
    >>> d = slm.act_batch([Context.start("Take the coin.", "You see a coin.", {})], [{}])[0]
    >>> d.action, d.source, len(d.features)
    ('take coin', 'slm', 15)
"""

from __future__ import annotations

import difflib
import functools
import zlib
from collections.abc import Sequence
from dataclasses import replace

from r2v_agents.context import Context
from r2v_agents.features import compute_features
from r2v_agents.policy import BatchPolicy, Candidate, Decision, TokenTrace
from r2v_agents.prompts import DEFAULT_PROMPT, PromptConfig, build_prompt
from r2v_agents.samplers import Sampler
from r2v_agents.teachers import fallback_action
from r2v_agents.verifiers.base import Verifier, clamp
from r2v_envs.errors import UnknownChoiceError


def best_candidate(cands: Sequence[Candidate]) -> Candidate | None:
    """argmax_k verifier score (ties: higher mean token log-prob, then first sampled); no verifier: log-prob."""
    usable = [c for c in cands if c.action]
    if not usable:
        return None

    def key(ic):
        i, c = ic
        lp = c.mean_logprob
        return (c.verifier_score if c.verifier_score is not None else 0.0,
                lp if lp is not None else float("-inf"), -i)
    return max(enumerate(usable), key=key)[1]


ADMISSIBLE_MODES = ("free", "snap")


def decision_key(ctx: Context) -> int:
    """A stable integer naming the decision at ``ctx``: its task, perturbation seed, episode and step.

    Example:
        >>> decision_key(Context.start("g", "o", {"step": 3})) == decision_key(Context.start("g", "o", {"step": 3}))
        True
    """
    extra = ctx.extra or {}
    return zlib.crc32(f"{ctx.task_id}\x00{extra.get('z')}\x00{extra.get('episode_id')}\x00{ctx.step}".encode())


def snap_to_admissible(action: str, admissible: Sequence[str]) -> str:
    """The visible admissible action closest to ``action`` (itself when it is one or when none is visible).

    Grounding free text in the listed commands is the usual way text-game agents act (e.g. the nearest
    valid action of ALFWorld/ReAct agents); the list is agent-visible, so perturbations that hide or
    pad it still mislead the SLM.

    Example:
        >>> snap_to_admissible("take the coin", ["go east", "take coin", "look"])
        'take coin'
        >>> snap_to_admissible("xyzzy", [])
        'xyzzy'
    """
    if not admissible or not action:
        return action
    return _snap(action, tuple(admissible))


@functools.lru_cache(maxsize=65536)
def _snap(action: str, admissible: tuple[str, ...]) -> str:
    # the K candidates of a step, and the methods of an evaluation, snap the same texts to the same lists
    norm = " ".join(action.lower().split())
    options = {" ".join(a.lower().split()): a for a in admissible}
    if norm in options:
        return options[norm]
    # max() by SequenceMatcher.ratio(), first maximum kept; the cheap upper bounds skip options that cannot win
    matcher, best, best_ratio = difflib.SequenceMatcher(None, norm), admissible[0], -1.0
    for a in admissible:
        matcher.set_seq2(a.lower())
        if matcher.real_quick_ratio() <= best_ratio or matcher.quick_ratio() <= best_ratio:
            continue
        ratio = matcher.ratio()
        if ratio > best_ratio:
            best, best_ratio = a, ratio
    return best


class SLMPolicy(BatchPolicy):
    """Samples ``k`` candidates per context, scores them with ``verifier`` and acts with the best one.

    ``admissible="snap"`` replaces each sampled action by the closest visible admissible action
    (:func:`snap_to_admissible`) before verification; the candidate keeps the log-probs and entropies of the
    text the model generated, so the risk features f_t still describe the model's own uncertainty.

    ``record_tokens=True`` (off by default) attaches a :class:`~r2v_agents.policy.TokenTrace` to each decision the
    SLM acts on: the prompt and completion token ids of the chosen candidate and their log-probs, which the runner
    writes to the step shards for PPO/GRPO-style trainers. The ids are what the model generated, before any
    ``snap``; the sampler must report ids (the transformers sampler does).
    """

    name = "slm"

    def __init__(self, sampler: Sampler, verifier: Verifier | None = None, k: int = 5,
                 prompt_config: PromptConfig = DEFAULT_PROMPT, feature_variant: str = "full",
                 admissible: str = "free", record_tokens: bool = False):
        if k < 1:
            raise ValueError("k must be >= 1")
        if admissible not in ADMISSIBLE_MODES:
            raise UnknownChoiceError("admissible mode", admissible, ADMISSIBLE_MODES)
        self.admissible, self.record_tokens = admissible, record_tokens
        self.sampler, self.verifier, self.k = sampler, verifier, k
        self.prompt_config, self.feature_variant = prompt_config, feature_variant

    def propose(self, contexts: Sequence[Context]) -> list[list[Candidate]]:
        """K scored candidates per context (one sampler call for the whole batch).

        Samplers that accept keys get one per context, naming the decision (task, seed z, episode, step): its
        candidates then do not depend on which other envs share the batch, and a prompt that recurs at another
        step of the same episode is sampled afresh."""
        prompts = [build_prompt(c, self.prompt_config) for c in contexts]
        if getattr(self.sampler, "accepts_keys", False):
            keys = [decision_key(c) for c in contexts]
            batches = self.sampler.sample(prompts, self.k, keys=keys)
        else:
            batches = self.sampler.sample(prompts, self.k)
        if self.admissible == "snap":
            batches = [[replace(c, action=snap_to_admissible(c.action, ctx.admissible_actions or ())) for c in cands]
                       for ctx, cands in zip(contexts, batches)]
        if self.verifier is not None:
            for ctx, cands in zip(contexts, batches):
                for c, s in zip(cands, self.verifier.score_batch(ctx, [c.action for c in cands])):
                    c.verifier_score = clamp(s)
        return batches

    def _trace(self, cand: Candidate) -> TokenTrace:
        if cand.prompt_token_ids is None or cand.token_ids is None or cand.token_logprobs is None:
            raise ValueError(f"record_tokens needs token ids and log-probs; {type(self.sampler).__name__} "
                             "does not report them (use the transformers sampler)")
        return TokenTrace(tuple(cand.prompt_token_ids), tuple(cand.token_ids), tuple(cand.token_logprobs))

    def act_batch(self, contexts, infos):
        out = []
        for ctx, cands in zip(contexts, self.propose(contexts)):
            best = best_candidate(cands)
            feats = compute_features(ctx, cands, variant=self.feature_variant)
            if best is None:  # the model produced no usable action
                # its tokens are still recorded: an RL trainer must see the empty sample to push it down (dropped,
                # it went untrained while the EOS ending every other row made it likelier, up to half the steps)
                spoken = next((c for c in cands if c.token_ids), None)
                out.append(Decision(action=fallback_action(ctx), source="slm", candidates=list(cands),
                                    features=feats, meta={"fallback": True},
                                    tokens=self._trace(spoken) if self.record_tokens and spoken else None))
            else:
                out.append(Decision(action=best.action, source="slm", candidates=list(cands),
                                    verifier_score=best.verifier_score, features=feats,
                                    tokens=self._trace(best) if self.record_tokens else None))
        return out
