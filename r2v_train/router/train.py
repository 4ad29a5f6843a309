"""The router stage (8/8 of the chain): train the router r_psi on (f_t, y_t) with Brier + the CVaR Lagrangian (Eq. 8-13).

Objective (Eq. 11), minimised over the router psi and the Rockafellar-Uryasev variable eta, maximised over
lambda >= 0 by dual ascent on log lambda:

    E_z[R(z)] + lambda (eta + E_z[(R(z) - eta)_+] / alpha - epsilon) + lambda_B Brier,

where R(z) (Eq. 10) is the mean soft routing cost (Eq. 8) over the steps of one logged SLM rollout. A rollout is
the pair (perturbation seed z, episode index), because an env seeded with z draws its perturbations from
(z, episode, step). Minibatches are packed from whole rollouts, so each R(z) in a batch is exact and the RU term
is an unbiased estimate of its population value.

Costs are in units of one teacher call: c_LLM = 1, c_SLM = 1/50 (Appendix C's ratio of 50), and the default
kappa = 2 (c_LLM - c_SLM) = 1.96 puts tau* (Eq. 13) at 0.5: escalate when the calibrated risk that the SLM
fails the episode is at least one half. With these units a failing rollout costs at least c_LLM = 1 per step,
so CVaR_alpha < epsilon = 0.1 is infeasible whenever more than alpha of the rollouts fail; lambda then climbs
to ``lambda_max``, which bounds it so the primal problem stays well posed. ``cost_scale`` (``losses.COST_SCALES``)
puts the CVaR term on a scale where Table 5's epsilon can bind (``miss``: the share of a rollout's steps that are
failing steps left to the SLM), and ``threshold_rule="cvar_budget"`` enforces the budget on the deployed decisions
(Platt recalibration undoes most of what the Lagrangian shifts, and 20 dual steps move lambda little).

After training, the router is recalibrated on validation NLL and the routing threshold is chosen on validation
(``calibration.select_threshold``): the tau minimising the hard-decision version of the training objective,
i.e. mean cost plus the final lambda times the rollout CVaR excess. Modes: ``cvar`` (Eq. 11), ``mean`` (no CVaR
term) and ``brier`` (Brier only, the calibration ablation).

Recalibration defaults to Platt scaling (logits / T + b) rather than Appendix C's temperature alone: the CVaR
term raises the logits of failure-like states (a shift, not a sharpening), which a temperature cannot undo.
Measured on the heavy-tailed synthetic rollouts of tests/train/router/test_router_train.py (8 epochs, held-out data): CVaR
training gave ECE 0.33 with temperature scaling and 0.047 with Platt scaling (Brier-only training: 0.050), and
the lambda-aware threshold kept the tail gain: hard CVaR_0.2 of rollout cost 1.33 vs 1.62 for Brier-only, at
23% vs 0.6% escalated steps.

Example:
    >>> import numpy as np
    >>> rng = np.random.default_rng(0)
    >>> def make(n):
    ...     f = rng.normal(size=(n, 15)).astype(np.float32)
    ...     y = (rng.random(n) < 1 / (1 + np.exp(-2 * f[:, 0]))).astype(np.int8)
    ...     return RouterData(features=f, y=y, seed=np.arange(n) // 10)
    >>> cfg = RouterTrainConfig(epochs=2, batch_size=512, progress=False)
    >>> result = train_router(make(2000), make(1000), cfg)
    >>> result.metrics["tau_star"], result.model.predict_proba(make(3).features).shape
    (0.5, (3,))
    >>> 0 <= result.metrics["valid"]["escalation_rate"] <= 1 and len(result.metrics["history"]) == 2
    True
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from r2v_agents.features import FEATURE_NAMES
from r2v_agents.features import FeatureSpecError
from r2v_envs.fileio import atomic_write
from r2v_train.router import calibration
from r2v_train.router.config import (
    METRICS_FILE,
    ROUTER_FILE,
    STATE_FILE,
    RouterTrainConfig,
)
from r2v_train.router.data import RouterData, fingerprint
from r2v_train.router.losses import brier, cvar, scaled_routing_cost, seed_risk

if TYPE_CHECKING:

    from r2v_agents.router_mlp import RouterMLP

@dataclass
class RouterTrainResult:
    model: RouterMLP
    feature_spec: dict[str, Any]
    threshold: float
    metrics: dict[str, Any]


def _standardisation(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    mean = features.mean(axis=0, dtype=np.float64)
    std = features.std(axis=0, dtype=np.float64)
    return mean.astype(np.float32), np.where(std > 1e-6, std, 1.0).astype(np.float32)  # constant feature: keep


def _pack_batches(rollout: np.ndarray, n_rollouts: int, batch_size: int, rng: np.random.Generator
                  ) -> tuple[np.ndarray, np.ndarray, list[tuple[int, int]]]:
    """Shuffle rollouts and pack whole rollouts into batches of about ``batch_size`` steps.

    Returns the row order, each ordered row's running rollout number, and (start, end) of each batch.
    """
    by_rollout = np.argsort(rollout, kind="stable")
    counts = np.bincount(rollout, minlength=n_rollouts)
    starts = np.r_[0, np.cumsum(counts)[:-1]]
    perm = rng.permutation(n_rollouts)
    c = counts[perm]
    ends = np.cumsum(c)
    offsets = np.repeat(starts[perm] - (ends - c), c)
    rows = by_rollout[offsets + np.arange(ends[-1])]
    segment = np.repeat(np.arange(n_rollouts), c)
    # a batch closes at the first rollout that reaches the next multiple of batch_size
    cut = np.unique(np.searchsorted(ends, np.arange(batch_size, ends[-1], batch_size), side="left"))
    bounds = np.r_[0, ends[cut[cut < n_rollouts - 1]], ends[-1]]
    return rows, segment, [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def evaluate_router(model: RouterMLP, data: RouterData, threshold: float, cfg: RouterTrainConfig
                    ) -> dict[str, Any]:
    """Calibration and routing metrics on ``data``: Brier, ECE (15 bins), reliability bins, escalation rate,
    mean hard routing cost, and the mean / CVaR_alpha of per-rollout soft and hard routing costs (Eq. 10)."""
    import torch

    p = model.predict_proba(data.features).astype(np.float64)
    y = data.y.astype(np.float64)
    d = (p >= threshold).astype(np.float64)
    rollout, n_rollouts = data.rollout_index()
    idx = torch.from_numpy(rollout)
    out: dict[str, Any] = {
        "n": len(data), "rollouts": n_rollouts, "failure_rate": float(y.mean()),
        "brier": calibration.brier_score(p, y), "ece": calibration.expected_calibration_error(p, y),
        "escalation_rate": float(d.mean()), "reliability": calibration.reliability_bins(p, y).to_dict()}
    for name, decision in (("soft", p), ("hard", d)):
        dt, yt = torch.from_numpy(decision), torch.from_numpy(y)
        step = scaled_routing_cost(dt, yt, cfg.c_slm, cfg.c_llm, cfg.kappa)
        risk = seed_risk(step, idx, n_rollouts)
        out[f"cost_{name}"] = float(step.mean())
        out[f"rollout_risk_mean_{name}"] = float(risk.mean())
        out[f"rollout_cvar_{name}"] = float(cvar(risk, cfg.alpha))
        if cfg.cost_scale != "paper":  # the CVaR that epsilon bounds, on the configured scale
            tail = seed_risk(scaled_routing_cost(dt, yt, cfg.c_slm, cfg.c_llm, cfg.kappa, cfg.cost_scale), idx,
                             n_rollouts)
            out[f"rollout_cvar_{name}_{cfg.cost_scale}"] = float(cvar(tail, cfg.alpha))
    return out


@dataclass
class _Training:
    """What evolves while a router trains (and what an epoch checkpoint holds)."""

    model: Any
    opt: Any
    dual_opt: Any
    sched: Any
    eta: Any  # the Rockafellar-Uryasev VaR variable of Eq. 10
    log_lam: Any  # log of the CVaR constraint's dual variable (Eq. 11)
    rng: np.random.Generator
    history: list[dict[str, Any]]
    eta_ready: bool = False
    start_epoch: int = 0


def load_finished(paths: dict[str, str], identity: dict[str, Any], names: Sequence[str]) -> RouterTrainResult | None:
    """The router a finished run left at ``paths`` (``router`` and ``metrics`` files), or None if there is none.

    Raises if the finished run was trained with another config, data or feature set (``identity``), so a run
    directory never silently serves a stale router."""
    if not paths or not (os.path.exists(paths["router"]) and os.path.exists(paths["metrics"])):
        return None
    from r2v_agents.router_mlp import load_router  # torch at its top: lazy

    with open(paths["metrics"]) as f:
        metrics = json.load(f)
    _check_identity(metrics.get("identity"), identity, paths["metrics"])
    model, spec, threshold, _ = load_router(paths["router"], expected_features=names)
    return RouterTrainResult(model, spec, threshold, metrics)


def train_router(train: RouterData, valid: RouterData, cfg: RouterTrainConfig | None = None,
                 run_dir: str | os.PathLike | None = None, feature_names: Sequence[str] | None = None
                 ) -> RouterTrainResult:
    """Train a router (Eq. 8-11), recalibrate it on validation (Platt by default, or temperature scaling) and
    pick its threshold; with ``run_dir``, resumable per epoch and atomic.

    A finished run in ``run_dir`` with the same config and data is loaded instead of retrained.
    """
    from r2v_agents.router_mlp import save_router

    cfg = cfg or RouterTrainConfig()
    d = train.features.shape[1]
    names = list(feature_names or train.feature_names or _default_feature_names(d))
    if valid.features.shape[1] != d:
        raise FeatureSpecError(f"validation has {valid.features.shape[1]} features, training {d}")
    for part in (train, valid):
        if part.feature_names is not None and list(part.feature_names) != names:
            raise FeatureSpecError(f"feature names differ: {list(part.feature_names)} vs {names}")
    identity = {"config": cfg.identity(), "data": fingerprint(train, valid), "features": names}

    paths = {k: os.path.join(os.fspath(run_dir), f) for k, f in
             (("router", ROUTER_FILE), ("metrics", METRICS_FILE), ("state", STATE_FILE))} if run_dir else {}
    finished = load_finished(paths, identity, names)
    if finished is not None:
        return finished

    mean, std = _standardisation(train.features)
    t = _start_training(train, cfg, d, mean, std)
    if paths and os.path.exists(paths["state"]):
        _restore(t, paths["state"], identity)

    from tqdm.auto import tqdm

    bar = tqdm(range(t.start_epoch, cfg.epochs), desc=f"router[{cfg.mode}]", disable=not cfg.progress,
               initial=t.start_epoch, total=cfg.epochs)
    data = _TrainArrays.of(train)
    for epoch in bar:
        row = _train_epoch(t, data, cfg, epoch)
        t.model.eval()
        p_val = t.model.predict_proba(valid.features)
        row.update(valid_brier=calibration.brier_score(p_val, valid.y),
                   valid_ece=calibration.expected_calibration_error(p_val, valid.y))
        t.history.append(_finite(row))
        bar.set_postfix(loss=f"{row['loss']:.4f}", vbrier=f"{row['valid_brier']:.4f}",
                        lam=f"{row['lam']:.2f}" if row["lam"] is not None else "-")
        if paths:
            _checkpoint(t, paths["state"], identity, epoch)

    model = t.model
    model.eval()
    _recalibrate(model, valid, cfg)
    p_val = model.predict_proba(valid.features)
    final_lam = float(t.log_lam.detach().exp()) if cfg.mode == "cvar" else 0.0
    threshold = calibration.select_threshold(
        p_val, valid.y, cfg.c_slm, cfg.c_llm, cfg.kappa, rule=cfg.threshold_rule, max_escalation=cfg.max_escalation,
        rollout=valid.rollout_index()[0], alpha=cfg.alpha, lam=final_lam, epsilon=cfg.epsilon, scale=cfg.cost_scale)
    spec = {"names": names, "mean": mean.tolist(), "std": std.tolist()}
    metrics = {"identity": identity, "threshold": threshold, "temperature": model.temperature,
               "logit_bias": float(model.logit_bias), "lambda": final_lam,
               "tau_star": calibration.bayes_threshold(cfg.c_slm, cfg.c_llm, cfg.kappa),
               "valid": evaluate_router(model, valid, threshold, cfg), "history": t.history}
    if paths:
        save_router(paths["router"], model, spec, threshold, meta={"config": cfg.identity(), "mode": cfg.mode,
                                                                  "temperature": model.temperature})
        atomic_write(paths["metrics"], json.dumps(metrics, indent=1))
    return RouterTrainResult(model, spec, threshold, metrics)


def _start_training(train: RouterData, cfg: RouterTrainConfig, d: int, mean: np.ndarray, std: np.ndarray
                    ) -> _Training:
    """A fresh model (standardised on the training features), its optimisers and the dual variables."""
    import torch

    from r2v_agents.router_mlp import RouterMLP

    torch.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    model = RouterMLP(d, cfg.hidden, cfg.dropout)
    model.set_standardisation(mean, std)
    eta = torch.zeros((), requires_grad=True)
    log_lam = torch.tensor(math.log(cfg.lambda_init), requires_grad=True)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=cfg.lr,
                            weight_decay=cfg.weight_decay, fused=True)
    opt.add_param_group({"params": [eta], "lr": cfg.eta_lr, "weight_decay": 0.0})
    dual_opt = torch.optim.Adam([log_lam], lr=cfg.dual_lr, fused=True)
    total = cfg.epochs * max(1, math.ceil(len(train) / cfg.batch_size))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 0.5 * (1 + math.cos(math.pi * min(s / total, 1.0))))
    return _Training(model, opt, dual_opt, sched, eta, log_lam, rng, [])


@dataclass(frozen=True)
class _TrainArrays:
    """The training rows as tensors, and each row's rollout (the unit Eq. 10 averages over)."""

    x: Any
    y: Any
    rollout: np.ndarray
    n_rollouts: int

    @classmethod
    def of(cls, train: RouterData) -> _TrainArrays:
        import torch

        rollout, n = train.rollout_index()
        return cls(torch.from_numpy(train.features), torch.from_numpy(train.y.astype(np.float32)), rollout, n)


