"""Pure loss functions of the R2V router and the consistency regulariser (Sec. 3.1-4.1, Eq. 6 and 8-11).

Every function takes and returns torch tensors and has no state; the training loops in ``router_train.py`` and
``dpo_consistency.py`` compose them. torch is imported inside the functions so that this module imports without
the ``train`` extra.

Example:
    >>> import torch
    >>> p, y = torch.tensor([0.2, 0.9]), torch.tensor([0.0, 1.0])
    >>> routing_surrogate(p, y, c_slm=0.02, c_llm=1.0, kappa=1.96)
    tensor([0.2160, 1.0980])
    >>> float(brier(p, y))
    0.025...
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from r2v_envs.errors import UnknownChoiceError

if TYPE_CHECKING:
    import torch


def routing_surrogate(p: torch.Tensor, y: torch.Tensor, c_slm: float, c_llm: float, kappa: float) -> torch.Tensor:
    """Per-step cost-sensitive routing loss, Eq. 8: c_SLM (1-p) + c_LLM p + kappa y (1-p).

    ``p`` is the soft escalation probability, ``y`` the episode-failure label (1 = the SLM episode failed).
    Works elementwise, so ``p`` may also be a hard decision d in {0, 1} (Assumption 3).
    """
    if not c_slm < c_llm or kappa <= 0:
        raise ValueError(f"Eq. 8 needs c_slm < c_llm and kappa > 0; got c_slm={c_slm}, c_llm={c_llm}, kappa={kappa}")
    y = y.to(p.dtype)
    return c_slm * (1 - p) + c_llm * p + kappa * y * (1 - p)


COST_SCALES: tuple[str, ...] = ("paper", "max", "regret", "miss")
"""Scales of the step routing cost ell_route (Eq. 8) on which the CVaR budget epsilon is read:

* ``paper``: Eq. 8 as written, in teacher-call units (c_LLM = 1). A failing rollout costs at least c_LLM per step
  even when every step escalates, so CVaR_alpha of the rollout risk stays >= c_LLM whenever more than alpha of the
  rollouts fail (measured on the default run: ~1.2), above every epsilon of Table 5 (0.02-0.15): lambda only climbs
  and epsilon has no effect.
* ``max``: Eq. 8 divided by its largest per-step value max(c_LLM, c_SLM + kappa) (1.98 at the defaults), so
  ell in [0, 1]. Still inert for Table 5: an all-escalated failing step costs c_LLM / 1.98 = 0.505 > 0.15.
* ``regret``: the excess of Eq. 8 over the cheapest decision for that step's label, min_d ell(d, y), divided by
  the largest such excess. It is 0 for a perfectly routed step and at most 1, so CVaR_alpha is the worst-alpha
  rollouts' mean excess cost. At the default kappa = 2 (c_LLM - c_SLM) both excesses equal c_LLM - c_SLM and
  the scaled cost is exactly |p - y|: epsilon = 0.1 reads "the worst alpha of rollouts misroute at most 10% of
  their steps". Only a router that separates failing from succeeding steps can meet it, and its tail mixes
  over-escalated successes with under-escalated failures, so tightening epsilon has no fixed direction.
* ``miss``: the failure side of the regret alone, y (1 - p): the share of a rollout's steps that belong to a
  failed episode and stay with the SLM. Every epsilon >= 0 is feasible (escalate every failing step), and a
  tighter epsilon can only be met by escalating more, the direction Table 5 reports. epsilon = 0.1 reads "in the
  worst alpha of rollouts at most 10% of the steps are failing steps left to the SLM".

