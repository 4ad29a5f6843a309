"""Routers behind one interface: p = r(f), threshold calibration, the hindsight oracle, the R2V MLP."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from r2v_agents.context import Context
from r2v_agents.features import FEATURE_NAMES
from r2v_agents.routers import (
    AlwaysLLM,
    AlwaysSLM,
    EntropyRouter,
    HeuristicRouter,
    MLPRouter,
    OracleRouter,
    calibrate_threshold,
)

IDX = {n: i for i, n in enumerate(FEATURE_NAMES)}


def feats(**values) -> np.ndarray:
    x = np.zeros(len(FEATURE_NAMES), dtype=np.float32)
    for k, v in values.items():
        x[IDX[k]] = v
    return x


def test_constant_routers():
    f = np.stack([feats(), feats(verifier_best=1)])
    assert AlwaysSLM().escalate(f).tolist() == [False, False]
    assert AlwaysLLM().escalate(f).tolist() == [True, True]


def test_calibrate_threshold_youden_and_target_rate():
    scores = np.array([0.1, 0.2, 0.3, 0.6, 0.7, 0.9])
    labels = np.array([0, 0, 1, 0, 1, 1])
    t = calibrate_threshold(scores, labels)
    assert t == pytest.approx(0.3)  # TPR 1, FPR 1/3: the best J on this data
    assert (scores >= calibrate_threshold(scores, target_rate=0.5)).mean() == pytest.approx(0.5)
    assert not (scores >= calibrate_threshold(scores, target_rate=0.0)).any()
    with pytest.raises(ValueError):
        calibrate_threshold(scores)


def test_calibrate_threshold_to_a_failure_recall():
    """The cheapest cut escalating at least the given share of failure rows: with ties, every row at the cut."""
    scores = np.array([0.9, 0.8, 0.8, 0.7, 0.5, 0.4, 0.2, 0.1])
    labels = np.array([1, 1, 0, 1, 1, 0, 1, 0])
    y = labels.astype(bool)
    for recall in (0.0, 0.2, 0.4, 0.5, 0.6, 0.8, 1.0):
        t = calibrate_threshold(scores, labels, recall=recall)
        assert (scores[y] >= t).mean() >= recall
        higher = scores[scores > t]  # any higher cut misses the recall
        if higher.size:
            assert (scores[y] >= higher.min()).mean() < recall
    assert calibrate_threshold(scores, labels, recall=0.6) == pytest.approx(0.7)  # 3 of the 5 failure rows
    assert calibrate_threshold(scores, labels, recall=0.8) == pytest.approx(0.5)
    assert np.isinf(calibrate_threshold(scores, labels, recall=0.0))
    with pytest.raises(ValueError, match="recall"):
        calibrate_threshold(scores, labels, recall=1.5)
    with pytest.raises(ValueError, match="failure rows"):
        calibrate_threshold(scores, np.zeros(8), recall=0.5)


def test_entropy_router_calibrated_on_validation():
    ent = np.array([0.05, 0.1, 0.2, 1.5, 2.0, 3.0])
    f = np.stack([feats(token_entropy_mean=e) for e in ent])
    r = EntropyRouter()
    r.calibrate(f, np.array([0, 0, 0, 1, 1, 1]))
    assert r.escalate(f).tolist() == [False] * 3 + [True] * 3
    assert np.all((r.predict(f) >= 0) & (r.predict(f) < 1))


def test_heuristic_router_rules():
    r = HeuristicRouter()
    good = feats(verifier_best=0.9, verifier_worst=0.8, candidate_consistency=1.0, horizon_fraction=0.9)
    split = feats(verifier_best=0.6, verifier_worst=0.5, candidate_consistency=0.4)
    late_bad = feats(verifier_best=0.7, verifier_worst=0.2, candidate_consistency=0.8, horizon_fraction=0.8)
    p = r.predict(np.stack([good, split, late_bad]))
    assert p.tolist() == pytest.approx([0.1, 0.6, 0.5])
    assert r.escalate(np.stack([good, split, late_bad])).tolist() == [False, True, True]


def test_oracle_router_uses_logged_slm_failures(tmp_path):
    from r2v_agents.policy import BatchPolicy, Decision
    from r2v_agents.runner import RunConfig, run

    class WestWalker(BatchPolicy):  # loses every corridor except when it is the expert's move anyway
        def act_batch(self, contexts, infos):
            return [Decision(action="go west" if c.task_id.endswith(("1", "3")) else "look") for c in contexts]

    run(WestWalker(), RunConfig("R2V/Scripted-v0", str(tmp_path), task_ids=("scripted-1", "scripted-2"),
                                seeds=(0, 5), max_steps=3, progress=False))
    r = OracleRouter.from_run(tmp_path)
    assert r.hindsight and r.failed == {("scripted-1", 0), ("scripted-1", 5), ("scripted-2", 0), ("scripted-2", 5)}
    ctxs = [replace(Context.start("g", "o", {}), task_id=t, extra={"z": z})
            for t, z in [("scripted-1", 0), ("scripted-7", 0)]]
    assert r.predict(np.zeros((2, 15)), ctxs).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="contexts"):
        r.predict(np.zeros((1, 15)))


def tiny_mlp():
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(15, 8), torch.nn.GELU(), torch.nn.Linear(8, 1))


def test_mlp_router_with_a_torch_module_spec_and_standardisation():
    import torch

    model = tiny_mlp()
    spec = {"names": list(FEATURE_NAMES), "mean": [1.0] * 15, "std": [2.0] * 15, "ablation": "no_entropy"}
    r = MLPRouter(model, spec, threshold=0.5)
    f = np.random.default_rng(0).normal(size=(4, 15)).astype(np.float32)
    masked = f.copy()
    masked[:, :4] = 0.0
    expected = torch.sigmoid(model(torch.from_numpy((masked - 1.0) / 2.0))).reshape(-1).detach().numpy()
    assert r.predict(f) == pytest.approx(expected, abs=1e-6)
    with pytest.raises(ValueError, match="trained on features"):
        MLPRouter(model, {"names": ["a"] * 15})


def test_mlp_router_loads_a_saved_router_mlp(tmp_path):
    from r2v_agents.router_mlp import RouterMLP, save_router

    rng = np.random.default_rng(0)
    f = rng.normal(2.0, 3.0, size=(64, 15)).astype(np.float32)
    model = RouterMLP(in_features=15)
    spec = {"names": list(FEATURE_NAMES), "mean": f.mean(0).tolist(), "std": f.std(0).tolist(),
            "variant": "pseudo_entropy"}
    model.set_standardisation(spec["mean"], spec["std"])
    save_router(tmp_path / "router.pt", model, spec, threshold=0.42, meta={"mode": "cvar"})
    r = MLPRouter.load(tmp_path / "router.pt")
    assert r.threshold == pytest.approx(0.42) and r.variant == "pseudo_entropy" and r.meta["mode"] == "cvar"
    p = r.predict(f)
    assert p.shape == (64,) and p == pytest.approx(model.eval().predict_proba(f), abs=1e-6)  # scaled once
    assert MLPRouter.load(tmp_path / "router.pt", threshold=1.01).escalate(f).sum() == 0
    (tmp_path / "bad.pt").write_bytes(b"not a router")
    with pytest.raises(ValueError):
        MLPRouter.load(tmp_path / "bad.pt")


def test_fast_dropout_keeps_one_minus_p_and_is_governed_by_torch_seeds():
    """FastDropout keeps a share 1 - p of the units, scales them by 1 / (1 - p), draws its mask stream from a seed
    taken from torch's generator (so manual_seed and reseed reproduce it), and is the identity in eval mode."""
    torch = pytest.importorskip("torch")
    from r2v_agents.router_mlp import FastDropout

    x = torch.ones(512, 128)
    torch.manual_seed(3)
    drop = FastDropout(0.2)
    out = drop(x)
    kept = out != 0
    assert abs(kept.float().mean().item() - 0.8) < 0.01
    assert torch.allclose(out[kept], torch.full_like(out[kept], 1 / 0.8))
    assert not torch.equal(drop(x), out)  # the stream moves on
    torch.manual_seed(3)
    assert torch.equal(FastDropout(0.2)(x), out)  # a fresh module under the same torch seed
    drop.reseed(11)
    first = drop(x)
    drop.reseed(11)
    assert torch.equal(drop(x), first) and not torch.equal(first, out)
    assert torch.equal(drop.eval()(x), x)
