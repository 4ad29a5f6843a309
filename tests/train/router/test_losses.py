"""Router and consistency losses (r2v_train/router/losses.py) against hand-computed values."""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")

from r2v_train.router.losses import brier, cvar, cvar_lagrangian, jsd, routing_surrogate, seed_risk  # noqa: E402

COSTS = {"c_slm": 0.02, "c_llm": 1.0, "kappa": 1.96}


def test_routing_surrogate_hand_values():
    p = torch.tensor([0.0, 1.0, 0.0, 1.0, 0.25])
    y = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0])
    # d=0,y=0: c_SLM; d=1: c_LLM whatever y; d=0,y=1: c_SLM + kappa; p=.25,y=1: .02*.75 + .25 + 1.96*.75
    expected = torch.tensor([0.02, 1.0, 1.98, 1.0, 0.015 + 0.25 + 1.47])
    assert torch.allclose(routing_surrogate(p, y, **COSTS), expected)


def test_routing_surrogate_rejects_costs_outside_eq8():
    with pytest.raises(ValueError, match="c_slm < c_llm"):
        routing_surrogate(torch.tensor([0.5]), torch.tensor([1.0]), c_slm=1.0, c_llm=1.0, kappa=1.0)
    with pytest.raises(ValueError, match="kappa > 0"):
        routing_surrogate(torch.tensor([0.5]), torch.tensor([1.0]), c_slm=0.0, c_llm=1.0, kappa=0.0)


def test_brier_hand_value_and_minimiser():
    assert float(brier(torch.tensor([0.2, 0.9]), torch.tensor([0, 1]))) == pytest.approx((0.04 + 0.01) / 2)
    # Theorem 1: for a fixed feature with P(y=1)=0.3 the constant p minimising Brier is 0.3
    y = torch.tensor([1.0, 1.0, 1.0] + [0.0] * 7)
    grid = torch.linspace(0, 1, 101)
    losses = torch.stack([brier(torch.full_like(y, float(g)), y) for g in grid])
    assert float(grid[losses.argmin()]) == pytest.approx(0.3)


def test_seed_risk_means_each_seed_and_carries_gradients():
    step = torch.tensor([1.0, 3.0, 10.0, 4.0], requires_grad=True)
    assert torch.allclose(seed_risk(step, torch.tensor([0, 0, 1, 0]), 2), torch.tensor([8 / 3, 10.0]))
    risk = seed_risk(step, torch.tensor([42, 42, -5, 42]))  # arbitrary ids: renumbered in sorted order
    assert torch.allclose(risk, torch.tensor([10.0, 8 / 3]))
    risk.sum().backward()
    assert torch.allclose(step.grad, torch.tensor([1 / 3, 1 / 3, 1.0, 1 / 3]))
    with pytest.raises(ValueError, match="equal length"):
        seed_risk(step.detach(), torch.tensor([0, 1]))


@pytest.mark.parametrize(("alpha", "expected"), [(0.2, 10.0), (0.3, (10 + 0.5 * 4) / 1.5),
                                                  (0.5, (10 + 4 + 0.5 * 3) / 2.5), (1.0, 4.0)])
def test_cvar_exact_tail_hand_values(alpha, expected):
    r = torch.tensor([3.0, 1.0, 10.0, 2.0, 4.0])
    assert float(cvar(r, alpha)) == pytest.approx(expected)


def test_cvar_rockafellar_uryasev_minimum_equals_exact_tail():
    r = torch.tensor([0.3, 2.5, 1.0, 7.0, 0.1, 4.0, 2.2])
    for alpha in (0.1, 0.25, 0.5, 0.9):
        etas = torch.linspace(-1, 8, 9001)
        ru = torch.stack([cvar(r, alpha, eta=e) for e in etas])
        assert float(ru.min()) == pytest.approx(float(cvar(r, alpha)), abs=1e-3)
        assert bool((ru >= cvar(r, alpha) - 1e-5).all())  # RU upper-bounds CVaR at every eta


def test_cvar_gradient_reaches_only_the_tail():
    r = torch.tensor([1.0, 5.0, 2.0, 9.0], requires_grad=True)
    cvar(r, 0.5).backward()
    assert torch.allclose(r.grad, torch.tensor([0.0, 0.5, 0.0, 0.5]))
    with pytest.raises(ValueError, match="alpha"):
        cvar(r.detach(), 0.0)


def test_lagrangian_hand_value():
    risk = torch.tensor([1.0, 3.0])
    p, y = torch.tensor([0.5, 0.0]), torch.tensor([1.0, 0.0])
    # mean 2 + lam 2 * (CVaR_.5 = 3 - eps .1) + 0.5 * Brier (.25 + 0) / 2
    value = cvar_lagrangian(risk, p, y, lam=2.0, alpha=0.5, epsilon=0.1, brier_weight=0.5)
    assert float(value) == pytest.approx(2 + 2 * 2.9 + 0.5 * 0.125)
    ru = cvar_lagrangian(risk, p, y, lam=1.0, alpha=0.5, epsilon=0.0, brier_weight=0.0, eta=torch.tensor(2.0))
    assert float(ru) == pytest.approx(2 + (2 + (1.0 / 2) / 0.5))


def test_jsd_hand_value_symmetry_bounds():
    p = torch.log(torch.tensor([0.5, 0.5]))
    q = torch.log(torch.tensor([1.0, 0.0]))
    kl_pm = 0.5 * math.log(0.5 / 0.75) + 0.5 * math.log(0.5 / 0.25)
    kl_qm = math.log(1 / 0.75)
    assert float(jsd(p, q)) == pytest.approx(0.5 * (kl_pm + kl_qm), abs=1e-6)
    assert float(jsd(p, q)) == pytest.approx(float(jsd(q, p)), abs=1e-7)
    gen = torch.Generator().manual_seed(0)
    a = torch.log_softmax(3 * torch.randn(64, 7, generator=gen), -1)
    b = torch.log_softmax(3 * torch.randn(64, 7, generator=gen), -1)
    values = jsd(a, b)
    assert values.shape == (64,)
    assert bool((values > 0).all()) and bool((values <= math.log(2) + 1e-6).all())
    assert torch.allclose(jsd(a, a), torch.zeros(64), atol=1e-6)
    disjoint = jsd(torch.log(torch.tensor([1.0, 0.0])), torch.log(torch.tensor([0.0, 1.0])))
    assert float(disjoint) == pytest.approx(math.log(2))


def test_jsd_gradient_is_finite_with_zero_mass_entries():
    a = torch.log(torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0]])).requires_grad_()
    b = torch.log(torch.tensor([[0.2, 0.3, 0.5], [0.9, 0.1, 0.0]])).requires_grad_()  # row 2: both pad entry 3
    jsd(a, b).sum().backward()
    assert bool(torch.isfinite(a.grad).all()) and bool(torch.isfinite(b.grad).all())
    assert float(b.grad.abs().sum()) > 0
    with pytest.raises(ValueError, match="equal shapes"):
        jsd(a.detach(), b.detach()[:, :2])