The scale applies to the CVaR term (Eq. 10-11), where epsilon is read; the mean term stays Eq. 8 in teacher-call
units. Threshold selection (``calibration.select_threshold``) splits the same way.
"""


def cost_coefficients(c_slm: float, c_llm: float, kappa: float, scale: str = "paper"
                      ) -> tuple[tuple[float, float], tuple[float, float]]:
    """Eq. 8 is linear in p: ell(p, y) = keep_y (1 - p) + escalate_y p. Returns ((keep_0, escalate_0),
    (keep_1, escalate_1)) on ``scale`` (:data:`COST_SCALES`).

    Example:
        >>> cost_coefficients(0.02, 1.0, 1.96)
        ((0.02, 1.0), (1.98, 1.0))
        >>> [tuple(round(c, 6) for c in pair) for pair in cost_coefficients(0.02, 1.0, 1.96, "regret")]
        [(0.0, 1.0), (1.0, 0.0)]
    """
    if scale not in COST_SCALES:
        raise UnknownChoiceError("cost scale", scale, COST_SCALES)
    pairs = ((c_slm, c_llm), (c_slm + kappa, c_llm))
    if scale == "paper":
        return pairs
    if scale == "max":
        top = max(max(pair) for pair in pairs)
        return tuple((a / top, b / top) for a, b in pairs)  # type: ignore[return-value]
    excess = [(a - min(a, b), b - min(a, b)) for a, b in pairs]
    if scale == "miss":
        excess[0] = (0.0, 0.0)
    top = max(max(pair) for pair in excess)
    return tuple((a / top, b / top) for a, b in excess)  # type: ignore[return-value]


def scaled_routing_cost(p: torch.Tensor, y: torch.Tensor, c_slm: float, c_llm: float, kappa: float,
                        scale: str = "paper") -> torch.Tensor:
    """Eq. 8 on ``scale`` (:data:`COST_SCALES`); ``scale="paper"`` equals :func:`routing_surrogate`.

    Example:
        >>> import torch
        >>> p, y = torch.tensor([0.2, 0.9]), torch.tensor([0.0, 1.0])
        >>> scaled_routing_cost(p, y, 0.02, 1.0, 1.96, "regret")  # |p - y| at kappa = 2 (c_LLM - c_SLM)
        tensor([0.2000, 0.1000])
    """
    if not c_slm < c_llm or kappa <= 0:
        raise ValueError(f"Eq. 8 needs c_slm < c_llm and kappa > 0; got c_slm={c_slm}, c_llm={c_llm}, kappa={kappa}")
    if scale == "paper":  # the very arithmetic of Eq. 8, so the paper's router trains bit for bit as before
        return routing_surrogate(p, y, c_slm, c_llm, kappa)
    keep, esc = step_costs(y.to(p.dtype), c_slm, c_llm, kappa, scale)
    return keep * (1 - p) + esc * p


def step_costs(y: Any, c_slm: float, c_llm: float, kappa: float, scale: str = "paper") -> tuple[Any, Any]:
    """Per-step cost of keeping the SLM and of escalating for labels ``y`` (a float array or tensor) on ``scale``:
    Eq. 8 is linear in y as in p, so ell(d, y) = keep (1 - d) + escalate d with these two.

    Example:
        >>> import numpy as np
        >>> step_costs(np.array([0.0, 1.0]), 0.02, 1.0, 1.96, "miss")
        (array([0., 1.]), array([0., 0.]))
    """
    (k0, e0), (k1, e1) = cost_coefficients(c_slm, c_llm, kappa, scale)
    return k0 + (k1 - k0) * y, e0 + (e1 - e0) * y


def brier(p: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Brier calibration loss, Eq. 9: mean of (p - y)^2. Its population minimiser is q*(f) (Theorem 1)."""
    return ((p - y.to(p.dtype)) ** 2).mean()


def seed_risk(step_loss: torch.Tensor, seed_index: torch.Tensor, num_seeds: int | None = None) -> torch.Tensor:
    """Seed-level risk, Eq. 10: the mean step loss over each seed's steps, one value per seed.

    ``seed_index`` holds contiguous ids 0..num_seeds-1 (one scatter-add, no Python loop). With ``num_seeds=None``
    any integer ids are accepted and renumbered in sorted order; seeds with no steps would be 0/0, so pass
    ``num_seeds`` only when every id in range occurs.

    Example:
        >>> import torch
        >>> seed_risk(torch.tensor([1.0, 3.0, 10.0]), torch.tensor([7, 7, 2]))
        tensor([10.,  2.])
    """
    import torch

    if step_loss.shape != seed_index.shape or step_loss.dim() != 1:
        raise ValueError(f"step_loss and seed_index must be 1-D of equal length; got {tuple(step_loss.shape)} "
                         f"and {tuple(seed_index.shape)}")
    if num_seeds is None:
        _, seed_index = torch.unique(seed_index, return_inverse=True)
        num_seeds = int(seed_index.max()) + 1 if seed_index.numel() else 0
    totals = step_loss.new_zeros(num_seeds).index_add(0, seed_index, step_loss)
    counts = step_loss.new_zeros(num_seeds).index_add(0, seed_index, torch.ones_like(step_loss))
    return totals / counts


