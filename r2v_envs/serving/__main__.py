"""``python -m r2v_envs.serving``: ``r2v serve`` without the training package (what the container runs)."""

from __future__ import annotations

import sys

import tyro

from r2v_envs.exit_status import run_console
from r2v_envs.resolve import require_server_stack
from r2v_envs.serving.config import ServeConfig


def main(argv: list[str] | None = None) -> None:
    cfg = tyro.cli(ServeConfig, args=argv, prog="python -m r2v_envs.serving")
    require_server_stack()
    from r2v_envs.serving.app import serve

    serve(cfg)


if __name__ == "__main__":
    sys.exit(run_console(main, "python -m r2v_envs.serving"))
