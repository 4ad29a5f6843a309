"""K-candidate sampling with vLLM (optional ``vllm`` extra, GPU only; never imported by the tests).

vLLM returns the sampled token's log-prob and the top-``logprobs`` alternatives per position; the token
entropy is computed over those alternatives plus one bucket holding the remaining probability mass, a lower
bound of the full-vocabulary entropy that is exact when the tail mass is ~0.

Example:
    >>> _topk_entropy([0.0])          # all mass on one token
    0.0
    >>> round(_topk_entropy([math.log(0.5), math.log(0.5)]), 4)
    0.6931
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from r2v_agents.policy import Candidate
from r2v_agents.prompts import parse_completion
from r2v_agents.samplers import check_keys, stream_seed
from r2v_envs.errors import BackendUnavailableError


def _topk_entropy(logprobs: Sequence[float]) -> float:
    probs = [math.exp(lp) for lp in logprobs]
    rest = max(0.0, 1.0 - sum(probs))
    return max(0.0, -sum(p * math.log(p) for p in [*probs, rest] if p > 0))


class VLLMSampler:
    """``vllm.LLM`` + ``SamplingParams(n=K, logprobs=...)``, stopping at the first newline.

    Each prompt is its own request with its own ``SamplingParams.seed`` (:func:`~r2v_agents.samplers.stream_seed`
    of the sampler's seed, the decision key and the prompt): like the transformers sampler, a prompt's candidates do
    not depend on the batch it came in, and an evaluation can memoise them
    (:class:`~r2v_agents.samplers.memo.MemoSampler`). ``llm`` (an engine with vLLM's ``generate``) and
    ``params_cls`` replace ``vllm.LLM(model)`` and ``vllm.SamplingParams``."""

    accepts_keys = True

    def __init__(self, model: str, *, max_new_tokens: int = 16, temperature: float = 1.0, top_p: float = 1.0,
                 logprobs: int = 20, seed: int = 0, llm: Any = None, params_cls: Any = None, **llm_kwargs: Any):
        if llm is None or params_cls is None:
            try:
                from vllm import LLM, SamplingParams
            except ImportError as e:
                raise BackendUnavailableError("vllm", "pip install 'r2v[vllm]' on a machine with a GPU") from e
            llm = LLM(model=model, seed=seed, **llm_kwargs) if llm is None else llm
            params_cls = SamplingParams if params_cls is None else params_cls
        self.max_new_tokens, self.temperature, self.top_p, self.logprobs = max_new_tokens, temperature, top_p, logprobs
        self.seed, self.llm, self.params_cls = seed, llm, params_cls

    def sample(self, prompts: Sequence[str], k: int = 5, keys: Sequence[int] | None = None
               ) -> list[list[Candidate]]:
        check_keys(prompts, keys)
        params = [self.params_cls(n=k, temperature=self.temperature, top_p=self.top_p, max_tokens=self.max_new_tokens,
                                  logprobs=self.logprobs, stop=["\n"], include_stop_str_in_output=False,
                                  seed=stream_seed(self.seed, None if keys is None else keys[i], p) % 2**63)
                  for i, p in enumerate(prompts)]
        result = []
        for request in self.llm.generate(list(prompts), params, use_tqdm=False):
            cands = []
            for comp in request.outputs:
                lps, ents = [], []
                for tok, top in zip(comp.token_ids, comp.logprobs or []):
                    lps.append(float(top[tok].logprob))
                    ents.append(_topk_entropy([lp.logprob for lp in top.values()]))
                total = comp.cumulative_logprob if comp.cumulative_logprob is not None else sum(lps)
                cands.append(Candidate(action=parse_completion(comp.text), logprob=float(total),
                                       token_logprobs=tuple(lps), token_entropies=tuple(ents)))
            result.append(cands)
        return result
