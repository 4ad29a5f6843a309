"""OpenEnv's names that r2v's server and client use, imported once without OpenEnv's web UI.

``openenv.core`` imports ``openenv.core.env_server``, whose ``__init__`` imports its Gradio web interface. Gradio
took 6.1 s of the 7.9 s that importing r2v's server cost (``python -X importtime``, 2-core machine). r2v serves no
web UI, and OpenEnv treats Gradio as optional (``except ModuleNotFoundError`` around that import), so the first
import here runs with Gradio marked absent: importing the server and the client together took 10.4-11.3 s before
and 3.9-4.0 s after, on every ``r2v serve`` start and in every client process (the env workers behind a server do
not import OpenEnv at all: :mod:`r2v_envs.serving.jsonvalues`). A process that imported Gradio before is left as
it is (OpenEnv then loads its web interface as usual); Gradio stays importable afterwards.

The serving modules import OpenEnv only through here, so the order of imports cannot undo it.
"""

from __future__ import annotations

import sys


def _import_env_server_without_gradio() -> None:
    absent = "gradio" not in sys.modules
    if absent:
        sys.modules["gradio"] = None  # type: ignore[assignment]  # `import gradio` raises ModuleNotFoundError
    try:
        import openenv.core.env_server  # noqa: F401
    finally:
        if absent and sys.modules.get("gradio", 0) is None:
            del sys.modules["gradio"]


_import_env_server_without_gradio()

from openenv.core.client_types import StepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from openenv.core.env_server.http_server import create_fastapi_app  # noqa: E402
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.types import (  # noqa: E402
    Action,
    ConcurrencyConfig,
    EnvironmentMetadata,
    Observation,
    State,
)

__all__ = ["Action", "ConcurrencyConfig", "EnvClient", "Environment", "EnvironmentMetadata", "Observation", "State",
           "StepResult", "create_fastapi_app"]
