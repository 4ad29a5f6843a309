"""Ablations on a miniature scripted run: one runner directory per setting, rows that match their shards."""

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # end to end: retrained routers and their evaluations

from r2v_agents.features import FEATURE_GROUPS, FEATURE_NAMES
from r2v_agents.router_mlp import load_router
from r2v_agents.shards import load_rows
from r2v_agents.slm import SLMPolicy
from r2v_agents.verifiers.textworld import TextWorldVerifier
from r2v_train.evaluation import ablations
from r2v_train.evaluation.report import load_ablations
from tests.support.eval_runs import NoisySampler, copy_trained_run, eval_config, make_agents


@pytest.fixture(scope="module")
def run(tmp_path_factory, trained_run_template):
    tmp = tmp_path_factory.mktemp("abl")
    router, train, valid, router_cfg = copy_trained_run(trained_run_template, tmp)
    return tmp, make_agents(tmp, router, valid), eval_config(per_type=()), train, valid, router_cfg


def _check_rows(out, n):
    assert len(out["rows"]) == n
    for row in out["rows"]:
        eps = load_rows(row["run_dir"], "episodes", columns=["success"])
        assert row["SR"] == pytest.approx(100 * np.mean([e["success"] for e in eps]))
        assert row["episodes"] == len(eps) == 12


def test_variant_features():
    f = np.random.default_rng(0).random((3, len(FEATURE_NAMES))).astype(np.float32)
    ent = [FEATURE_NAMES.index(n) for n in FEATURE_GROUPS["entropy"]]
    assert np.array_equal(ablations.variant_features(f, [[]] * 3, "full"), f)
    no = ablations.variant_features(f, [[]] * 3, "no_entropy")
    assert (no[:, ent] == 0).all() and np.array_equal(np.delete(no, ent, 1), np.delete(f, ent, 1))
    pe = ablations.variant_features(f, [[1.0, 1.0], [1.0, 0.0], [0.5]], "pseudo_entropy")
    assert pe[0, ent[0]] == pytest.approx(1.0) and 0 < pe[1, ent[0]] < 1 and pe[2, ent[1]] == 1.0
    with pytest.raises(Exception, match="variant"):
        ablations.variant_features(f, [[]] * 3, "no_logits")


def test_feature_masking_changes_routing_without_retraining(run):
    tmp, agents, cfg, *_ = run
    out = ablations.ablate_features(agents, cfg, tmp, masks=("all", "context_only"))
    _check_rows(out, 2)
    assert load_ablations(tmp)["features"] == out
    llm = [r["LLM%"] for r in out["rows"]]
    assert llm[0] != llm[1]


def test_closed_source_routers_compute_their_variant(run):
    tmp, agents, cfg, train, valid, router_cfg = run
    out = ablations.ablate_closed_source(agents, cfg, tmp, train, valid, router_cfg,
                                         variants=("full", "pseudo_entropy"))
    _check_rows(out, 2)
    _, spec, _, _ = load_router(tmp / "ablations/closed_source/pseudo_entropy/router/router.pt")
    assert spec["variant"] == "pseudo_entropy"
    steps = load_rows(out["rows"][1]["run_dir"], "steps", columns=["features"])
    lp = FEATURE_NAMES.index("token_logprob_mean")
    assert all(s["features"][lp] == 0 for s in steps)  # the SLM computed the closed-source variant
    assert all(0 <= r["ECE"] <= 1 and 0 <= r["Brier"] <= 1 for r in out["rows"])


def test_cvar_grid_retrains_one_router_per_cell(run):
    tmp, agents, cfg, train, valid, router_cfg = run
    out = ablations.ablate_cvar(agents, cfg, tmp, train, valid, alphas=(0.2,), epsilons=(0.02, 0.5),
                                router_cfg=router_cfg)
    _check_rows(out, 2)
    assert [(r["alpha"], r["epsilon"]) for r in out["rows"]] == [(0.2, 0.02), (0.2, 0.5)]
    assert (tmp / "ablations/cvar/a0.2_e0.02/router/router.pt").exists()


def test_consistency_sweep_evaluates_each_retrained_policy(run):
    tmp, agents, cfg, *_ = run
    calls = []

    def retrain(lam, out_dir):  # stands in for the DPO stage: a better policy for a larger lambda
        calls.append((lam, out_dir))
        return lambda: SLMPolicy(NoisySampler(p_good=0.3 + lam / 2), TextWorldVerifier(), k=3)

    out = ablations.ablate_consistency(agents, cfg, tmp, retrain, lambdas=(0.0, 1.0))
    _check_rows(out, 2)
    assert [c[0] for c in calls] == [0.0, 1.0]
    assert out["rows"][0]["SLM-only SR"] < out["rows"][1]["SLM-only SR"]
