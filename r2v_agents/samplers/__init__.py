"""Samplers: K candidate actions per prompt with token log-probs and entropies, behind one interface.

Backends: :class:`~r2v_agents.samplers.transformers_sampler.TransformersSampler` (CPU or GPU) and
:class:`~r2v_agents.samplers.vllm_sampler.VLLMSampler` (optional ``vllm`` extra, GPU only). Both cut each
candidate at its first newline or EOS and return :class:`~r2v_agents.policy.Candidate` objects whose
``token_logprobs``/``token_entropies`` cover the generated tokens up to and including that stop token.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

from r2v_agents.policy import Candidate


@runtime_checkable
class Sampler(Protocol):
    def sample(self, prompts: Sequence[str], k: int) -> list[list[Candidate]]:
        """``k`` candidates for each prompt (prompts come from :func:`r2v_agents.prompts.build_prompt`)."""
        ...


def stream_seed(seed: int | None, key: int | None, prompt: str) -> int:
    """The seed of one prompt's sampling stream: a function of the sampler's seed, the decision key and the
    prompt text only, so a prompt's candidates do not depend on the batch around it.

    Example:
        >>> stream_seed(1, 5, "Goal: x") == stream_seed(1, 5, "Goal: x") != stream_seed(1, 6, "Goal: x")
        True
    """
    return (seed or 0) * 2**32 + zlib.crc32(prompt.encode(), zlib.crc32(str(0 if key is None else key).encode()))


def check_keys(prompts: Sequence[str], keys: Sequence[int] | None) -> None:
    """Raise ValueError unless ``keys`` is None or names one decision per prompt."""
    if keys is not None and len(keys) != len(prompts):
        raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")


class ChunkedSampler:
    """Base of samplers that work on at most ``batch_size`` prompts at a time: :meth:`sample` splits the prompts
    and subclasses implement ``_sample_chunk(prompts, k, keys)``.

    ``keys`` (one int per prompt, optional) name the decision each prompt belongs to; a sampler with
    ``accepts_keys = True`` draws a prompt's samples from a stream seeded by its key and text alone, so they do not
    depend on which other prompts share the batch (the runner batches whichever envs answer first).
    """

    batch_size: int = 8
    accepts_keys: bool = False

    def sample(self, prompts: Sequence[str], k: int = 5, keys: Sequence[int] | None = None, **options: Any
               ) -> list[list[Candidate]]:
        """``options`` are the backend's per-call settings (:class:`TransformersSampler`: ``max_new_tokens``,
        ``stop``), handed to each chunk."""
        check_keys(prompts, keys)
        out: list[list[Candidate]] = []
        for i in range(0, len(prompts), self.batch_size):
            chunk_keys = None if keys is None else list(keys[i:i + self.batch_size])
            out.extend(self._sample_chunk(list(prompts[i:i + self.batch_size]), k, chunk_keys, **options))
        return out

    def _sample_chunk(self, prompts: list[str], k: int, keys: list[int] | None = None, **options: Any
                      ) -> list[list[Candidate]]:
        raise NotImplementedError


__all__ = ["ChunkedSampler", "Sampler", "check_keys", "stream_seed"]
