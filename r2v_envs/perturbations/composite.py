"""The composite perturbation (the paper's P_composite) and the parser of perturbation specifications.

A specification is ``None`` (clean), ``"composite"``, one name, a list of names, or a mapping
name -> parameters (``None`` or ``{}`` for the defaults). Names: ``flaky``, ``partial``, ``injection``,
``distractor`` (long aliases accepted). Wrappers are stacked in the order given; ``"composite"`` is
flaky -> partial -> distractor -> injection, i.e. a tool fails first, then the agent sees part of what came
back, padded with distractors and laced with an injected directive.

Example:
    >>> parse_perturbations("composite")
    [('flaky', {}), ('partial', {}), ('distractor', {}), ('injection', {})]
    >>> parse_perturbations({"partial_observability": {"prob": 0.5}})
    [('partial', {'prob': 0.5})]
    >>> parse_perturbations("flaky_tool")
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown perturbation 'flaky_tool'; did you mean 'flaky_tools'? ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import gymnasium as gym

from r2v_envs.errors import PerturbationConfigError, UnknownChoiceError
from r2v_envs.perturbations.distractor import AddDistractors
from r2v_envs.perturbations.flaky import FlakyToolOutput
from r2v_envs.perturbations.injection import InjectPrompt
from r2v_envs.perturbations.partial import DropObservationLines

WRAPPERS: dict[str, type] = {
    "flaky": FlakyToolOutput,
    "partial": DropObservationLines,
    "distractor": AddDistractors,
    "injection": InjectPrompt,
}
ALIASES = {
    "flaky_tools": "flaky", "tool_flakiness": "flaky", "partial_observability": "partial",
    "distractors": "distractor", "prompt_injection": "injection",
}
COMPOSITE: tuple[str, ...] = ("flaky", "partial", "distractor", "injection")
CLEAN_NAMES = ("none", "clean")


def canonical_name(name: str) -> str:
    name = ALIASES.get(name, name)
    if name not in WRAPPERS:
        raise UnknownChoiceError("perturbation", name, [*WRAPPERS, *ALIASES, "composite", *CLEAN_NAMES])
    return name


def parse_perturbations(spec: Any) -> list[tuple[str, dict[str, Any]]]:
    """Normalise a perturbation specification to an ordered list of (name, parameters)."""
    if spec is None or (isinstance(spec, str) and spec in CLEAN_NAMES):
        return []
    if isinstance(spec, str):
        names = COMPOSITE if spec == "composite" else (canonical_name(spec),)
        return [(n, {}) for n in names]
    if isinstance(spec, Mapping):
        out = []
        for name, params in spec.items():
            if params is not None and not isinstance(params, Mapping):
                raise PerturbationConfigError(f"parameters of {name!r} must be a mapping, got {params!r}")
            if name == "composite":
                out += [(n, dict(params or {})) for n in COMPOSITE]
            else:
                out.append((canonical_name(name), dict(params or {})))
        return out
    if isinstance(spec, (list, tuple)):
        out = []
        for item in spec:
            out += parse_perturbations(item)
        return out
    raise PerturbationConfigError(f"cannot read perturbation spec {spec!r}: use None, a name, a list or a dict")


def apply_perturbations(env: gym.Env, spec: Any, seed: int | None = None) -> gym.Env:
    """Stack the wrappers of ``spec`` on ``env``; parameter errors become ``PerturbationConfigError``."""
    for name, params in parse_perturbations(spec):
        try:
            env = WRAPPERS[name](env, **{"seed": seed, **params})
        except TypeError as exc:  # an unknown or missing parameter name
            raise PerturbationConfigError(f"bad parameters for {name!r}: {exc}") from exc
    return env
