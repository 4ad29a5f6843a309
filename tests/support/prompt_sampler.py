"""A stand-in for a model's sampler that reads the admissible actions in the prompt (a weak, noisy policy)."""

from __future__ import annotations

import zlib

import numpy as np

from r2v_agents.policy import Candidate


class PromptSampler:
    """Test double for a model: K candidates drawn from the admissible actions listed in the prompt, with
    made-up token statistics, a deterministic function of the prompt (a weak, noisy policy)."""

    def sample(self, prompts, k):
        out = []
        for p in prompts:
            line = next((ln for ln in p.splitlines() if ln.startswith("Admissible actions: ")), "")
            acts = line.removeprefix("Admissible actions: ").split(" | ") if line else ["look"]
            rng = np.random.default_rng(zlib.crc32(p.encode()))
            picks = rng.choice(acts, size=k)
            out.append([Candidate(str(a), -float(rng.random()), (-float(rng.random()),), (float(rng.random()),))
                        for a in picks])
        return out
