"""The verifier interface: V(x, a) in [0, 1] from agent-visible evidence only (Appendix C).

Example:
    >>> from r2v_agents.context import Context
    >>> class Length(Verifier):
    ...     name = "length"
    ...     def score(self, ctx, action):
    ...         return min(1.0, len(action) / 10)
    >>> Length().score_batch(Context.start("g", "o", {}), ["go", "take coin"])
    [0.2, 0.9]
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from r2v_agents.context import Context


class Verifier(ABC):
    """A lightweight CPU process verifier. Subclasses implement :meth:`score`; batch scoring may be overridden
    for speed. Scores must lie in [0, 1] and depend only on the context and the action (no oracle keys)."""

    name: ClassVar[str] = "verifier"

    @abstractmethod
    def score(self, ctx: Context, action: str) -> float:
        """Score one candidate action in context."""

    def score_batch(self, ctx: Context, actions: Sequence[str]) -> list[float]:
        return [self.score(ctx, a) for a in actions]


def clamp(x: float, lo: float = 0.0, hi: float = 1.0) -> float:
    return lo if x < lo else hi if x > hi else float(x)
