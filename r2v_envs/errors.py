"""Typed errors for r2v, each with a hint of the valid choices.

Example:
    >>> from r2v_envs.errors import UnknownChoiceError
    >>> raise UnknownChoiceError("split", "tset", ["train", "valid", "test"])
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown split 'tset'; did you mean 'test'? (valid: train, valid, test)
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


class R2VError(Exception):
    """Base class of every error r2v raises on purpose."""


class UnknownChoiceError(R2VError, ValueError):
    """A name (split, task, perturbation, ...) that is not one of the valid choices."""

    def __init__(self, kind: str, value: object, choices: Iterable[str]):
        self.kind, self.value, self.choices = kind, value, list(choices)
        close = difflib.get_close_matches(str(value), self.choices, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        shown = ", ".join(self.choices[:12]) + (", ..." if len(self.choices) > 12 else "")
        super().__init__(f"unknown {kind} {value!r}{hint} (valid: {shown})")


class InvalidActionError(R2VError, TypeError):
    """An action that is not text at all (e.g. None or bytes). Bad *text* never raises: it gets feedback."""


class PerturbationConfigError(R2VError, ValueError):
    """A perturbation specification that cannot be parsed or has out-of-range intensities."""


class EnvSpecError(R2VError, ValueError):
    """An env spec (``--envs``, :func:`r2v_envs.resolve.open_env`) that names no env: not a string, or a
    ``module:callable`` that returns something other than a ``gymnasium.Env``."""


class BackendUnavailableError(R2VError, ImportError):
    """An optional backend (textworld, evalplus, alfworld, vllm, ...) is not installed or has no data."""

    def __init__(self, backend: str, how: str):
        self.backend = backend
        super().__init__(f"the {backend!r} backend is unavailable: {how}")


class GameGenerationError(R2VError, RuntimeError):
    """A benchmark game could not be generated or compiled."""


class TaskEnvironmentError(R2VError, RuntimeError):
    """A task's execution environment (a container image, a sandbox) could not be prepared."""


class ServedEnvMismatchError(R2VError, ValueError):
    """An ``r2v serve`` server that does not build the env asked for: its ``--env-kwargs`` (fixed at launch) differ
    from the arguments the caller wants (another perturbation setting, suite, step cap...)."""


class ServerUnavailableError(R2VError, ConnectionError):
    """An ``r2v serve`` URL whose server cannot be reached or does not answer as one (wrong token, no ``/r2v/info``)."""
