"""Routers p = r(f) with a threshold tau: escalate to the teacher when p >= tau (Sec. 4.1, Algorithm 2).

* :class:`AlwaysSLM` / :class:`AlwaysLLM`: p = 0 / p = 1.
* :class:`EntropyRouter`: p = H / (1 + H) from the mean token entropy; tau calibrated on validation data.
* :class:`HeuristicRouter`: fixed (non-learned) verifier rules.
* :class:`OracleRouter`: HINDSIGHT, an upper bound only: escalates every context of a (task, z) whose logged
  SLM-only rollout failed.
* :class:`MLPRouter`: the R2V router (15->128->64->1 MLP, Appendix C) loaded from a file written by
  :func:`r2v_agents.router_mlp.save_router`.

Budgets are enforced by the routed policy (:mod:`r2v_agents.routed`), not by routers.

Example:
    >>> import numpy as np
    >>> from r2v_agents.features import FEATURE_NAMES
    >>> f = np.zeros((2, len(FEATURE_NAMES)), dtype=np.float32)
    >>> f[:, FEATURE_NAMES.index("token_entropy_mean")] = [0.1, 3.0]
    >>> r = EntropyRouter()
    >>> r.calibrate(f, np.array([0, 1])) == r.threshold, r.escalate(f).tolist()
    (True, [False, True])
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from r2v_agents.context import Context
from r2v_agents.features import FEATURE_NAMES, apply_mask
from r2v_agents.shards import load_rows
from r2v_agents.trajectory_features import TRAJECTORY_NAMES, trajectory_features

_IDX = {n: i for i, n in enumerate(FEATURE_NAMES)}


def calibrate_threshold(scores: np.ndarray, labels: np.ndarray | None = None, target_rate: float | None = None,
                        recall: float | None = None) -> float:
    """A threshold on validation scores: the (1 - ``target_rate``) quantile when an escalation rate is
    given; with ``recall``, the highest cut that escalates at least that share of the failure rows (y = 1), i.e.
    the cheapest threshold with that true-positive rate; else the cut that maximises Youden's J = TPR - FPR for
    predicting failure labels.

    Example:
        >>> s, y = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6]), np.array([0, 1, 0, 1, 0, 1])
        >>> calibrate_threshold(s, y, recall=2 / 3), calibrate_threshold(s, y, recall=1.0)
        (0.4, 0.2)
    """
    scores = np.asarray(scores, dtype=float)
    if scores.size == 0:
        raise ValueError("no validation scores to calibrate on")
    if target_rate is not None:
        if not 0.0 <= target_rate <= 1.0:
            raise ValueError("target_rate must be in [0, 1]")
        return float(np.inf) if target_rate == 0 else float(np.quantile(scores, 1.0 - target_rate))
    if labels is None:
        raise ValueError("give labels or a target_rate")
    y = np.asarray(labels).astype(bool)
    if recall is not None:
        if not 0.0 <= recall <= 1.0:
            raise ValueError("recall must be in [0, 1]")
        if not y.any():
            raise ValueError("no failure rows (y = 1) to match a recall on")
        pos = np.sort(scores[y])[::-1]  # the n-th highest failure score escalates n failure rows
        need = int(np.ceil(recall * len(pos) - 1e-9))
        return float(np.inf) if need == 0 else float(pos[need - 1])
    if y.all() or not y.any():
        return float(scores.min()) if y.all() else float(np.inf)
    best, best_j = float(np.inf), -1.0
    for t in np.unique(scores):
        pred = scores >= t
        j = pred[y].mean() - pred[~y].mean()
        if j > best_j:
            best, best_j = float(t), j
    return best


class Router:
    """``predict(features, contexts) -> p`` in [0, 1] per row; ``escalate`` applies the threshold."""

    name = "router"
    hindsight = False

    def __init__(self, threshold: float = 0.5):
        self.threshold = float(threshold)

    def predict(self, features: np.ndarray, contexts: Sequence[Context] | None = None) -> np.ndarray:
        raise NotImplementedError

    def escalate(self, features: np.ndarray, contexts: Sequence[Context] | None = None) -> np.ndarray:
        return self.predict(np.atleast_2d(features), contexts) >= self.threshold

    def calibrate(self, features: np.ndarray, labels: np.ndarray | None = None, target_rate: float | None = None,
                  recall: float | None = None) -> float:
        """Set the threshold from validation features (and failure labels): see :func:`calibrate_threshold`."""
        self.threshold = calibrate_threshold(self.predict(np.atleast_2d(features)), labels, target_rate, recall)
        return self.threshold


class AlwaysSLM(Router):
    name = "always-slm"

    def predict(self, features, contexts=None):
        return np.zeros(len(np.atleast_2d(features)))


class AlwaysLLM(Router):
    name = "always-llm"

    def predict(self, features, contexts=None):
        return np.ones(len(np.atleast_2d(features)))


class EntropyRouter(Router):
    """Mean token entropy H of the K candidates, squashed to [0, 1) as H / (1 + H)."""

    name = "entropy"

    def predict(self, features, contexts=None):
        h = np.clip(np.atleast_2d(features)[:, _IDX["token_entropy_mean"]].astype(float), 0, None)
        return h / (1.0 + h)


class HeuristicRouter(Router):
    """Non-learned verifier rules: risk = 1 - best verifier score, raised by 0.2 when the candidates
    disagree (consistency < 0.5) and by 0.2 when all candidates look bad (worst < ``bad``) late in the
    episode (horizon fraction > 0.5)."""

    name = "heuristic"

    def __init__(self, threshold: float = 0.5, bad: float = 0.4):
        super().__init__(threshold)
        self.bad = bad

    def predict(self, features, contexts=None):
        f = np.atleast_2d(features).astype(float)
        p = 1.0 - f[:, _IDX["verifier_best"]]
        p += 0.2 * (f[:, _IDX["candidate_consistency"]] < 0.5)
        p += 0.2 * ((f[:, _IDX["verifier_worst"]] < self.bad) & (f[:, _IDX["horizon_fraction"]] > 0.5))
        return np.clip(p, 0.0, 1.0)


class OracleRouter(Router):
    """Hindsight upper bound: p = 1 for contexts of a (task_id, z) whose logged SLM-only rollout failed.

    Needs the contexts (the runner puts ``z`` in ``Context.extra``). Not a deployable router."""

    name = "oracle"
    hindsight = True

    def __init__(self, failed: Iterable[tuple[str, int]], threshold: float = 0.5):
        super().__init__(threshold)
        self.failed = {(str(t), int(z)) for t, z in failed}

    @classmethod
    def from_run(cls, slm_run_dir: str | os.PathLike, threshold: float = 0.5) -> OracleRouter:
        """From the episodes of an SLM-only run directory written by the runner."""

        rows = load_rows(slm_run_dir, "episodes", columns=["task_id", "z", "success"])
        return cls([(r["task_id"], r["z"]) for r in rows if not r["success"]], threshold)

    def predict(self, features, contexts=None):
        if contexts is None:
            raise ValueError("the oracle router needs the contexts (task id and z)")
        return np.array([float((c.task_id, int(c.extra.get("z", -1))) in self.failed) for c in contexts])


class MLPRouter(Router):
    """The R2V router: a calibrated MLP over f_t, loaded with :func:`r2v_agents.router_mlp.load_router`.

    ``feature_spec`` holds ``names`` (checked against :data:`FEATURE_NAMES`) and ``mean``/``std``; it may
    hold ``ablation`` (a feature mask applied before the model, see :data:`r2v_agents.features.ABLATIONS`)
    and ``variant`` (the feature variant the SLM policy must compute). A ``RouterMLP`` standardises inside
    the model (buffers checked against the spec by ``load_router``); for any other model (e.g. a bare torch
    module) ``mean``/``std`` are applied here.
    """

    name = "r2v-mlp"

    def __init__(self, model: Any, feature_spec: Mapping[str, Any] | None = None, threshold: float = 0.5,
                 meta: Mapping[str, Any] | None = None):
        super().__init__(threshold)
        self.model, self.feature_spec, self.meta = model, dict(feature_spec or {}), dict(meta or {})
        names = tuple(self.feature_spec.get("names", FEATURE_NAMES))
        if names not in (FEATURE_NAMES, FEATURE_NAMES + TRAJECTORY_NAMES):
            raise ValueError(f"router was trained on features {names}, this build computes {FEATURE_NAMES} "
                             f"(and optionally {TRAJECTORY_NAMES})")
        self.trajectory = len(names) > len(FEATURE_NAMES)  # computes the trajectory features from the contexts
        self.variant = str(self.feature_spec.get("variant", "full"))

    @classmethod
    def load(cls, path: str | os.PathLike, threshold: float | None = None) -> MLPRouter:
        from r2v_agents.router_mlp import load_router

        model, spec, saved_threshold, meta = load_router(path)  # the names are checked in __init__
        return cls(model, spec, saved_threshold if threshold is None else threshold, meta)

    def transform(self, features: np.ndarray, contexts: Sequence[Context] | None = None) -> np.ndarray:
        f = np.atleast_2d(np.asarray(features, dtype=np.float32))
        if "ablation" in self.feature_spec:
            n = len(FEATURE_NAMES)
            f = np.concatenate([apply_mask(f[:, :n], self.feature_spec["ablation"]), f[:, n:]], axis=1).astype(
                np.float32)
        if self.trajectory and f.shape[1] == len(FEATURE_NAMES):
            if contexts is None:
                raise ValueError("a router on trajectory features needs the contexts (or all its feature columns)")
            f = np.concatenate([f, np.stack([trajectory_features(c) for c in contexts])], axis=1)
        owns_scaling = hasattr(self.model, "feature_mean")
        if "mean" in self.feature_spec and "std" in self.feature_spec and not owns_scaling:
            mean = np.asarray(self.feature_spec["mean"], dtype=np.float32)
            std = np.asarray(self.feature_spec["std"], dtype=np.float32)
            f = (f - mean) / np.where(std > 0, std, 1.0)
        return f

    def predict(self, features, contexts=None):
        f = self.transform(features, contexts)
        if hasattr(self.model, "predict_proba"):
            return np.asarray(self.model.predict_proba(f), dtype=float).reshape(-1)
        import torch  # a bare torch module returning logits

        self.model.eval()
        with torch.no_grad():
            return torch.sigmoid(self.model(torch.from_numpy(f))).reshape(-1).double().numpy()


ROUTERS = {r.name: r for r in (AlwaysSLM, AlwaysLLM, EntropyRouter, HeuristicRouter, OracleRouter, MLPRouter)}
