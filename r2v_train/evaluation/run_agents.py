"""Agents of a training run directory for ``r2v eval``: ``slm:RUN_DIR`` (the distilled SLM alone) and
``r2v:RUN_DIR`` (the routed R2V agent), registered with :mod:`r2v_eval.agents` when this module is imported (the
``r2v`` command does), so the evaluation package itself never imports training code.
"""

from __future__ import annotations

import functools
import json
import os

from r2v_agents.policy import BatchPolicy
from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import MLPRouter
from r2v_envs.errors import BackendUnavailableError
from r2v_eval.agents import register_run_dir_agent
from r2v_train.chain.stages import MANIFEST
from r2v_train.pipeline import agents_from_run, load_config


def _run_dir_agent(kind: str, run_dir: str) -> BatchPolicy:
    """The SLM alone (``slm``) or the routed R2V agent (``r2v``) of a training run directory."""

    path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(path):
        raise BackendUnavailableError(f"{kind}:{run_dir}", f"no {MANIFEST} there: give a `r2v train` run directory")
    with open(path) as fh:
        chain = load_config({"chain": json.load(fh)["config"]}).chain
    agents = agents_from_run(chain, run_dir)
    if kind == "slm":
        return agents.slm()

    if not agents.router_path or not os.path.exists(agents.router_path):
        raise BackendUnavailableError(f"r2v:{run_dir}", "the run has no trained router yet (r2v router-train)")
    return RoutedPolicy(agents.slm(), agents.teacher(), MLPRouter.load(agents.router_path))


for _kind in ("slm", "r2v"):
    register_run_dir_agent(_kind, functools.partial(_run_dir_agent, _kind))
