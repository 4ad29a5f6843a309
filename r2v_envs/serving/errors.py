"""Typed errors of ``r2v serve``, and how they cross the wire.

OpenEnv's WebSocket protocol answers a failed request with ``{"type": "error", "data": {"message", "code"}}``
(``code``: ``VALIDATION_ERROR``, ``EXECUTION_ERROR``, ``INVALID_JSON``, ...). The server keeps the r2v error's kind
in the message as ``"[Kind] text"``, so a client knows *what* went wrong (an episode that is over, an unknown task
id) and not only *where* (validation or execution); :func:`parse_server_error` reads it back into a
:class:`RemoteEnvError`.

Example:
    >>> str(ServedError.wrap(EpisodeOverError("reset first")))
    '[EpisodeOverError] reset first'
    >>> e = parse_server_error("Server error: [EpisodeOverError] reset first (code: EXECUTION_ERROR)")
    >>> e.kind, e.code, e.detail
    ('EpisodeOverError', 'EXECUTION_ERROR', 'reset first')
    >>> parse_server_error("Server error: Invalid message (code: VALIDATION_ERROR)").kind
    'ValidationError'
"""

from __future__ import annotations

import re

from r2v_envs.errors import R2VError


class ServingError(R2VError):
    """Base class of the errors a served env session raises on purpose."""


class BadRequestError(ServingError, ValueError):
    """A request whose arguments are not what the endpoint takes (an unknown reset option, a seed that is not an
    int)."""


class ResetNeededError(ServingError, RuntimeError):
    """A step before the session's first reset."""


class EpisodeOverError(ServingError, RuntimeError):
    """A step after the episode ended (terminated or truncated): reset first."""


class SessionClosedError(ServingError, RuntimeError):
    """A request on a session whose env was freed (idle too long, or the server shutting down)."""


class ServedError(ServingError):
    """What the server raises for any failure of an env call: ``"[Kind] message"``, ``Kind`` the original class."""

    def __init__(self, kind: str, message: str):
        self.kind, self.detail = kind, message
        super().__init__(f"[{kind}] {message}")

    @classmethod
    def wrap(cls, exc: BaseException) -> ServedError:
        return exc if isinstance(exc, ServedError) else cls(type(exc).__name__, str(exc))


class RemoteEnvError(R2VError, RuntimeError):
    """An error answer of an ``r2v serve`` server, as the client sees it.

    ``kind`` is the server-side error class (``EpisodeOverError``, ``UnknownChoiceError``, ``ValidationError`` for a
    request OpenEnv's types rejected...), ``code`` OpenEnv's error code, ``detail`` the message.
    """

    def __init__(self, kind: str, code: str, detail: str):
        self.kind, self.code, self.detail = kind, code, detail
        super().__init__(f"{kind} ({code}): {detail}")


_SERVER_ERROR = re.compile(r"^Server error: (?:\[(?P<kind>\w+)\] )?(?P<detail>.*) \(code: (?P<code>\w+)\)$", re.DOTALL)
_KIND_OF_CODE = {"VALIDATION_ERROR": "ValidationError", "INVALID_JSON": "InvalidJSON", "UNKNOWN_TYPE": "UnknownType",
                 "CAPACITY_REACHED": "CapacityReached", "FACTORY_ERROR": "FactoryError"}


def parse_server_error(message: str) -> RemoteEnvError:
    """The :class:`RemoteEnvError` of the message OpenEnv's client raises for an error answer."""
    m = _SERVER_ERROR.match(message)
    if m is None:
        return RemoteEnvError("ServerError", "UNKNOWN", message)
    code = m.group("code")
    return RemoteEnvError(m.group("kind") or _KIND_OF_CODE.get(code, "ServerError"), code, m.group("detail"))
