"""Router model and training (r2v_agents/router_mlp.py, r2v_train/router/train.py): Theorem 1 calibration,
CVaR tail control, save/load, resume and feature-spec checks."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from r2v_agents.router_mlp import RouterMLP, load_router, save_router  # noqa: E402
from r2v_agents.features import FeatureSpecError  # noqa: E402
from r2v_envs.errors import UnknownChoiceError  # noqa: E402
from r2v_train import cli  # noqa: E402
from r2v_train.router import train as rt  # noqa: E402
from r2v_train.router.config import RouterTrainConfig
from r2v_train.router.data import RouterData
from r2v_train.router.losses import cvar, routing_surrogate, seed_risk  # noqa: E402
from r2v_train.router.train import evaluate_router, train_router  # noqa: E402

SEED = 0
NAMES = [f"feat_{i}" for i in range(15)]


@pytest.fixture(autouse=True, scope="module")
def _one_thread():  # module scope: it must also cover the module-scoped training fixture
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def logistic_data(n: int, seed: int) -> tuple[RouterData, np.ndarray]:
    """Steps with a known q*(f) = sigmoid(w . f), y ~ Bernoulli(q*); rollouts of 10 steps."""
    rng = np.random.default_rng(seed)
    w = np.random.default_rng(SEED).normal(0, 0.6, 15)
    f = rng.normal(size=(n, 15)).astype(np.float32)
    q = 1 / (1 + np.exp(-(f @ w)))
    y = (rng.random(n) < q).astype(np.int8)
    return RouterData(features=f, y=y, seed=np.arange(n) // 10 + 10 * n * seed, feature_names=NAMES), q


def heavy_tail_data(n_rollouts: int, seed: int) -> RouterData:
    """Rollout-level labels (Eq. 7) with a tail group: 20% of rollouts fail 45% of the time (just below
    tau* = 0.5, so cost-only routing never escalates them), the rest fail 8% of the time."""
    rng = np.random.default_rng(seed)
    tail = rng.random(n_rollouts) < 0.2
    fail = rng.random(n_rollouts) < np.where(tail, 0.45, 0.08)
    rid = np.repeat(np.arange(n_rollouts), rng.integers(5, 25, n_rollouts))
    f = rng.normal(size=(len(rid), 15)).astype(np.float32)
    f[:, 0] += 2.0 * tail[rid]
    f[:, 1] += 0.7 * fail[rid]
    return RouterData(features=f, y=fail[rid].astype(np.int8), seed=rid + 100_000 * seed,
                      episode=np.zeros(len(rid), dtype=int), feature_names=NAMES)


def test_brier_router_is_calibrated_on_held_out_data():
    """Theorem 1: Brier minimisation recovers q*(f); ECE <= 0.03 on held-out steps."""
    train, _ = logistic_data(20_000, 1)
    valid, _ = logistic_data(5_000, 2)
    test, q = logistic_data(20_000, 3)
    cfg = RouterTrainConfig(mode="brier", epochs=8, batch_size=1024, progress=False, seed=SEED)
    result = train_router(train, valid, cfg)
    p = result.model.predict_proba(test.features)
    metrics = evaluate_router(result.model, test, result.threshold, cfg)
    assert metrics["ece"] <= 0.03
    assert np.mean(np.abs(p - q)) < 0.05
    assert metrics["brier"] < np.mean((q - test.y) ** 2) + 0.01  # close to the Bayes Brier score
    assert 0.4 <= result.threshold <= 0.6  # min-cost threshold of a calibrated router sits near tau* = 0.5


@pytest.fixture(scope="module")
def tail_runs():
    train, valid, test = heavy_tail_data(1500, 1), heavy_tail_data(500, 2), heavy_tail_data(1000, 3)
    out = {}
    for mode in ("brier", "cvar"):
        cfg = RouterTrainConfig(mode=mode, epochs=8, batch_size=1024, progress=False, seed=SEED)
        result = train_router(train, valid, cfg)
        out[mode] = (result, evaluate_router(result.model, test, result.threshold, cfg))
    return out


def test_cvar_training_lowers_tail_rollout_risk_vs_brier_only(tail_runs):
    (brier_run, brier_m), (cvar_run, cvar_m) = tail_runs["brier"], tail_runs["cvar"]
    # held-out top-20% rollout cost of the deployed (thresholded) router
    assert cvar_m["rollout_cvar_hard"] < 0.9 * brier_m["rollout_cvar_hard"]
    assert cvar_m["escalation_rate"] > brier_m["escalation_rate"] + 0.05  # tail control buys teacher calls
    assert cvar_run.metrics["lambda"] > 1.0 and brier_run.metrics["lambda"] == 0.0
    # the training term itself (before recalibration and thresholding) lowers the soft tail risk
    test, soft = heavy_tail_data(1000, 3), {}
    for mode, (run, _) in tail_runs.items():
        with torch.no_grad():
            p = torch.sigmoid(run.model.untempered_logits(torch.from_numpy(test.features))).double()
        step = routing_surrogate(p, torch.from_numpy(test.y).double(), 0.02, 1.0, 1.96)
        risk = seed_risk(step, torch.from_numpy(test.rollout_index()[0]))
        soft[mode] = float(cvar(risk, 0.2))
    assert soft["cvar"] < soft["brier"] - 0.05


def test_cvar_router_stays_calibrated_after_platt_scaling(tail_runs):
    assert tail_runs["cvar"][1]["ece"] <= tail_runs["brier"][1]["ece"] + 0.03
    assert tail_runs["cvar"][0].metrics["logit_bias"] < 0  # Platt removed the CVaR term's upward shift


def test_run_dir_round_trip_resume_and_reuse(tmp_path, monkeypatch):
    train, valid = heavy_tail_data(200, 4), heavy_tail_data(100, 5)
    cfg = RouterTrainConfig(epochs=3, batch_size=512, progress=False, seed=SEED)
    full = train_router(train, valid, cfg, run_dir=tmp_path / "full")
    model, spec, threshold, meta = load_router(tmp_path / "full" / rt.ROUTER_FILE, expected_features=NAMES)
    np.testing.assert_array_equal(model.predict_proba(valid.features), full.model.predict_proba(valid.features))
    assert threshold == full.threshold and spec["names"] == NAMES and meta["mode"] == "cvar"
    metrics = json.loads((tmp_path / "full" / rt.METRICS_FILE).read_text())
    assert len(metrics["history"]) == 3 and set(metrics["valid"]["reliability"]) == {"edges", "count", "mean_p", "rate"}

    # interrupted after the first epoch, then resumed: the same router as the uninterrupted run
    calls = {"n": 0}
    real_pack = rt._pack_batches

    def pack_then_stop(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real_pack(*args, **kwargs)

    monkeypatch.setattr(rt, "_pack_batches", pack_then_stop)
    with pytest.raises(KeyboardInterrupt):
        train_router(train, valid, cfg, run_dir=tmp_path / "resumed")
    assert os.path.exists(tmp_path / "resumed" / rt.STATE_FILE)
    assert not os.path.exists(tmp_path / "resumed" / rt.ROUTER_FILE)
    monkeypatch.setattr(rt, "_pack_batches", real_pack)
    resumed = train_router(train, valid, cfg, run_dir=tmp_path / "resumed")
    np.testing.assert_allclose(resumed.model.predict_proba(valid.features), full.model.predict_proba(valid.features),
                               atol=1e-6)

    # a finished run is reused, not retrained; another config is refused
    monkeypatch.setattr(rt, "_pack_batches", pack_then_stop)
    again = train_router(train, valid, cfg, run_dir=tmp_path / "full")
    assert again.threshold == full.threshold
    with pytest.raises(ValueError, match="different"):
        train_router(train, valid, RouterTrainConfig(epochs=3, batch_size=512, progress=False, alpha=0.1),
                     run_dir=tmp_path / "full")


def test_feature_spec_mismatches_raise(tmp_path):
    model = RouterMLP(in_features=15)
    spec = {"names": NAMES, "mean": [0.0] * 15, "std": [1.0] * 15}
    path = tmp_path / "r.pt"
    save_router(path, model, spec, threshold=0.4, meta={"note": np.float32(1.5)})
    assert load_router(path)[3] == {"note": 1.5}
    with pytest.raises(FeatureSpecError, match="position 3"):
        load_router(path, expected_features=NAMES[:3] + ["other"] + NAMES[4:])
    with pytest.raises(FeatureSpecError, match="position 14"):
        load_router(path, expected_features=NAMES[:14])
    with pytest.raises(FeatureSpecError, match=r"shape \(N, 15\)"):
        model.predict_proba(np.zeros((2, 14)))
    with pytest.raises(FeatureSpecError, match="differ from the model"):
        save_router(path, model, {**spec, "mean": [1.0] * 15}, threshold=0.4, meta={})
    with pytest.raises(FeatureSpecError, match="16 features"):
        wider = {"names": NAMES + ["x"], "mean": [0.0] * 16, "std": [1.0] * 16}
        save_router(path, model, wider, 0.4, {})
    (tmp_path / "junk.pt").write_bytes(b"not a checkpoint")
    with pytest.raises(FeatureSpecError, match="not a readable router"):
        load_router(tmp_path / "junk.pt")
    assert sorted(os.listdir(tmp_path)) == ["junk.pt", "r.pt"]  # failed saves left no temp files


def test_router_data_validation_and_tables():
    f = np.zeros((4, 15), dtype=np.float32)
    with pytest.raises(FeatureSpecError, match="NaN"):
        RouterData(features=np.full((2, 15), np.nan), y=[0, 1], seed=[0, 0])
    with pytest.raises(ValueError, match="labels"):
        RouterData(features=f, y=[0, 1, 2, 0], seed=[0, 0, 1, 1])
    with pytest.raises(FeatureSpecError, match="3 feature names"):
        RouterData(features=f, y=[0, 1, 1, 0], seed=[0, 0, 1, 1], feature_names=("a", "b", "c"))
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"features": [list(range(15))] * 4, "y": [0, 1, 1, 0], "seed": [7, 7, 3, 3],
                      "episode": [0, 1, 0, 0], "task": ["a", "a", "b", "b"]})
    data = RouterData.from_table(table)
    assert data.features.shape == (4, 15) and data.features[0, 14] == 14
    index, n = data.rollout_index()
    assert n == 3 and index[0] != index[1] and index[2] == index[3]  # (seed, episode) names a rollout
    runner_schema = RouterData.from_table({"features": [[0.0] * 15] * 3, "y": [1, 1, 0], "z": [5, 5, 5],
                                           "episode_id": ["a", "a", "b"], "task_id": ["t", "t", "t"]})
    assert runner_schema.rollout_index()[1] == 2 and list(runner_schema.task) == ["t"] * 3
    named = RouterData.from_table({**{c: np.arange(4.0) for c in NAMES}, "y": [0, 1, 1, 0], "seed": [0] * 4},
                                  feature_names=NAMES)
    assert named.feature_names == tuple(NAMES)
    with pytest.raises(FeatureSpecError, match="lacks feature columns"):
        RouterData.from_table({"y": [0], "seed": [0]}, feature_names=["x"])
    with pytest.raises(UnknownChoiceError):
        RouterTrainConfig(mode="cvarr")


def test_batches_pack_whole_rollouts():
    rng = np.random.default_rng(SEED)
    rollout = np.repeat(rng.permutation(50), rng.integers(1, 40, 50))
    rows, segment, bounds = rt._pack_batches(rollout, 50, 64, rng)
    assert sorted(rows.tolist()) == list(range(len(rollout)))
    assert bounds[0][0] == 0 and bounds[-1][1] == len(rows)
    for b0, b1 in bounds:
        ids = rollout[rows[b0:b1]]
        # each rollout in a batch is whole and contiguous, in segment order
        assert all((rollout == r).sum() == (ids == r).sum() for r in np.unique(ids))
        assert np.all(np.diff(segment[b0:b1]) >= 0)


def test_saved_router_serves_through_the_agents_mlp_router(tmp_path):
    """A trained router loads into r2v_agents.routers.MLPRouter and gives the same p_t on raw features f_t."""
    from r2v_agents.features import FEATURE_NAMES
    from r2v_agents.routers import MLPRouter

    rng = np.random.default_rng(SEED)
    f = (rng.normal(size=(600, 15)) * 5 + 3).astype(np.float32)  # far from standardised: double scaling would show
    y = (rng.random(600) < 1 / (1 + np.exp(-f[:, 0] + 3))).astype(np.int8)
    data = RouterData(features=f, y=y, seed=np.arange(600) // 6)
    result = train_router(data, data, RouterTrainConfig(epochs=1, batch_size=256, progress=False),
                          run_dir=tmp_path)
    assert result.feature_spec["names"] == list(FEATURE_NAMES)  # the agents' feature layout by default
    router = MLPRouter.load(tmp_path / rt.ROUTER_FILE)
    np.testing.assert_allclose(router.predict(f[:50]), result.model.predict_proba(f[:50]), rtol=1e-5, atol=1e-6)
    assert router.threshold == result.threshold


def test_command_line_trains_from_parquet(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    data = heavy_tail_data(60, 6)
    table = pa.table({"features": data.features.tolist(), "y": data.y.astype(int), "z": data.seed})
    pq.write_table(table, tmp_path / "router.parquet")
    result = cli.main(["router-train", "--train", str(tmp_path / "router.parquet"), "--valid", str(tmp_path / "router.parquet"),
                      "--run-dir", str(tmp_path / "run"), "--config.epochs", "1", "--config.mode", "brier",
                      "--config.no-progress"])
    assert (tmp_path / "run" / rt.ROUTER_FILE).exists() and result.metrics["identity"]["config"]["mode"] == "brier"
    assert "valid ECE" in capsys.readouterr().out
