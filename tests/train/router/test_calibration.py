"""ECE, reliability bins, post-hoc recalibration and threshold selection (r2v_train/router/calibration.py)."""

from __future__ import annotations

import numpy as np
import pytest

from r2v_envs.errors import UnknownChoiceError
from r2v_train.router import calibration as cal

SEED = 0
COSTS = (0.02, 1.0, 1.96)  # c_slm, c_llm, kappa


def test_ece_and_bins_hand_values():
    p = np.array([0.05, 0.05, 0.5, 0.5, 1.0])
    y = np.array([0, 1, 1, 1, 1])
    bins = cal.reliability_bins(p, y, n_bins=15)
    assert bins.count.sum() == 5 and bins.count[0] == 2 and bins.count[7] == 2 and bins.count[14] == 1
    assert bins.rate[0] == pytest.approx(0.5) and bins.mean_p[7] == pytest.approx(0.5)
    assert np.isnan(bins.rate[1])  # empty bin
    # |.5-.05|*2 + |1-.5|*2 + |1-1|*1, over 5
    assert cal.expected_calibration_error(p, y) == pytest.approx((0.45 * 2 + 0.5 * 2) / 5)
    assert bins.to_dict()["rate"][1] is None


def test_ece_is_small_for_calibrated_and_large_for_overconfident():
    rng = np.random.default_rng(SEED)
    q = rng.random(50_000)
    y = (rng.random(q.size) < q).astype(int)
    assert cal.expected_calibration_error(q, y) < 0.01
    assert cal.expected_calibration_error(np.clip(2 * q - 0.5, 0, 1), y) > 0.1


def test_inputs_are_checked():
    with pytest.raises(ValueError, match="equal length"):
        cal.expected_calibration_error(np.array([0.1, 0.2]), np.array([1]))
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        cal.brier_score(np.array([1.5]), np.array([1]))
    with pytest.raises(ValueError, match="0 or 1"):
        cal.brier_score(np.array([0.5]), np.array([2]))


def test_temperature_and_platt_recover_a_known_distortion():
    rng = np.random.default_rng(SEED)
    z = rng.normal(0, 1.5, 40_000)
    y = (rng.random(z.size) < 1 / (1 + np.exp(-z))).astype(int)
    assert cal.fit_temperature(0.5 * z, y) == pytest.approx(0.5, rel=0.05)
    t, b = cal.fit_platt(3 * z - 2, y)  # sigmoid((3z - 2) / 3 + 2/3) = sigmoid(z)
    assert t == pytest.approx(3.0, rel=0.05) and b == pytest.approx(2 / 3, abs=0.05)


@pytest.mark.parametrize(("c_slm", "c_llm", "kappa", "tau"),
                         [(0.02, 1.0, 1.96, 0.5), (0.0, 3.0, 1.0, 1.0), (1.0, 0.5, 1.0, 0.0), (0.1, 0.6, 2.0, 0.25)])
def test_bayes_threshold_eq13_with_clipping(c_slm, c_llm, kappa, tau):
    assert cal.bayes_threshold(c_slm, c_llm, kappa) == pytest.approx(tau)


def test_min_cost_threshold_matches_brute_force():
    rng = np.random.default_rng(SEED)
    p = np.round(rng.random(400), 3)
    y = (rng.random(400) < p).astype(int)
    tau = cal.select_threshold(p, y, *COSTS)

    def cost(t):
        d = p >= t
        return np.mean(COSTS[0] * (1 - d) + COSTS[1] * d + COSTS[2] * y * (1 - d))

    brute = min(cost(t) for t in np.r_[np.unique(p), np.inf])
    assert cost(tau) == pytest.approx(brute)
    assert 0.3 < tau < 0.7  # calibrated p: the optimum sits near tau* = 0.5


def test_budget_rule_respects_the_escalation_cap_and_bad_rules_raise():
    rng = np.random.default_rng(SEED)
    p = rng.random(1000)
    y = (rng.random(1000) < p).astype(int)
    tau = cal.select_threshold(p, y, *COSTS, rule="budget", max_escalation=0.1)
    assert np.mean(p >= tau) <= 0.1
    assert cal.select_threshold(p, y, *COSTS, rule="bayes") == 0.5
    with pytest.raises(UnknownChoiceError, match="did you mean 'bayes'"):
        cal.select_threshold(p, y, *COSTS, rule="bayse")
    with pytest.raises(ValueError, match="max_escalation"):
        cal.select_threshold(p, y, *COSTS, rule="budget")


def test_cvar_term_in_threshold_selection_escalates_more_on_the_tail():
    pytest.importorskip("torch")
    rng = np.random.default_rng(SEED)
    rollout = np.repeat(np.arange(300), 10)
    q = np.repeat(rng.random(300) * 0.45, 10)  # every rollout below tau*: mean cost says never escalate
    y = np.repeat(rng.random(300) < q[::10], 10).astype(int)
    p = np.clip(q + rng.normal(0, 0.02, q.size), 0, 1)
    plain = cal.select_threshold(p, y, *COSTS, rollout=rollout)
    tail = cal.select_threshold(p, y, *COSTS, rollout=rollout, lam=10.0, epsilon=0.1)
    assert tail < plain
    with pytest.raises(ValueError, match="rollout id"):
        cal.select_threshold(p, y, *COSTS, lam=1.0)


@pytest.mark.parametrize("lam, alpha", [(0.0, 0.2), (3.0, 0.2), (3.0, 0.33), (3.0, 1.0)])
def test_objective_curve_equals_the_objective_at_every_threshold(lam, alpha):
    """The one-pass curve behind select_threshold agrees with routing_objective evaluated tau by tau, also when
    its rollout risks are accumulated in many small blocks."""
    pytest.importorskip("torch")
    rng = np.random.default_rng(SEED)
    p = np.round(rng.random(2000), 2)  # ties between steps
    y = (rng.random(2000) < p).astype(int)
    rollout = rng.integers(0, 150, 2000) * 7  # ids with gaps
    taus = np.unique(np.r_[p, 0.5, np.inf])[::-1]
    rates, values = cal.objective_curve(p, y, taus, *COSTS, rollout, alpha, lam, 0.1, max_cells=1000)
    contiguous = np.unique(rollout, return_inverse=True)[1]
    expected = [cal.routing_objective((p >= t).astype(float), y, *COSTS, contiguous, alpha, lam, 0.1) for t in taus]
    np.testing.assert_allclose(values, expected, atol=1e-9)
    np.testing.assert_allclose(rates, [(p >= t).mean() for t in taus])