def cvar(risk: torch.Tensor, alpha: float, eta: torch.Tensor | float | None = None) -> torch.Tensor:
    """Conditional value at risk of the upper alpha tail of ``risk`` (one value per seed).

    With ``eta`` given: the Rockafellar-Uryasev objective eta + E[(R - eta)_+] / alpha, whose minimum over eta is
    CVaR_alpha and whose minibatch gradient is unbiased (used in training, eta learnable). With ``eta=None``: the
    exact minimum, i.e. the mean of the worst alpha fraction of seeds with the boundary seed weighted
    fractionally (used for evaluation; differentiable through the sort).

    Example:
        >>> import torch
        >>> r = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0])
        >>> float(cvar(r, 0.2)), float(cvar(r, 0.3)), float(cvar(r, 1.0))
        (10.0, 8.0, 4.0)
        >>> float(cvar(r, 0.2, eta=4.0))  # 4 + (6 / 5) / 0.2: RU at eta = VaR equals the exact value
        10.0
    """
    import torch

    if not 0 < alpha <= 1:
        raise ValueError(f"alpha must be in (0, 1]; got {alpha}")
    if risk.dim() != 1 or risk.numel() == 0:
        raise ValueError(f"risk must be a non-empty 1-D tensor; got shape {tuple(risk.shape)}")
    if eta is not None:
        return eta + torch.clamp(risk - eta, min=0).mean() / alpha
    n = risk.numel()
    m = alpha * n  # tail mass in units of samples
    k = min(int(math.floor(m + 1e-9)), n)
    desc = torch.sort(risk, descending=True).values
    tail = desc[:k].sum()
    if k < n and m - k > 1e-9:
        tail = tail + (m - k) * desc[k]
    return tail / m


def cvar_lagrangian(risk: torch.Tensor, p: torch.Tensor, y: torch.Tensor, lam: torch.Tensor | float, alpha: float,
                    epsilon: float, brier_weight: float, eta: torch.Tensor | float | None = None) -> torch.Tensor:
    """The router objective of Eq. 11: E_z[R(z)] + lambda (CVaR_alpha(R) - epsilon) + lambda_B Brier.

    ``risk`` is the per-seed risk from ``seed_risk``; ``p``/``y`` the step probabilities and labels for the Brier
    term. The caller decides what is differentiated: the primal step passes a detached ``lam``, the dual step
    ascends on log lambda with the constraint value.

    Example:
        >>> import torch
        >>> r, p, y = torch.tensor([1.0, 3.0]), torch.tensor([0.5]), torch.tensor([1.0])
        >>> value = cvar_lagrangian(r, p, y, lam=2.0, alpha=0.5, epsilon=0.1, brier_weight=1.0)
        >>> round(float(value), 4)  # 2 + 2 (3 - 0.1) + 0.25
        8.05
    """
    return risk.mean() + lam * (cvar(risk, alpha, eta) - epsilon) + brier_weight * brier(p, y)


def jsd(logp: torch.Tensor, logq: torch.Tensor) -> torch.Tensor:
    """Jensen-Shannon divergence (natural log) between categorical distributions given as log-probabilities.

    Works over the last dimension and returns one value per leading index. It is symmetric, zero iff the
    distributions agree, and at most log 2; used for the consistency term of Eq. 6.

    Example:
        >>> import torch
        >>> a = torch.log(torch.tensor([[1.0, 0.0], [0.5, 0.5]]))
        >>> b = torch.log(torch.tensor([[0.0, 1.0], [0.5, 0.5]]))
        >>> jsd(a, b)  # disjoint supports reach log 2; identical rows give 0
        tensor([0.6931, 0.0000])
    """
    import torch

    if logp.shape != logq.shape:
        raise ValueError(f"jsd needs equal shapes; got {tuple(logp.shape)} and {tuple(logq.shape)}")
    # Entries with no mass under either distribution (e.g. padding of candidate sets) would give
    # logaddexp(-inf, -inf), whose backward is NaN even where masked out: give them a finite stand-in.
    neither = (logp == -math.inf) & (logq == -math.inf)
    logm = torch.logaddexp(logp.masked_fill(neither, 0.0), logq.masked_fill(neither, 0.0)) - math.log(2.0)
    return (0.5 * (_kl_to_mixture(logp, logm) + _kl_to_mixture(logq, logm))).clamp(min=0.0)


def _kl_to_mixture(logp: torch.Tensor, logm: torch.Tensor) -> torch.Tensor:
    """KL(p || m) with 0 log 0 = 0. Masking before the subtraction keeps gradients finite at zero-mass entries."""
    import torch

    support = logp > -math.inf
    diff = torch.where(support, logp, torch.zeros_like(logp)) - torch.where(support, logm, torch.zeros_like(logm))
    return (logp.exp() * diff).sum(-1)
