"""Calibration and threshold selection for the router: ECE, reliability bins, temperature scaling, tau (Eq. 13).

All functions take numpy arrays of failure probabilities ``p`` (the router's p_t) and binary labels ``y``
(1 = the SLM episode failed, Eq. 7), and need nothing beyond numpy.

ECE here is the binary calibration error of the predicted failure probability itself (not of the argmax
class's confidence): 15 equal-width bins on [0, 1], ECE = sum_b (n_b / N) |mean(y in b) - mean(p in b)|.
This is what Theorem 1 (Brier -> q*) promises to drive to zero.

Example:
    >>> import numpy as np
    >>> p = np.array([0.1, 0.1, 0.9, 0.9]); y = np.array([0, 0, 1, 1])
    >>> round(expected_calibration_error(p, y), 3)  # each bin is off by 0.1
    0.1
    >>> bayes_threshold(c_slm=0.02, c_llm=1.0, kappa=1.96)
    0.5
    >>> select_threshold(np.array([0.2, 0.4, 0.6, 0.8]), np.array([0, 0, 1, 1]), 0.02, 1.0, 1.96)
    0.6
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from r2v_envs.errors import UnknownChoiceError
from r2v_train.router.losses import cvar, step_costs

THRESHOLD_RULES = ("min_cost", "bayes", "budget", "cvar_budget")


def _check(p: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    p, y = np.asarray(p, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if p.shape != y.shape or p.size == 0:
        raise ValueError(f"p and y must be non-empty and of equal length; got {p.shape} and {y.shape}")
    if not np.all((p >= 0) & (p <= 1)):
        raise ValueError("probabilities must lie in [0, 1]")
    if not np.all((y == 0) | (y == 1)):
        raise ValueError("labels must be 0 or 1")
    return p, y


@dataclass(frozen=True)
class ReliabilityBins:
    """Reliability-diagram data: per equal-width bin, the count, mean predicted p and observed failure rate."""

    edges: np.ndarray  # (n_bins + 1,)
    count: np.ndarray  # (n_bins,)
    mean_p: np.ndarray  # (n_bins,), NaN for empty bins
    rate: np.ndarray  # (n_bins,), NaN for empty bins

    def to_dict(self) -> dict[str, list]:
        return {k: [None if (isinstance(v, float) and np.isnan(v)) else v for v in getattr(self, k).tolist()]
                for k in ("edges", "count", "mean_p", "rate")}


def reliability_bins(p: np.ndarray, y: np.ndarray, n_bins: int = 15) -> ReliabilityBins:
    """Bin ``p`` into ``n_bins`` equal-width bins ([0, 1/n), ..., [(n-1)/n, 1]) for a reliability diagram."""
    p, y = _check(p, y)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    idx = np.clip(np.floor(p * n_bins).astype(np.int64), 0, n_bins - 1)
    count = np.bincount(idx, minlength=n_bins)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean_p = np.bincount(idx, weights=p, minlength=n_bins) / count
        rate = np.bincount(idx, weights=y, minlength=n_bins) / count
    return ReliabilityBins(edges=edges, count=count, mean_p=mean_p, rate=rate)


def expected_calibration_error(p: np.ndarray, y: np.ndarray, n_bins: int = 15) -> float:
    """ECE with ``n_bins`` equal-width bins (see the module docstring)."""
    bins = reliability_bins(p, y, n_bins)
    full = bins.count > 0
    return float(np.sum(bins.count[full] * np.abs(bins.rate[full] - bins.mean_p[full])) / bins.count.sum())


def brier_score(p: np.ndarray, y: np.ndarray) -> float:
    p, y = _check(p, y)
    return float(np.mean((p - y) ** 2))


def fit_temperature(logits: np.ndarray, y: np.ndarray, bounds: tuple[float, float] = (0.05, 20.0)) -> float:
    """Post-hoc temperature T minimising the validation NLL of sigmoid(logits / T) (Guo et al., 2017).

    The NLL is convex in 1/T, so a golden-section search over log T within ``bounds`` finds the optimum
    without gradients or randomness.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.normal(0, 2, 20000); y = (rng.random(20000) < 1 / (1 + np.exp(-z))).astype(int)
        >>> round(fit_temperature(3 * z, y), 1)  # logits three times too sharp -> T close to 3
        3.0
    """
    z = np.asarray(logits, dtype=np.float64).ravel()
    _, y = _check(np.zeros_like(z), y)

    def nll(log_t: float) -> float:
        s = z / np.exp(log_t)
        # -[y log sigma(s) + (1-y) log(1 - sigma(s))] = softplus(s) - y s, computed stably
        return float(np.mean(np.logaddexp(0.0, s) - y * s))

    lo, hi = np.log(bounds[0]), np.log(bounds[1])
    golden = (np.sqrt(5.0) - 1) / 2
    a, b = hi - golden * (hi - lo), lo + golden * (hi - lo)
    fa, fb = nll(a), nll(b)
    for _ in range(80):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - golden * (hi - lo)
            fa = nll(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + golden * (hi - lo)
            fb = nll(b)
    return float(np.exp((lo + hi) / 2))


def fit_platt(logits: np.ndarray, y: np.ndarray, iters: int = 50) -> tuple[float, float]:
    """Platt scaling: (T, b) minimising the NLL of sigmoid(logits / T + b), by Newton's method.

    Unlike temperature alone it also corrects a shift of the logits, e.g. the upward push of a CVaR term.

    Example:
        >>> import numpy as np
        >>> rng = np.random.default_rng(0)
        >>> z = rng.normal(0, 2, 20000); y = (rng.random(20000) < 1 / (1 + np.exp(-z))).astype(int)
        >>> t, b = fit_platt(2 * z + 1, y)  # sigmoid((2z + 1) / 2 - 0.5) = sigmoid(z)
        >>> round(t, 1), round(b, 1)
        (2.0, -0.5)
    """
    z = np.asarray(logits, dtype=np.float64).ravel()
    _, y = _check(np.zeros_like(z), y)
    t0 = fit_temperature(z, y)
    w = np.array([1.0 / t0, 0.0])  # slope a = 1/T, intercept b; start from the temperature fit
    X = np.stack([z, np.ones_like(z)], axis=1)
    for _ in range(iters):
        s = X @ w
        q = 0.5 * (1 + np.tanh(s / 2))  # stable sigmoid
        grad = X.T @ (q - y) / len(z)
        hess = (X * (q * (1 - q))[:, None]).T @ X / len(z) + 1e-9 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        w = w - step
        if np.abs(step).max() < 1e-10:
            break
    if not w[0] > 1e-6:  # logits anti-correlated with y or useless: keep the temperature-only fit
        return t0, 0.0
    return float(1.0 / w[0]), float(w[1])


def bayes_threshold(c_slm: float, c_llm: float, kappa: float) -> float:
    """tau*_route of Eq. 13 / Corollary 1: clip((c_LLM - c_SLM) / kappa, 0, 1)."""
    if kappa <= 0:
        raise ValueError(f"kappa must be > 0; got {kappa}")
    return float(min(1.0, max(0.0, (c_llm - c_slm) / kappa)))


def routing_objective(d: np.ndarray, y: np.ndarray, c_slm: float, c_llm: float, kappa: float,
                      rollout: np.ndarray | None = None, alpha: float = 0.2, lam: float = 0.0,
                      epsilon: float = 0.0, scale: str = "paper") -> float:
    """Hard-decision value of the routing objective: mean step cost (Eq. 8), plus lam (CVaR_alpha - epsilon)
    of the per-rollout mean cost (Eq. 10-11, on ``scale``: see ``losses.COST_SCALES``) when ``lam > 0``
    (``rollout``: contiguous rollout id per step)."""
    cost = c_slm * (1 - d) + c_llm * d + kappa * y * (1 - d)
    value = float(cost.mean())
    if lam > 0:
        keep, esc = step_costs(np.asarray(y, dtype=np.float64), c_slm, c_llm, kappa, scale)
        cost = keep * (1 - d) + esc * d  # the CVaR term reads its budget on ``scale``
        if rollout is None:
            raise ValueError("a CVaR term (lam > 0) needs the rollout id of every step")
        import torch

        risk = np.bincount(rollout, weights=cost) / np.bincount(rollout)
        value += lam * (float(cvar(torch.from_numpy(risk[np.isfinite(risk)]), alpha)) - epsilon)
    return value


def objective_curve(p: np.ndarray, y: np.ndarray, taus: np.ndarray, c_slm: float, c_llm: float, kappa: float,
                    rollout: np.ndarray | None = None, alpha: float = 0.2, lam: float = 0.0, epsilon: float = 0.0,
                    max_cells: int = 1 << 22, scale: str = "paper") -> tuple[np.ndarray, np.ndarray]:
    """``routing_objective`` of d = 1[p >= tau] for every tau in the decreasing array ``taus`` at once, with
    the escalation rate of each: (rates, values).

    One pass instead of one per threshold: a step escalated at tau stays escalated at every lower tau, so its
    cost change c_LLM - (c_SLM + kappa y) enters the running sums from the first tau it clears on. Rollout risks
    are accumulated the same way in blocks of thresholds (at most ``max_cells`` risk values in memory) and the
    exact CVaR of each block row comes from a partial sort.

    Example:
        >>> p, y = np.array([0.2, 0.9]), np.array([0, 1])
        >>> rates, values = objective_curve(p, y, np.array([np.inf, 0.5, 0.1]), 0.02, 1.0, 1.96)
        >>> rates.tolist(), [round(float(v), 2) for v in values]
        ([0.0, 0.5, 1.0], [1.0, 0.51, 1.0])
    """
    p, y = np.asarray(p, dtype=np.float64), np.asarray(y, dtype=np.float64)
    taus = np.asarray(taus, dtype=np.float64)
    n, n_taus = len(p), len(taus)
    if n_taus > 1 and not np.all(np.diff(taus) < 0):
        raise ValueError("taus must be strictly decreasing")
    base = c_slm + kappa * y  # cost of a step kept local
    delta = c_llm - base  # change when it is escalated
    # first tau index (in decreasing order) that each step clears; n_taus = never escalated
    first = n_taus - np.searchsorted(taus[::-1], p, side="right")
    rates = np.cumsum(np.bincount(first, minlength=n_taus + 1)[:n_taus]) / n
    values = (base.sum() + np.cumsum(np.bincount(first, weights=delta, minlength=n_taus + 1)[:n_taus])) / n
    if lam <= 0:
        return rates, values
    rollout = np.asarray(rollout).ravel()
    if rollout.shape != p.shape:
        raise ValueError(f"rollout must give one id per step; got {rollout.shape} for {p.shape}")
    base, esc = step_costs(y, c_slm, c_llm, kappa, scale)  # the CVaR term's costs, on ``scale``
    delta = esc - base
    _, rollout = np.unique(rollout, return_inverse=True)  # contiguous ids of non-empty rollouts
    groups = int(rollout.max()) + 1
    sizes = np.bincount(rollout, minlength=groups).astype(np.float64)
    m = alpha * groups  # CVaR tail mass in rollouts, as in r2v_train.router.losses.cvar
    k = min(int(np.floor(m + 1e-9)), groups)
    frac = m - k if k < groups and m - k > 1e-9 else 0.0
    order = np.argsort(first, kind="stable")
    first_sorted = first[order]
    running = np.bincount(rollout, weights=base, minlength=groups)  # per-rollout total cost, updated block by block
    block = max(1, max_cells // groups)
    cvars = np.empty(n_taus)
    for b0 in range(0, n_taus, block):
        b1 = min(b0 + block, n_taus)
        lo, hi = np.searchsorted(first_sorted, [b0, b1])
        rows = order[lo:hi]
        cells = np.bincount((first[rows] - b0) * groups + rollout[rows], weights=delta[rows],
                            minlength=(b1 - b0) * groups).reshape(b1 - b0, groups)
        risk = (running + np.cumsum(cells, axis=0)) / sizes
        running = running + cells.sum(axis=0)
        neg = -risk  # the k largest risks (and the (k+1)-th for the fractional boundary) by a partial sort
        if k >= groups:
            tail = risk.sum(axis=1)
        else:
            part = -np.partition(neg, k, axis=1)
            tail = part[:, :k].sum(axis=1) + frac * part[:, k]
        cvars[b0:b1] = tail / m
    return rates, values + lam * (cvars - epsilon)


def select_threshold(p: np.ndarray, y: np.ndarray, c_slm: float, c_llm: float, kappa: float,
                     rule: str = "min_cost", max_escalation: float | None = None, rollout: np.ndarray | None = None,
                     alpha: float = 0.2, lam: float = 0.0, epsilon: float = 0.0, grid: int = 1024,
                     scale: str = "paper") -> float:
    """Validation-time threshold selection for d_t = 1[p_t >= tau] (Sec. 3.1, Appendix C).

    Rules:
      - ``"min_cost"`` (default): the tau minimising the hard-decision routing objective on validation
        (``routing_objective``): the mean cost of Eq. 8, plus, for a router trained with the CVaR constraint, the
        multiplier it ended with (``lam``) times the rollout CVaR excess, so that thresholding keeps the
        tail-risk trade-off that training made. With ``lam = 0`` and a calibrated router this estimates tau* of
        Eq. 13 while absorbing residual miscalibration. Ties go to the higher tau (fewer teacher calls).
      - ``"bayes"``: tau* of Eq. 13, ignoring the data.
      - ``"budget"``: like ``min_cost`` among the taus whose validation escalation rate is at most
        ``max_escalation``.
      - ``"cvar_budget"``: Eq. 11's constraint on the deployed decisions: tau = min(tau*, the highest tau whose
        validation CVaR_alpha of per-rollout hard cost on ``scale`` is <= ``epsilon``). Decisions nest as tau
        falls, so every rollout's cost on the ``miss`` scale, and with it the CVaR, can only fall: the chosen tau
        (and the escalation) moves monotonically with epsilon and alpha. When no tau meets the budget (as on the
        ``paper`` scale, whose floor is c_LLM), every step escalates (tau = the lowest p).
    Candidates are the distinct values of ``p`` (at most ``grid`` of its quantiles), tau* and +inf (never).

    Example:
        >>> p, y, z = np.array([0.3, 0.45, 0.6, 0.1]), np.array([1, 1, 1, 0]), np.array([0, 0, 0, 1])
        >>> [select_threshold(p, y, 0.02, 1.0, 1.96, rule="cvar_budget", rollout=z, alpha=0.5, epsilon=e,
        ...                   scale="miss") for e in (0.7, 0.5, 0.0)]
        [0.5, 0.45, 0.3]
    """
    if rule == "bayes":
        return bayes_threshold(c_slm, c_llm, kappa)
    if rule == "cvar_budget":
        return _cvar_budget_threshold(p, y, c_slm, c_llm, kappa, rollout, alpha, epsilon, grid, scale)
    if rule not in THRESHOLD_RULES:
        raise UnknownChoiceError("threshold rule", rule, THRESHOLD_RULES)
    if rule == "budget" and (max_escalation is None or not 0 <= max_escalation <= 1):
        raise ValueError(f"rule 'budget' needs max_escalation in [0, 1]; got {max_escalation}")
    p, y = _check(p, y)
    candidates = np.unique(p)
    if len(candidates) > grid:
        candidates = np.unique(np.quantile(p, np.linspace(0, 1, grid)))
    taus = np.unique(np.r_[candidates, bayes_threshold(c_slm, c_llm, kappa), np.inf])[::-1]  # decreasing
    if lam > 0 and rollout is None:
        raise ValueError("a CVaR term (lam > 0) needs the rollout id of every step")
    escalated, values = objective_curve(p, y, taus, c_slm, c_llm, kappa, rollout, alpha, lam, epsilon, scale=scale)
    best, best_value = np.inf, np.inf
    for tau, rate, value in zip(taus, escalated, values):  # decreasing: on ties the higher tau, seen first, is kept
        if rule == "budget" and rate > max_escalation + 1e-12:
            continue
        if value < best_value - 1e-12:
            best, best_value = float(tau), float(value)
    return best  # +inf means: never escalate


def _cvar_budget_threshold(p: np.ndarray, y: np.ndarray, c_slm: float, c_llm: float, kappa: float,
                           rollout: np.ndarray | None, alpha: float, epsilon: float, grid: int, scale: str) -> float:
    """min(tau*, the highest tau meeting CVaR_alpha <= epsilon on ``scale``); see :func:`select_threshold`."""
    if rollout is None:
        raise ValueError("rule 'cvar_budget' needs the rollout id of every step")
    p, y = _check(p, y)
    candidates = np.unique(p)
    if len(candidates) > grid:
        candidates = np.unique(np.quantile(p, np.linspace(0, 1, grid)))
    tau_star = bayes_threshold(c_slm, c_llm, kappa)
    taus = np.unique(np.r_[candidates, tau_star, np.inf])[::-1]  # decreasing
    _, plain = objective_curve(p, y, taus, c_slm, c_llm, kappa)
    _, with_tail = objective_curve(p, y, taus, c_slm, c_llm, kappa, rollout, alpha, lam=1.0, epsilon=0.0, scale=scale)
    tail = with_tail - plain  # CVaR_alpha of the hard per-rollout cost at each tau
    ok = np.flatnonzero(tail <= epsilon + 1e-12)
    highest = float(taus[ok[0]]) if len(ok) else float(candidates[0])
    return min(tau_star, highest)
