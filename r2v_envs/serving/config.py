"""The settings of ``r2v serve`` (one dataclass: the command's flags are its fields).

Example:
    >>> cfg = ServeConfig(env="R2V/Scripted-v0", env_kwargs='{"task_id": "scripted-1"}')
    >>> cfg.kwargs(), cfg.host
    ({'task_id': 'scripted-1'}, '127.0.0.1')
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any

from r2v_envs.serving.errors import BadRequestError

TOKEN_ENV = "R2V_SERVE_TOKEN"
"""environment variable holding the bearer token when ``--token`` is not given (clients read it too)"""


@dataclass
class ServeConfig:
    """Serve one registered r2v env id over OpenEnv's protocol: one env instance per WebSocket session."""

    env: str = "R2V/TextWorld-v0"
    """registered env id (any id that gym.make takes)"""
    env_kwargs: str = "{}"
    """JSON object of constructor arguments, as in gym.make (perturbations, seed, split, task_id, suite...)"""
    host: str = "127.0.0.1"
    """interface to bind (the default is this machine only; 0.0.0.0 exposes the envs to the network)"""
    port: int = 8000
    """TCP port (0: any free port, printed at start)"""
    max_sessions: int = 64
    """concurrent sessions (each holds one env); a session beyond it is refused with CAPACITY_REACHED"""
    idle_timeout_s: float = 600.0
    """a session idle this long is reaped and its env freed (checked every max(timeout/4, 5) s)"""
    oracle: bool = False
    """also serve the oracle info keys (expert_action, won, lost, score), as r2v eval gives them to the oracle agent"""
    token: str | None = None
    """bearer token every request must carry (default: $R2V_SERVE_TOKEN; unset: no token)"""
    max_message_mb: float = 4.0
    """largest WebSocket message the server reads; a bigger one closes that connection only"""
    check_env: bool = True
    """build one env before listening, so a bad id or argument fails at start rather than per session"""
    workers: int = 0
    """env worker processes the sessions' envs are spread over (engines are not thread-safe; 0: one per core)"""

    def kwargs(self) -> dict[str, Any]:
        try:
            value = json.loads(self.env_kwargs or "{}")
        except json.JSONDecodeError as e:
            raise BadRequestError(f"--env-kwargs is not JSON: {e}") from None
        if not isinstance(value, dict):
            raise BadRequestError(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
        return value

    def worker_count(self) -> int:
        if self.workers < 0:
            raise BadRequestError(f"--workers must be >= 0, got {self.workers}")
        return self.workers or max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                   else (os.cpu_count() or 1))

    def bearer_token(self) -> str | None:
        return self.token if self.token is not None else (os.environ.get(TOKEN_ENV) or None)
