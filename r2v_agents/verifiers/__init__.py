"""Process verifiers V(x, a) in [0, 1] (Appendix C): one per benchmark behind :class:`Verifier`."""

from r2v_agents.verifiers.base import Verifier

__all__ = ["Verifier"]
