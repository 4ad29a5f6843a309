"""Named router settings beyond the paper's, trained on the run's router data and evaluated next to R2V.

A setting is a set of :class:`~r2v_train.router.train.RouterTrainConfig` overrides on top of the chain's router
config (``router_variants:`` in a pipeline yaml maps a name to overrides, or lists names of :data:`SETTINGS`):

* ``paper``: the chain's router as configured (Eq. 6-13; the default ``r2v`` method);
* ``scaled``: Table 5's CVaR read on the ``miss`` scale (``losses.COST_SCALES``: the share of a rollout's steps
  that belong to a failed episode and stay with the SLM) and enforced on the deployed decisions
  (``threshold_rule: cvar_budget``): epsilon = 0.1 means "in the worst alpha of validation rollouts at most 10% of
  the steps are failing steps left to the SLM", and tightening epsilon escalates more;
* ``trajectory``: Eq. 6's 15 features plus :data:`r2v_agents.trajectory_features.TRAJECTORY_NAMES`;
* ``counterfactual``: trained on y_cf (:mod:`r2v_train.router.counterfactual`) instead of Eq. 7's labels: the sampled
  steps of failed rollouts with their measured label, and every step of successful rollouts (y_cf = 0);
* ``deviation``: trained on Eq. 7's labels restricted to the steps where the SLM's action differs from the env's
  expert action (:func:`deviation_labels`): with a weak SLM nearly every rollout fails, Eq. 7 then labels nearly
  every step 1 and the router escalates everything, though the SLM's steps that match the expert need no teacher;
  ``deviation_scaled`` reads its threshold off Table 5's CVaR on the ``miss`` scale as ``scaled`` does (at most
  epsilon of the worst alpha validation rollouts' steps are deviating failing steps left to the SLM), and
  ``deviation_scaled_bagged`` adds ``bagged``'s members and pooled calibration to it;
* ``bagged``: 8 routers on 4-fold resamples of the training rollouts, probabilities averaged, Platt and threshold
  fitted on the validation rows plus the cross-fitted training rows (:mod:`r2v_train.router.bagging`): the
  operating point stops depending on one init seed and 40 validation rollouts.

Example:
    >>> resolve_variants(["scaled", {"mine": {"features": "trajectory", "epsilon": 0.05}}])["mine"]
    {'features': 'trajectory', 'epsilon': 0.05}
    >>> resolve_variants(["nope"])
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown router setting 'nope' ...
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from r2v_agents.features import FEATURE_NAMES
from r2v_agents.shards import load_rows
from r2v_agents.trajectory_features import TRAJECTORY_NAMES, logged_trajectory_features
from r2v_envs.errors import UnknownChoiceError
from r2v_train.router.bagging import fit_router
from r2v_train.router.config import ROUTER_FILE, RouterTrainConfig
from r2v_train.router.counterfactual import load_labels
from r2v_train.router.data import RouterData

SETTINGS: dict[str, dict[str, Any]] = {
    "paper": {},
    "scaled": {"cost_scale": "miss", "threshold_rule": "cvar_budget"},
    "trajectory": {"features": "trajectory"},
    "counterfactual": {"labels": "counterfactual"},
    "bagged": {"bag": 8, "bag_folds": 4, "calibrate_on": "pooled"},
    "deviation": {"labels": "deviation"},
    "deviation_scaled": {"labels": "deviation", "cost_scale": "miss", "threshold_rule": "cvar_budget"},
    "deviation_scaled_bagged": {"labels": "deviation", "cost_scale": "miss", "threshold_rule": "cvar_budget",
                                "bag": 8, "bag_folds": 4, "calibrate_on": "pooled"},
}


def resolve_variants(spec: Sequence[Any] | Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    """``router_variants`` of a yaml (names of :data:`SETTINGS`, {name: overrides} mappings, or one mapping) ->
    {name: overrides}."""
    out: dict[str, dict[str, Any]] = {}
    items = [spec] if isinstance(spec, Mapping) else list(spec or ())
    for item in items:
        if isinstance(item, str):
            if item not in SETTINGS:
                raise UnknownChoiceError("router setting", item, SETTINGS)
            out[item] = dict(SETTINGS[item])
        else:
            for name, overrides in dict(item).items():
                out[str(name)] = dict(overrides or {})
    fields = {f.name for f in dataclasses.fields(RouterTrainConfig)}
    for name, overrides in out.items():
        unknown = sorted(set(overrides) - fields)
        if unknown:
            raise UnknownChoiceError(f"router setting {name!r} field", unknown[0], sorted(fields))
    return out


def variant_config(base: RouterTrainConfig, overrides: Mapping[str, Any]) -> RouterTrainConfig:
    return dataclasses.replace(base, **{k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()})


def router_rows(rollout_dir: str | os.PathLike, cfg: RouterTrainConfig, cf_dir: str | os.PathLike | None = None
                ) -> RouterData:
    """The router rows of an SLM-only runner directory with ``cfg.features`` and ``cfg.labels`` applied."""
    data = RouterData.from_run(rollout_dir)
    if cfg.features == "full" and cfg.labels == "episode":
        return data
    keys = [(r["episode_id"], int(r["t"])) for r in load_rows(rollout_dir, "router", ["episode_id", "t"])]
    features, names = data.features, data.feature_names
    if cfg.features == "trajectory":
        if features.shape[1] != len(FEATURE_NAMES):
            raise ValueError(f"trajectory features extend Eq. 6's {len(FEATURE_NAMES)}; {rollout_dir} logs "
                             f"{features.shape[1]}")
        cols = ["episode_id", "t", "goal", "observation", "action", "reward", "max_steps", "benchmark"]
        extra = logged_trajectory_features(load_rows(rollout_dir, "steps", cols))
        features = np.concatenate([features, np.stack([extra[k] for k in keys])], axis=1)
        names = (*FEATURE_NAMES, *TRAJECTORY_NAMES)
    y, keep = data.y, np.ones(len(keys), dtype=bool)
    if cfg.labels == "deviation":
        deviates = deviation_labels(load_rows(rollout_dir, "steps", ["episode_id", "t", "action", "expert_action"]))
        y = (data.y.astype(bool) & np.array([deviates[k] for k in keys])).astype(np.int8)
    if cfg.labels == "counterfactual":
        if cf_dir is None:
            raise ValueError("labels: counterfactual needs the counterfactual labels of these rollouts (cf_dir)")
        labels = load_labels(cf_dir)
        # steps of successful rollouts (y = 0) and the sampled steps of failed ones carry a y_cf label
        keep = np.array([data.y[i] == 0 or labels.get(k, (0, False))[1] for i, k in enumerate(keys)])
        y = np.array([labels.get(k, (0, False))[0] for k in keys], dtype=np.int8)
    return dataclasses.replace(data, features=features, y=y, feature_names=names).select(keep)


def deviation_labels(steps: Sequence[Mapping[str, Any]]) -> dict[tuple[str, int], bool]:
    """(episode_id, t) -> whether the step's action differs from the env's expert action (case and spacing aside).

    Raises ``ValueError`` when a step logged no expert action (the benchmark has no step-level expert).

    Example:
        >>> deviation_labels([{"episode_id": "e", "t": 0, "action": "Go  east", "expert_action": "go east"},
        ...                   {"episode_id": "e", "t": 1, "action": "look", "expert_action": "take coin"}])
        {('e', 0): False, ('e', 1): True}
    """
    norm = lambda a: " ".join(str(a).lower().split())  # noqa: E731
    out = {}
    for r in steps:
        if r.get("expert_action") is None:
            raise ValueError(f"labels: deviation needs the env's expert action at every step; step {r['t']} of "
                             f"{r['episode_id']} logged none (this benchmark has no step-level expert)")
        out[(r["episode_id"], int(r["t"]))] = norm(r["action"]) != norm(r["expert_action"])
    return out


def train_variant(name: str, overrides: Mapping[str, Any], base: RouterTrainConfig, train_dir: str | os.PathLike,
                  valid_dir: str | os.PathLike, out_dir: str | os.PathLike, cf_dirs: Mapping[str, str] | None = None
                  ) -> tuple[str, dict[str, Any]]:
    """Train router setting ``name`` into ``out_dir`` (resumable); returns (router path, training metrics)."""
    cfg = variant_config(base, overrides)
    cf = cf_dirs or {}
    train = router_rows(train_dir, cfg, cf.get("train"))
    valid = router_rows(valid_dir, cfg, cf.get("valid"))
    result = fit_router(train, valid, cfg, run_dir=out_dir, feature_names=train.feature_names)
    return os.fspath(Path(out_dir) / ROUTER_FILE), result.metrics
