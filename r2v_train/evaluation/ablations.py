"""The ablations of Appendix E, one function (and one ``r2v`` command) each, on the main evaluation condition.

* :func:`ablate_features` (Table 7): the trained R2V router with feature groups zeroed at inference
  (:data:`r2v_agents.features.ABLATIONS`), no retraining;
* :func:`ablate_closed_source` (Table 6): routers retrained on the ``no_entropy`` / ``pseudo_entropy`` feature
  variants (recomputed from the logged candidates of the SLM-only rollouts, Sec. 5.4), the SLM then computing
  the same variant at test time; ECE and Brier on validation;
* :func:`ablate_cvar` (Table 5): the router retrained for each (alpha, epsilon) of a grid (only the router);
* :func:`ablate_consistency` (Table 4): the SLM re-trained by DPO for each lambda_cons (a ``retrain``
  callable, normally the chain's DPO stage) and evaluated alone and routed with the run's router.

Each writes ``<run>/ablations/<name>.json`` (``{"rows": [...]}``, rendered by :mod:`r2v_train.evaluation.report`) and
keeps one runner directory per setting under ``<run>/ablations/<name>/`` (resumable: finished episodes and
trained routers are reused).

Example:
    >>> import numpy as np
    >>> from r2v_agents.features import FEATURE_NAMES
    >>> f = np.ones((1, len(FEATURE_NAMES)), dtype=np.float32)
    >>> g = variant_features(f, [[0.9, 0.1]], "pseudo_entropy")[0]
    >>> names = ("token_entropy_mean", "token_logprob_mean", "verifier_best")
    >>> [round(float(g[FEATURE_NAMES.index(n)]), 3) for n in names]
    [0.893, 0.0, 1.0]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from r2v_agents.features import ABLATIONS, FEATURE_GROUPS, FEATURE_NAMES, VARIANTS, pseudo_entropy
from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import MLPRouter
from r2v_agents.shards import load_rows, load_table
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import write_json_atomic
from r2v_eval.cells import sr_metrics
from r2v_train.evaluation.methods import Agents, EvalConfig, build_routers, make_policy, run_method
from r2v_train.router.config import ROUTER_FILE, RouterTrainConfig
from r2v_train.router.data import RouterData
from r2v_train.router.settings import train_variant
from r2v_train.router.train import train_router
from r2v_train.run_dir import ablation_file, ablation_point_dir

ABLATION_NAMES = ("features", "closed_source", "cvar", "consistency", "cvar_scaled", "cvar_deviation", "feature_sets")
CVAR_ALPHAS: tuple[float, ...] = (0.05, 0.1, 0.2, 0.5)
CVAR_EPSILONS: tuple[float, ...] = (0.02, 0.1, 0.15)
LAMBDAS_CONS: tuple[float, ...] = (0.0, 0.05, 0.2, 0.5, 1.0)


def _main_condition(cfg: EvalConfig) -> tuple[str, Any]:
    return next(iter(cfg.conditions().items()))


def _row(setting: str, run_dir: str | os.PathLike, cfg: EvalConfig, **extra: Any) -> dict[str, Any]:
    m = sr_metrics(run_dir, cfg.bootstrap, cfg.bootstrap_seed)
    return {"setting": setting, "SR": m["sr"], "SR CI": m["sr_ci"], "LLM%": m["llm_pct"],
            "LLM% CI": m["llm_pct_ci"], **extra, "episodes": m["episodes"], "run_dir": os.fspath(run_dir)}


def _write(run_dir: str | os.PathLike, name: str, rows: list[dict[str, Any]], **meta: Any) -> dict[str, Any]:
    out = {"name": name, "rows": rows, **meta}
    path = ablation_file(run_dir, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path, out)
    return out


# ------------------------------------------------------------------------------------------- Table 7
def ablate_features(agents: Agents, cfg: EvalConfig, run_dir: str | os.PathLike,
                    masks: Sequence[str] | None = None) -> dict[str, Any]:
    """R2V with each feature-group mask applied at inference (no retraining)."""

    masks = tuple(masks or ABLATIONS)
    routers = build_routers(agents, cfg)
    if "r2v" not in routers:
        raise FileNotFoundError(f"no trained router at {agents.router_path}: train the router stage first")
    cond, spec = _main_condition(cfg)
    rows = []
    for mask in masks:
        out = ablation_point_dir(run_dir, "features", mask)
        run_method(make_policy("r2v", agents, routers, None, cfg, ablation=mask), f"r2v[{mask}]", cfg, spec, out)
        rows.append(_row(mask, out, cfg))
    return _write(run_dir, "features", rows, condition=cond)


# ------------------------------------------------------------------------------------------- Table 6
def variant_features(features: np.ndarray, scores: Sequence[Sequence[float]], variant: str) -> np.ndarray:
    """Logged full features -> the ``variant`` the SLM would compute (see :func:`r2v_agents.features.compute_features`):
    ``no_entropy`` zeros the entropy group; ``pseudo_entropy`` puts the normalised entropy of softmax(verifier
    scores of the K candidates) in both token-entropy dims and zeros the log-prob dims."""

    if variant not in VARIANTS:
        raise UnknownChoiceError("feature variant", variant, VARIANTS)
    f = np.array(features, dtype=np.float32, copy=True)
    if variant == "full":
        return f
    f[:, [FEATURE_NAMES.index(n) for n in FEATURE_GROUPS["entropy"]]] = 0.0
    if variant == "pseudo_entropy":
        h = np.array([pseudo_entropy([s for s in row if s is not None]) for row in scores], dtype=np.float32)
        for n in ("token_entropy_mean", "token_entropy_max"):
            f[:, FEATURE_NAMES.index(n)] = h
    return f


def variant_router_data(rollout_dir: str | os.PathLike, variant: str):
    """The router rows of an SLM-only runner directory with their features turned into ``variant``."""

    data = RouterData.from_table(load_table(rollout_dir, "router"))
    if variant == "full":
        return data
    keys = load_rows(rollout_dir, "router", columns=["episode_id", "t"])
    scores = {(r["episode_id"], r["t"]): [c["verifier_score"] for c in (r["candidates"] or [])]
              for r in load_rows(rollout_dir, "steps", columns=["episode_id", "t", "candidates"])}
    return replace(data, features=variant_features(data.features, [scores[(k["episode_id"], k["t"])] for k in keys],
                                                   variant))


def train_variant_router(train_dir: str | os.PathLike, valid_dir: str | os.PathLike, out_dir: str | os.PathLike,
                         router_cfg: Any = None, variant: str = "full") -> tuple[str, dict[str, Any]]:
    """Train a router on ``variant`` features into ``out_dir``; returns (router path, its training metrics)."""
    from r2v_agents.router_mlp import load_router, save_router

    cfg = router_cfg or RouterTrainConfig(progress=False)
    result = train_router(variant_router_data(train_dir, variant), variant_router_data(valid_dir, variant), cfg,
                          run_dir=out_dir)
    path = os.path.join(os.fspath(out_dir), ROUTER_FILE)
    model, spec, threshold, meta = load_router(path)
    if spec.get("variant", "full") != variant:  # the router tells the SLM which variant to compute
        save_router(path, model, {**spec, "variant": variant}, threshold, meta)
    return path, result.metrics


def ablate_closed_source(agents: Agents, cfg: EvalConfig, run_dir: str | os.PathLike, train_dir: str | os.PathLike,
                         valid_dir: str | os.PathLike, router_cfg: Any = None,
                         variants: Sequence[str] = ("full", "no_entropy", "pseudo_entropy")) -> dict[str, Any]:
    """Routers retrained per feature variant, evaluated routed; ECE/Brier on validation (Table 6)."""
    cond, spec = _main_condition(cfg)
    rows = []
    for variant in variants:
        base = ablation_point_dir(run_dir, "closed_source", variant)
        path, metrics = train_variant_router(train_dir, valid_dir, base / "router", router_cfg, variant)
        a = replace(agents, router_path=path)
        run_method(make_policy("r2v", a, build_routers(a, cfg), None, cfg), f"r2v[{variant}]", cfg, spec,
                   base / "eval")
        v = metrics["valid"]
        rows.append(_row(variant, base / "eval", cfg, ECE=v["ece"], Brier=v["brier"]))
    return _write(run_dir, "closed_source", rows, condition=cond)


# ------------------------------------------------------------------------------------------- Table 5
def ablate_cvar(agents: Agents, cfg: EvalConfig, run_dir: str | os.PathLike, train_dir: str | os.PathLike,
                valid_dir: str | os.PathLike, alphas: Sequence[float] = CVAR_ALPHAS,
                epsilons: Sequence[float] = CVAR_EPSILONS, router_cfg: Any = None, name: str = "cvar"
                ) -> dict[str, Any]:
    """The router retrained for each (alpha, epsilon) (everything else fixed), evaluated routed; ``name`` names the
    output (``cvar_scaled``: the same grid with ``router_cfg`` on the ``miss`` scale, see
    :mod:`r2v_train.router.settings`)."""

    base_cfg = router_cfg or RouterTrainConfig(progress=False)
    cond, spec = _main_condition(cfg)
    rows = []
    for alpha in alphas:
        for eps in epsilons:
            base = ablation_point_dir(run_dir, name, f"a{alpha:g}_e{eps:g}")
            # train_variant: the setting's own labels and features (deviation labels for cvar_deviation)
            path, metrics = train_variant(name, {}, replace(base_cfg, alpha=float(alpha), epsilon=float(eps)),
                                          train_dir, valid_dir, base / "router")
            a = replace(agents, router_path=path)
            run_method(make_policy("r2v", a, build_routers(a, cfg), None, cfg), f"r2v[a={alpha:g},e={eps:g}]",
                       cfg, spec, base / "eval")
            v = metrics["valid"]
            scale = getattr(base_cfg, "cost_scale", "paper")
            rows.append(_row(f"alpha={alpha:g}, eps={eps:g}", base / "eval", cfg, alpha=float(alpha),
                             epsilon=float(eps), lam=metrics.get("lambda"), ECE=v["ece"],
                             threshold=metrics.get("threshold"), **{"valid LLM%": 100 * v["escalation_rate"]},
                             **{"valid CVaR": v.get(f"rollout_cvar_hard_{scale}", v["rollout_cvar_hard"])}))
    return _write(run_dir, name, rows, condition=cond)


def ablate_feature_sets(agents: Agents, cfg: EvalConfig, run_dir: str | os.PathLike, train_dir: str | os.PathLike,
                        valid_dir: str | os.PathLike, router_cfg: Any = None,
                        sets: Sequence[str] = ("full", "trajectory")) -> dict[str, Any]:
    """Routers retrained on each feature set (Eq. 6's 15 = ``full``; ``trajectory`` adds the trajectory-state
    features), evaluated routed; ECE/Brier on validation."""
    base_cfg = router_cfg or RouterTrainConfig(progress=False)
    cond, spec = _main_condition(cfg)
    rows = []
    for fs in sets:
        base = ablation_point_dir(run_dir, "feature_sets", fs)
        path, metrics = train_variant(fs, {"features": fs}, base_cfg, train_dir, valid_dir, base / "router")
        run_method(RoutedPolicy(agents.slm(), agents.teacher(), MLPRouter.load(path)), f"r2v[{fs}]", cfg, spec,
                   base / "eval")
        v = metrics["valid"]
        rows.append(_row(fs, base / "eval", cfg, features=len(metrics["identity"]["features"]), ECE=v["ece"],
                         Brier=v["brier"], **{"valid LLM%": 100 * v["escalation_rate"]}))
    return _write(run_dir, "feature_sets", rows, condition=cond)


# ------------------------------------------------------------------------------------------- Table 4
def ablate_consistency(agents: Agents, cfg: EvalConfig, run_dir: str | os.PathLike,
                       retrain: Callable[[float, str], Callable[[], Any]],
                       lambdas: Sequence[float] = LAMBDAS_CONS) -> dict[str, Any]:
    """For each lambda_cons, ``retrain(lam, out_dir)`` re-runs DPO (Eq. 4-5) into ``out_dir`` and returns an SLM
    factory; the new SLM is evaluated alone and routed by the run's R2V router (the router is not retrained, so
    the column isolates the policy's change; LLM% shows how much escalation the more consistent policy needs)."""
    cond, spec = _main_condition(cfg)
    routers = build_routers(agents, cfg)
    rows = []
    for lam in lambdas:
        base = ablation_point_dir(run_dir, "consistency", f"lam{lam:g}")
        a = replace(agents, slm=retrain(float(lam), os.fspath(base / "dpo")))
        run_method(make_policy("slm", a, routers, None, cfg), "slm", cfg, spec, base / "slm")
        slm = sr_metrics(base / "slm", cfg.bootstrap, cfg.bootstrap_seed)
        if "r2v" in routers:
            run_method(make_policy("r2v", a, routers, None, cfg), "r2v", cfg, spec, base / "r2v")
            rows.append(_row(f"lambda_cons={lam:g}", base / "r2v", cfg, **{"SLM-only SR": slm["sr"]}))
        else:
            rows.append(_row(f"lambda_cons={lam:g} (SLM-only)", base / "slm", cfg))
    return _write(run_dir, "consistency", rows, condition=cond)
