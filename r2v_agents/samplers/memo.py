"""Sample each decision once: a memo over a keyed sampler, shared by every policy of an evaluation.

A sampler with ``accepts_keys = True`` draws a prompt's candidates from a stream seeded by the decision key and the
prompt text alone, so its output is a function of (key, prompt, k). The evaluation runs several routed methods over
the same (task, z, episode): until a method's trajectory leaves the SLM-only one, it asks for exactly the same
decisions (every routed method samples the SLM at every step, for the risk features), and about half of all
requests repeat one made before. :class:`MemoSampler` answers those from memory; what it returns is what the
wrapped sampler would have drawn.

Example:
    >>> from r2v_agents.policy import Candidate
    >>> class Counting:
    ...     accepts_keys, calls = True, 0
    ...     def sample(self, prompts, k, keys=None):
    ...         Counting.calls += len(prompts)
    ...         return [[Candidate(action=f"{p}/{key}/{i}") for i in range(k)] for p, key in zip(prompts, keys)]
    >>> memo = MemoSampler(Counting())
    >>> a = memo.sample(["look", "go east"], 2, keys=[1, 2])
    >>> b = memo.sample(["go east", "look", "look"], 2, keys=[2, 1, 3])
    >>> [c.action for c in b[0]], Counting.calls, memo.hits
    (['go east/2/0', 'go east/2/1'], 3, 2)
    >>> b[0][0] is a[1][0]  # copies: callers may set verifier scores on them
    False
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from r2v_agents.policy import Candidate
from r2v_agents.samplers import check_keys


class MemoSampler:
    """Wraps a sampler that accepts keys; keeps the candidates of the last ``max_entries`` (key, prompt, k).

    Calls without keys (and samplers whose draws do not follow the key) pass straight through: without a key the
    same prompt at two decisions must be sampled afresh."""

    def __init__(self, sampler: Any, max_entries: int = 100_000):
        if max_entries < 1:
            raise ValueError("max_entries must be >= 1")
        self.sampler, self.max_entries = sampler, max_entries
        self.accepts_keys = bool(getattr(sampler, "accepts_keys", False))
        self._memo: OrderedDict[tuple[int, str, int], list[Candidate]] = OrderedDict()
        self.hits = self.misses = 0

    def sample(self, prompts: Sequence[str], k: int = 5, keys: Sequence[int] | None = None
               ) -> list[list[Candidate]]:
        if keys is None or not self.accepts_keys:
            return self.sampler.sample(prompts, k) if keys is None else self.sampler.sample(prompts, k, keys=keys)
        check_keys(prompts, keys)
        ids = [(int(key), p, int(k)) for key, p in zip(keys, prompts)]
        todo = list(dict.fromkeys(i for i in ids if i not in self._memo))  # unique misses, in order
        if todo:
            drawn = self.sampler.sample([p for _, p, _ in todo], k, keys=[key for key, _, _ in todo])
            for i, cands in zip(todo, drawn):
                self._memo[i] = cands
        self.misses += len(todo)
        self.hits += len(ids) - len(todo)
        out = []
        for i in ids:
            self._memo.move_to_end(i)
            out.append([replace(c) for c in self._memo[i]])
        while len(self._memo) > self.max_entries:
            self._memo.popitem(last=False)
        return out

    def __getattr__(self, name: str) -> Any:  # batch_size, seed, model, ... of the wrapped sampler
        if name == "sampler":
            raise AttributeError(name)
        return getattr(self.sampler, name)


__all__ = ["MemoSampler"]
