"""Process verifiers V(x, a) in [0, 1] (Appendix C): one per benchmark behind :class:`Verifier`.

Example:
    >>> type(verifier_for("R2V/TextWorld-v0")).__name__, type(verifier_for("terminalbench")).__name__
    ('TextWorldVerifier', 'TerminalVerifier')
"""

from __future__ import annotations

import importlib

from r2v_agents.verifiers.base import Verifier
from r2v_envs.errors import UnknownChoiceError

# benchmark -> "module:class" (imported on use: the HumanEval verifier pulls in the sandbox)
VERIFIERS = {
    "textworld": "r2v_agents.verifiers.textworld:TextWorldVerifier",
    "alfworld": "r2v_agents.verifiers.alfworld:ALFWorldVerifier",
    "babyai": "r2v_agents.verifiers.babyai:BabyAIVerifier",
    "humaneval": "r2v_agents.verifiers.humaneval:HumanEvalVerifier",
    "terminalbench": "r2v_agents.verifiers.terminal:TerminalVerifier",
    "scienceworld": "r2v_agents.verifiers.scienceworld:ScienceWorldVerifier",
    "scripted": "r2v_agents.verifiers.textworld:TextWorldVerifier",
}


def verifier_for(benchmark: str) -> Verifier:
    """The verifier of a benchmark, named either by its key or by its env id (``R2V/ALFWorld-v0``)."""
    key = benchmark.split("/")[-1].split("-")[0].lower()
    if key not in VERIFIERS:
        raise UnknownChoiceError("benchmark", benchmark, VERIFIERS)
    module, cls = VERIFIERS[key].split(":")
    return getattr(importlib.import_module(module), cls)()


__all__ = ["VERIFIERS", "Verifier", "verifier_for"]
