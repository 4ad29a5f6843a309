"""The agents of a training run directory: the evaluation's parts (:class:`Agents`) and the ``slm:RUN_DIR`` /
``r2v:RUN_DIR`` specs of ``r2v eval``.

``slm:RUN_DIR`` is the distilled SLM alone (the deployed SLM-only agent: K candidates, the verifier's pick),
``r2v:RUN_DIR`` the routed R2V agent. ``slm:RUN_DIR?k=1`` is the policy itself: one sample per step at the run's
temperature, no verifier (the distribution RL trains); ``slm:RUN_DIR?greedy=1`` its most likely action per step
(:func:`policy_options`). ``r2v_eval`` finds them through
the ``r2v.agents`` entry points of ``pyproject.toml`` (:func:`slm_agent`, :func:`r2v_agent`), so the evaluation
package never imports training code and ``python -m r2v_eval`` accepts the same specs as ``r2v eval``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

from r2v_agents.policy import BatchPolicy, parse_run_spec
from r2v_agents.prompts import action_style
from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import MLPRouter
from r2v_agents.samplers.memo import MemoSampler
from r2v_envs.errors import BackendUnavailableError
from r2v_train.chain.collect import RouterDataConfig, make_sampler, make_teacher, slm_policy
from r2v_train.chain.dpo import dpo_stage
from r2v_train.config import load_config
from r2v_train.evaluation.methods import Agents
from r2v_train.run_dir import MANIFEST, slm_model, stage_paths


def agents_from_run(chain: Any, run_dir: str | os.PathLike) -> Agents:
    """The evaluation's parts from a chain run directory: its SLM (the RL-tuned one of an ``r2v rl`` run, else
    DPO, else BC), the teacher, the router and the validation router rows."""

    p = stage_paths(run_dir)
    model = slm_model(run_dir)
    alone, _ = policy_options(chain.router_data, {"k": "1"})
    return Agents(slm=shared_slm(model, chain.router_data, chain.env.env_id),
                  teacher=lambda: make_teacher(chain.teacher, chain.env.env_id),
                  router_path=p["router"], valid_router_dir=p["router_data_valid"],
                  policy=shared_slm(model, alone, chain.env.env_id, verifier=False))


def shared_slm(model_dir: str, cfg: Any, env_id: str, verifier: bool = True) -> Callable[[], Any]:
    """A factory of fresh SLM policies over one sampler, loaded on first use and memoised
    (:class:`r2v_agents.samplers.memo.MemoSampler`): the methods of an evaluation share the SLM's draws for the
    decisions they have in common instead of sampling them again (the draws are a function of the decision).
    ``verifier=False`` gives the policy alone (:func:`r2v_train.chain.collect.slm_policy`)."""

    @functools.cache
    def sampler() -> Any:
        return MemoSampler(make_sampler(model_dir, cfg, action_style(env_id)))

    return lambda: slm_policy(model_dir, cfg, env_id, sampler=sampler(), verifier=verifier)


def dpo_retrainer(chain: Any, run_dir: str | os.PathLike):
    """``retrain(lam, out_dir) -> SLM factory`` for the lambda_cons sweep: the chain's DPO stage from the run's BC
    model and preference pairs with ``consistency_coef = lam``."""

    p = stage_paths(run_dir)

    def retrain(lam: float, out_dir: str):
        out = dpo_stage(dataclasses.replace(chain.dpo, consistency_coef=lam), p["bc_model"], p["pairs"], out_dir)
        return shared_slm(out["model"], chain.router_data, chain.env.env_id)
    return retrain



POLICY_OPTIONS = ("k", "greedy", "temperature")
TRUE = ("1", "true", "yes", "on")


def policy_options(cfg: RouterDataConfig, opts: Mapping[str, str]) -> tuple[RouterDataConfig, bool]:
    """The SLM's sampling config under a spec's options, and whether the benchmark's verifier picks among its
    candidates (only when K > 1: one candidate has nothing to pick from, so ``k=1`` is the policy alone).

    ``k``: candidates per step; ``temperature``: sampling temperature (default: the run's, the one BC/DPO trained and
    RL samples at); ``greedy=1``: k = 1 at temperature 0, the policy's most likely action.

    Example:
        >>> cfg, verified = policy_options(RouterDataConfig(k=5, temperature=1.0), {"k": "1"})
        >>> cfg.k, cfg.temperature, verified
        (1, 1.0, False)
        >>> cfg, verified = policy_options(RouterDataConfig(k=5), {"greedy": "1"})
        >>> cfg.k, cfg.temperature, verified
        (1, 0.0, False)
    """
    k = int(opts.get("k", cfg.k))
    temperature = float(opts.get("temperature", cfg.temperature))
    if opts.get("greedy", "0").lower() in TRUE:
        if k != 1 and "k" in opts:
            raise ValueError(f"greedy decoding plays one action per step: k={k} candidates would all be the same")
        k, temperature = 1, 0.0
    if k < 1 or temperature < 0:
        raise ValueError(f"slm: needs k >= 1 and temperature >= 0, got k={k}, temperature={temperature}")
    return dataclasses.replace(cfg, k=k, temperature=temperature), k > 1


def run_dir_agent(kind: str, spec: str) -> BatchPolicy:
    """The SLM alone (``slm``, with the options of :func:`policy_options`) or the routed R2V agent (``r2v``) of a
    training run directory."""

    run_dir, opts = parse_run_spec(spec, POLICY_OPTIONS, kind)
    path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(path):
        raise BackendUnavailableError(f"{kind}:{run_dir}", f"no {MANIFEST} there: give a `r2v train` run directory")
    with open(path) as fh:
        chain = load_config({"chain": json.load(fh)["config"]}).chain
    if kind == "slm" and opts:
        cfg, verified = policy_options(chain.router_data, opts)
        return slm_policy(slm_model(run_dir), cfg, chain.env.env_id, verifier=verified)
    if opts:  # the router was trained on the features of the run's own K candidates
        raise ValueError(f"{kind}:RUN_DIR takes no options (got {sorted(opts)}); they are slm:'s")
    agents = agents_from_run(chain, run_dir)
    if kind == "slm":
        return agents.slm()

    if not agents.router_path or not os.path.exists(agents.router_path):
        raise BackendUnavailableError(f"r2v:{run_dir}", "the run has no trained router yet (r2v router-train)")
    return RoutedPolicy(agents.slm(), agents.teacher(), MLPRouter.load(agents.router_path))


slm_agent: Callable[[str], BatchPolicy] = functools.partial(run_dir_agent, "slm")
r2v_agent: Callable[[str], BatchPolicy] = functools.partial(run_dir_agent, "r2v")
