"""K-candidate sampling from an OpenAI-compatible completions endpoint (``vllm serve``, llama.cpp, ...).

One GPU box serves candidates to many rollout workers: start ``vllm serve runs/bc/model --port 8000`` and give
the SLM ``OpenAISampler("runs/bc/model", base_url="http://gpu-box:8000/v1")``. Each ``sample`` call sends one
``/v1/completions`` request per chunk of prompts (a list prompt, ``n=k``, ``logprobs=N``, ``stop=["\\n"]``);
the server batches them on the GPU. From each choice's ``logprobs`` (the legacy completions format:
``tokens``, ``token_logprobs``, ``top_logprobs``) the sampler keeps the tokens up to and including the first
one holding a newline (servers differ on whether the stop token is reported), the sampled token's log-prob,
and the entropy over the top-N alternatives plus one bucket for the remaining mass (as
:class:`~r2v_agents.samplers.vllm_sampler.VLLMSampler`). Choices are matched to prompts by ``index``
(prompt ``i``'s candidates are ``i*k .. i*k+k-1``).

A failed request (after the client's retries) raises :class:`~r2v_envs.errors.BackendUnavailableError`:
a rollout with an unreachable SLM must stop, not log fallback actions.

Example:
    >>> lp = {"tokens": [" go", " east", "\\n", "x"], "token_logprobs": [-0.1, -0.2, -0.3, -9.0],
    ...       "top_logprobs": [{" go": -0.1}, {" east": -0.2}, {"\\n": -0.3}, {"x": -9.0}]}
    >>> c = candidate_from_choice(" go east", lp)
    >>> c.action, c.token_logprobs, round(c.logprob, 6)
    ('go east', (-0.1, -0.2, -0.3), -0.6)
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from r2v_agents.policy import Candidate
from r2v_agents.prompts import parse_completion
from r2v_agents.samplers import ChunkedSampler
from r2v_agents.samplers.vllm_sampler import _topk_entropy
from r2v_envs.errors import BackendUnavailableError


def candidate_from_choice(text: str, logprobs: Mapping[str, Any] | None) -> Candidate:
    """A :class:`Candidate` from one completion choice's text and legacy ``logprobs`` object."""
    if not logprobs or not logprobs.get("token_logprobs"):
        return Candidate(action=parse_completion(text))
    tokens = list(logprobs.get("tokens") or [])
    lps = [float(x) if x is not None else float("nan") for x in logprobs["token_logprobs"]]
    tops = list(logprobs.get("top_logprobs") or [None] * len(lps))
    end = next((i + 1 for i, t in enumerate(tokens) if "\n" in t), len(lps))
    lps, tops = lps[:end], tops[:end]
    ents = tuple(_topk_entropy(list(t.values())) if t else float("nan") for t in tops)
    return Candidate(action=parse_completion(text), logprob=math.fsum(lps), token_logprobs=tuple(lps),
                     token_entropies=ents)


class OpenAISampler(ChunkedSampler):
    """Samples K candidates per prompt from ``{base_url}/completions`` with per-token log-probs."""

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None,
                 max_new_tokens: int = 16, temperature: float = 1.0, top_p: float = 1.0, logprobs: int = 5,
                 seed: int | None = None, batch_size: int = 32, timeout_s: float = 60.0, max_retries: int = 2,
                 client: Any = None):
        if temperature <= 0:
            raise ValueError("temperature must be > 0 (K samples need sampling); use k=1 for greedy decoding")
        if not 0 <= logprobs <= 20:
            raise ValueError("logprobs must be in 0..20 (the OpenAI completions limit; vLLM's default cap)")
        self.model, self.max_new_tokens, self.temperature, self.top_p = model, max_new_tokens, temperature, top_p
        self.logprobs, self.seed, self.batch_size = logprobs, seed, batch_size
        if client is None:
            import os

            import openai

            client = openai.OpenAI(base_url=base_url, api_key=api_key or os.environ.get("OPENAI_API_KEY", "unused"),
                                   timeout=timeout_s, max_retries=max_retries)
        self.client = client

    def _sample_chunk(self, prompts: list[str], k: int, keys: list[int] | None = None) -> list[list[Candidate]]:
        import openai

        extra = {} if self.seed is None else {"seed": self.seed}
        try:
            resp = self.client.completions.create(
                model=self.model, prompt=prompts, n=k, max_tokens=self.max_new_tokens, temperature=self.temperature,
                top_p=self.top_p, logprobs=self.logprobs, stop=["\n"], **extra)
        except openai.OpenAIError as e:
            raise BackendUnavailableError(f"completions endpoint for {self.model!r}",
                                          f"check that the server is up ({type(e).__name__}: {e})") from e
        result: list[list[Candidate]] = [[] for _ in prompts]
        for choice in sorted(resp.choices, key=lambda c: c.index):
            p = choice.index // k
            if p >= len(prompts):
                raise ValueError(f"completions response has choice index {choice.index} for {len(prompts)} "
                                 f"prompts x n={k}")
            lp = choice.logprobs.model_dump() if choice.logprobs is not None else None
            result[p].append(candidate_from_choice(choice.text or "", lp))
        if any(len(c) != k for c in result):
            raise ValueError(f"completions response has {[len(c) for c in result]} choices per prompt, "
                             f"expected n={k}")
        return result
