"""Router stability: the bagged router with cross-fitted calibration (r2v_train/router/bagging.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import r2v_envs  # noqa: F401
from r2v_agents.routers import MLPRouter
from r2v_envs.errors import UnknownChoiceError
from r2v_train.chain.stages import ChainConfig, stage_key
from r2v_train.config import load_config
from r2v_train.router.bagging import fit_router, member_folds
from r2v_train.router.config import RouterTrainConfig
from r2v_train.router.data import RouterData
from r2v_train.router.settings import SETTINGS, resolve_variants
from tests.support.router_rows import synthetic_rollouts

BASE = RouterTrainConfig(epochs=15, batch_size=128, lr=0.01, hidden=(16,), progress=False, threshold_rule="bayes")
BAGGED = dataclasses.replace(BASE, **SETTINGS["bagged"])


def _rollouts(n_rollouts: int, seed: int) -> RouterData:
    """Synthetic rollouts: 30% fail, failing ones run longer; a noisy feature separates their steps only partly."""
    return synthetic_rollouts(n_rollouts, seed, fail_rate=0.3, shift=1.5, step_slope=0.05)


def test_member_folds_hold_each_rollout_out_once_per_split():
    folds = member_folds(10, bag=8, folds=4, seed=3)
    for split in (folds[:4], folds[4:]):
        assert (np.sum(split, axis=0) == 1).all()  # every rollout out of fold exactly once per split
    assert not all((a == b).all() for a, b in zip(folds[:4], folds[4:]))  # the second split is a new permutation
    assert [f.sum() for f in member_folds(10, bag=3, folds=1, seed=0)] == [0, 0, 0]


@pytest.mark.slow
def test_bagged_router_operating_point_moves_less_across_repeats():
    """Repeats as the pipeline makes them: new training and validation rollouts and a new router seed. The
    escalation rate on one fixed test set (the operating point) spreads less for the bagged router with pooled
    calibration than for the paper's single router on the same data."""
    test = _rollouts(200, 99)
    rates: dict[str, list[float]] = {"single": [], "bagged": []}
    for rep in range(5):
        train, valid = _rollouts(90, 10 + rep), _rollouts(20, 50 + rep)
        for name, cfg in (("single", BASE), ("bagged", BAGGED)):
            r = fit_router(train, valid, dataclasses.replace(cfg, seed=rep))
            rates[name].append(float(np.mean(r.model.predict_proba(test.features) >= r.threshold)))
    spread = {k: max(v) - min(v) for k, v in rates.items()}
    # measured: 0.20 vs 0.38 (bagging calibrated on validation alone: 0.33, as on the default run: the Platt fit on
    # the few validation rollouts carries the spread, and pooling the cross-fitted training rows removes it)
    assert spread["bagged"] < 0.7 * spread["single"], rates


@pytest.mark.slow
def test_bagged_router_is_deterministic_resumable_and_loads_as_one_router(tmp_path):
    train, valid = _rollouts(60, 1), _rollouts(20, 2)
    a = fit_router(train, valid, BAGGED, run_dir=tmp_path / "a")
    b = fit_router(train, valid, BAGGED, run_dir=tmp_path / "b")
    assert (tmp_path / "a" / "router.pt").read_bytes() == (tmp_path / "b" / "router.pt").read_bytes()
    assert a.threshold == b.threshold and a.metrics["calibration_rows"] == len(train) + len(valid)
    assert len(a.metrics["members"]) == 8
    assert len({m["seed"] for m in a.metrics["members"]}) == 8
    router = MLPRouter.load(tmp_path / "a" / "router.pt")
    assert router.threshold == a.threshold
    assert router.predict(valid.features[:7]).tobytes() == a.model.predict_proba(valid.features[:7]).astype(
        float).tobytes()
    again = fit_router(train, valid, BAGGED, run_dir=tmp_path / "a")  # finished: loaded, not retrained
    assert again.metrics == a.metrics
    with pytest.raises(ValueError, match="different"):
        fit_router(train, valid, dataclasses.replace(BAGGED, seed=1), run_dir=tmp_path / "a")
    single = fit_router(train, valid, BASE)  # the paper's router is untouched by the new fields
    assert "members" not in single.metrics


def test_bagging_config_and_paper_identity():
    assert "bag" not in RouterTrainConfig().identity()  # paper routers keep their identity and stage key
    chain = ChainConfig()
    assert stage_key(chain, "router", ["x"]) == stage_key(
        dataclasses.replace(chain, router=dataclasses.replace(chain.router, bag=1, calibrate_on="valid")), "router",
        ["x"])
    with pytest.raises(ValueError, match="pooled"):
        RouterTrainConfig(calibrate_on="pooled")
    with pytest.raises(UnknownChoiceError):
        RouterTrainConfig(calibrate_on="test")
    assert resolve_variants(["bagged"])["bagged"]["calibrate_on"] == "pooled"
    cfg = load_config({"extends": "alfworld.yaml", "router_variants": ["bagged"], "repeats": {"n": 3, "variants": ["bagged"]},
                       "chain": {"router": {"bag": 4, "calibrate_on": "pooled"}}})
    assert cfg.study.repeats.variants == ("bagged",) and cfg.chain.router.bag == 4
    with pytest.raises(UnknownChoiceError):
        load_config({"preset": "tiny", "repeats": {"n": 2, "variants": ["bagged"]}})  # not in router_variants