def _train_epoch(t: _Training, data: _TrainArrays, cfg: RouterTrainConfig, epoch: int) -> dict[str, Any]:
    """One pass over the training rollouts: Brier + the routing surrogate (Eq. 8-9), the CVaR term (Eq. 10) with
    dual ascent on log lambda (Eq. 11) in ``cvar`` mode. Returns the epoch's row-weighted means."""
    import torch

    from r2v_agents.router_mlp import FastDropout

    model, eta, log_lam = t.model, t.eta, t.log_lam
    x_all, y_all = data.x, data.y
    log_lam_bounds = (math.log(1e-4), math.log(cfg.lambda_max))
    model.train()
    for m in (m for m in model.modules() if isinstance(m, FastDropout)):
        m.reseed()  # mask streams restart from torch's generator, whose state the checkpoint keeps
    rows, segment, bounds = _pack_batches(data.rollout, data.n_rollouts, cfg.batch_size, t.rng)
    rows_t, segment_t = torch.from_numpy(rows), torch.from_numpy(segment)
    sums = {"loss": 0.0, "brier": 0.0, "risk_mean": 0.0, "cvar": 0.0}
    for b0, b1 in bounds:
        idx = rows_t[b0:b1]
        x, y = x_all.index_select(0, idx), y_all.index_select(0, idx)  # 3x faster than x_all[idx]
        p = torch.sigmoid(model(x))  # temperature is frozen at 1 while training
        brier_term = brier(p, y)
        if cfg.mode == "brier":
            loss, risk_mean, cvar_value = cfg.brier_weight * brier_term, float("nan"), float("nan")
        else:
            group = segment_t[b0:b1] - segment_t[b0]
            n_group = int(group[-1]) + 1
            risk = seed_risk(scaled_routing_cost(p, y, cfg.c_slm, cfg.c_llm, cfg.kappa), group, n_group)
            loss = risk.mean() + cfg.brier_weight * brier_term
            risk_mean, cvar_value = float(risk.detach().mean()), float("nan")
            if cfg.mode == "cvar":
                if cfg.cost_scale != "paper":  # the tail term reads epsilon on its own scale (losses.COST_SCALES)
                    risk = seed_risk(scaled_routing_cost(p, y, cfg.c_slm, cfg.c_llm, cfg.kappa, cfg.cost_scale),
                                     group, n_group)
                if not t.eta_ready:  # start eta at this batch's VaR_alpha rather than at 0
                    with torch.no_grad():
                        eta.fill_(float(torch.quantile(risk.detach(), 1 - cfg.alpha)))
                    t.eta_ready = True
                ru = cvar(risk, cfg.alpha, eta)
                loss = loss + log_lam.detach().exp() * (ru - cfg.epsilon)
                cvar_value = float(ru.detach())
        t.opt.zero_grad(set_to_none=True)
        loss.backward()
        t.opt.step()
        t.sched.step()
        if cfg.mode == "cvar":  # dual ascent on log lambda; the gradient of -lam (CVaR - eps) is written directly
            log_lam.grad = -(log_lam.detach().exp() * (cvar_value - cfg.epsilon))
            t.dual_opt.step()
            with torch.no_grad():
                log_lam.clamp_(*log_lam_bounds)
        values = {"loss": float(loss.detach()), "brier": float(brier_term.detach()), "risk_mean": risk_mean,
                  "cvar": cvar_value}
        for k, v in values.items():
            sums[k] += v * (b1 - b0)
    row = {k: v / len(data.rollout) for k, v in sums.items()}
    row.update(epoch=epoch, lam=float(log_lam.detach().exp()) if cfg.mode == "cvar" else None,
               eta=float(eta.detach()) if cfg.mode == "cvar" else None)
    return row


