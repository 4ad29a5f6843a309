"""Perturbation wrappers shared by every benchmark (Sec. 5.1, Appendix C).

Each wrapper targets named text channels (observation, goal, tool_output, terminal, admissible_actions),
draws from ``(z, episode_index, step)`` only, records each change in ``info["perturbations"]`` and its own
arguments in ``env.spec``.
"""

from r2v_envs.perturbations.base import CHANNELS, TextPerturbation
from r2v_envs.perturbations.composite import (
    COMPOSITE,
    WRAPPERS,
    apply_perturbations,
    parse_perturbations,
)
from r2v_envs.perturbations.distractor import AddDistractors
from r2v_envs.perturbations.flaky import FlakyToolOutput
from r2v_envs.perturbations.injection import InjectPrompt
from r2v_envs.perturbations.partial import DropObservationLines

__all__ = [
    "CHANNELS", "COMPOSITE", "WRAPPERS", "AddDistractors", "DropObservationLines", "FlakyToolOutput", "InjectPrompt",
    "TextPerturbation", "apply_perturbations", "parse_perturbations",
]
