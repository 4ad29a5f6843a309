"""Samplers: K candidate actions per prompt with token log-probs and entropies, behind one interface.

Backends: :class:`~r2v_agents.samplers.transformers_sampler.TransformersSampler` (CPU or GPU) and
:class:`~r2v_agents.samplers.vllm_sampler.VLLMSampler` (optional ``vllm`` extra, GPU only). Both cut each
candidate at its first newline or EOS and return :class:`~r2v_agents.policy.Candidate` objects whose
``token_logprobs``/``token_entropies`` cover the generated tokens up to and including that stop token.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, runtime_checkable

from r2v_agents.policy import Candidate


@runtime_checkable
class Sampler(Protocol):
    def sample(self, prompts: Sequence[str], k: int) -> list[list[Candidate]]:
        """``k`` candidates for each prompt (prompts come from :func:`r2v_agents.prompts.build_prompt`)."""
        ...


__all__ = ["Sampler"]