def _checkpoint(t: _Training, path: str, identity: Mapping[str, Any], epoch: int) -> None:
    import torch

    state = {"identity": identity, "epoch": epoch, "history": t.history, "model": t.model.state_dict(),
             "opt": t.opt.state_dict(), "dual_opt": t.dual_opt.state_dict(), "sched": t.sched.state_dict(),
             "eta": float(t.eta.detach()), "log_lam": float(t.log_lam.detach()), "rng": t.rng.bit_generator.state,
             "torch_rng": torch.get_rng_state()}
    atomic_write(path, lambda f: torch.save(state, f))


def _restore(t: _Training, path: str, identity: Mapping[str, Any]) -> None:
    """Continue from the last finished epoch of an interrupted run (same config and data only)."""
    import torch

    state = torch.load(path, map_location="cpu", weights_only=False)
    _check_identity(state["identity"], identity, path)
    t.model.load_state_dict(state["model"])
    t.opt.load_state_dict(state["opt"])
    t.dual_opt.load_state_dict(state["dual_opt"])
    t.sched.load_state_dict(state["sched"])
    with torch.no_grad():
        t.eta.fill_(state["eta"])
        t.log_lam.fill_(state["log_lam"])
    t.rng.bit_generator.state = state["rng"]
    torch.set_rng_state(state["torch_rng"])
    t.start_epoch, t.history, t.eta_ready = state["epoch"] + 1, state["history"], True


def fit_calibration(raw: np.ndarray, y: np.ndarray, kind: str) -> tuple[float, float]:
    """(temperature, bias) of the output calibration ``kind`` (CALIBRATIONS) fitted on raw logits and labels."""
    if kind == "platt":
        return calibration.fit_platt(raw, y)
    if kind == "temperature":
        return calibration.fit_temperature(raw, y), 0.0
    return 1.0, 0.0


def _recalibrate(model: Any, valid: RouterData, cfg: RouterTrainConfig) -> None:
    """Fit the output calibration on the validation rows: Platt (scale and bias) or one temperature."""
    import torch

    if cfg.recalibration == "none":
        return
    with torch.no_grad():
        raw = model.untempered_logits(torch.from_numpy(valid.features)).numpy()
    model.set_temperature(*fit_calibration(raw, valid.y, cfg.recalibration))


@dataclass
class RouterTrainArgs:
    """Train the R2V router from runner outputs (router shards of SLM-only rollouts, the chain's router stage)."""

    train: str
    """runner output directory (or .parquet file) with the training split's router rows"""
    valid: str
    """runner output directory (or .parquet file) with the validation split's router rows"""
    run_dir: str
    """where router.pt, router_metrics.json and the resumable training state go"""
    config: RouterTrainConfig = field(default_factory=RouterTrainConfig)


def _default_feature_names(d: int) -> list[str]:
    """The feature layout of ``r2v_agents.features`` when the width matches it, else f0..f{d-1}."""

    return list(FEATURE_NAMES) if d == len(FEATURE_NAMES) else [f"f{i}" for i in range(d)]


def _check_identity(found: Mapping[str, Any] | None, expected: Mapping[str, Any], where: str) -> None:
    if found != expected:
        changed = sorted(k for k in expected if (found or {}).get(k) != expected[k])
        raise ValueError(f"{where} belongs to a router run with different {changed}; use a fresh run dir")


def _finite(row: dict[str, Any]) -> dict[str, Any]:
    """NaN -> None so that history rows stay valid JSON."""
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
