"""The router study: the CVaR cost scales, the cvar_budget threshold, trajectory features, counterfactual labels, settings."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # end to end: router settings, repeats and counterfactual rollouts
import torch

import r2v_envs  # noqa: F401
from r2v_agents.context import Context
from r2v_agents.features import FEATURE_NAMES
from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import MLPRouter
from r2v_agents.runner import RunConfig, run
from r2v_agents.shards import load_rows
from r2v_agents.teachers import OracleTeacher
from r2v_agents.trajectory_features import TRAJECTORY_NAMES, logged_trajectory_features, trajectory_features
from r2v_envs.errors import UnknownChoiceError
from r2v_train.config import load_config
from r2v_train.router import calibration
from r2v_train.router.config import RouterTrainConfig
from r2v_train.router.counterfactual import (
    LABELS_FILE,
    CounterfactualConfig,
    StepOracleRouter,
    counterfactual_labels,
    load_labels,
)
from r2v_train.router.data import RouterData
from r2v_train.router.losses import cost_coefficients, routing_surrogate, scaled_routing_cost
from r2v_train.router.settings import SETTINGS, resolve_variants, router_rows, variant_config
from r2v_train.router.train import train_router
from tests.support.router_rows import synthetic_rollouts

EPSILONS = (0.02, 0.05, 0.1, 0.15)


def test_cost_scales():
    p, y = torch.rand(200, generator=torch.Generator().manual_seed(0)), (torch.arange(200) % 3 == 0).float()
    assert torch.equal(scaled_routing_cost(p, y, 0.02, 1.0, 1.96), routing_surrogate(p, y, 0.02, 1.0, 1.96))
    assert torch.allclose(scaled_routing_cost(p, y, 0.02, 1.0, 1.96, "regret"), (p - y).abs(), atol=1e-6)
    assert torch.allclose(scaled_routing_cost(p, y, 0.02, 1.0, 1.96, "miss"), y * (1 - p), atol=1e-6)
    top = scaled_routing_cost(p, y, 0.02, 1.0, 1.96, "max")
    assert float(top.max()) <= 1.0 and torch.allclose(top * 1.98, routing_surrogate(p, y, 0.02, 1.0, 1.96))
    # the paper scale's floor: a failing step escalated still costs c_LLM, above every epsilon of Table 5
    assert cost_coefficients(0.02, 1.0, 1.96)[1][1] == 1.0
    with pytest.raises(UnknownChoiceError):
        cost_coefficients(0.02, 1.0, 1.96, "bogus")
    with pytest.raises(UnknownChoiceError):
        RouterTrainConfig(cost_scale="bogus")


def _rollouts(n_rollouts: int, seed: int) -> RouterData:
    """Synthetic rollouts: 40% fail; a noisy risk feature separates their steps only partly."""
    return synthetic_rollouts(n_rollouts, seed, fail_rate=0.4, shift=1.2)


def test_cvar_budget_threshold_is_monotone_in_epsilon_and_alpha():
    data = _rollouts(300, 1)
    p = 1 / (1 + np.exp(-(data.features[:, 0] - 0.6)))
    rollout = data.rollout_index()[0]

    def rate(alpha, eps, scale="miss"):
        tau = calibration.select_threshold(p, data.y, 0.02, 1.0, 1.96, rule="cvar_budget", rollout=rollout,
                                           alpha=alpha, epsilon=eps, scale=scale)
        return float(np.mean(p >= tau))

    for alpha in (0.05, 0.1, 0.2, 0.5):
        rates = [rate(alpha, e) for e in EPSILONS]
        assert all(a >= b for a, b in zip(rates, rates[1:])), (alpha, rates)  # tighter epsilon: more escalation
        assert rates[0] > rates[-1]
    assert rate(0.05, 0.1) >= rate(0.5, 0.1)  # a smaller tail is a stricter constraint
    # on the paper scale no epsilon of the grid is feasible: everything escalates, whatever epsilon says
    assert {rate(0.2, e, "paper") for e in EPSILONS} == {1.0}


def test_scaled_setting_moves_the_trained_router_with_epsilon():
    train, valid = _rollouts(120, 2), _rollouts(80, 3)
    base = RouterTrainConfig(epochs=1, batch_size=512, hidden=(16,), progress=False, threshold_rule="bayes")
    rates = []
    for eps in (0.02, 0.1, 0.15):
        r = train_router(train, valid, variant_config(base, {**SETTINGS["scaled"], "epsilon": eps}))
        rates.append(r.metrics["valid"]["escalation_rate"])
        assert r.metrics["valid"]["rollout_cvar_hard_miss"] <= eps + 1e-9  # the budget holds on validation
    assert all(a >= b for a, b in zip(rates, rates[1:])) and rates[0] > rates[-1], rates
    paper = {round(train_router(train, valid, dataclasses.replace(base, epsilon=e)).threshold, 6) for e in (0.02, 0.15)}
    assert paper == {0.5}  # the paper's router: bayes threshold whatever epsilon says


class _EastThenLook(BatchPolicy):
    """A stand-in SLM: walks east while an east exit is visible, then only looks (never takes the item)."""

    name = "slm"

    def __init__(self, take: bool = False):
        self.walk = not take

    def act_batch(self, contexts, infos):
        out = []
        for ctx in contexts:
            east = "exit to the east" in ctx.observation
            f = trajectory_features(ctx)  # logged as features, to compare with the recomputation from the log
            out.append(Decision(action="go east" if east and self.walk else "look", source="slm", features=f))
        return out


def _slm_rollouts(tmp_path, policy, tasks=("scripted-0", "scripted-1")):
    d = tmp_path / "slm"
    run(policy, RunConfig("R2V/Scripted-v0", str(d), task_ids=tasks, seeds=(0,), split="train",
                          env_kwargs={"perturbations": None}, max_steps=6, progress=False))
    return d


def test_trajectory_features_from_the_log_equal_the_live_ones(tmp_path):
    d = _slm_rollouts(tmp_path, _EastThenLook())
    steps = load_rows(d, "steps")
    again = logged_trajectory_features(steps)
    for r in steps:
        assert np.array_equal(np.asarray(r["features"], dtype=np.float32), again[(r["episode_id"], r["t"])])
    last = again[("scripted-0@0", 5)]
    named = dict(zip(TRAJECTORY_NAMES, last.tolist()))
    assert named["steps_without_progress"] == pytest.approx(5 / 6) and named["repeat_share"] > 0.5


def test_counterfactual_labels_flip_where_constructed(tmp_path):
    slm = _EastThenLook()
    d = _slm_rollouts(tmp_path, slm)
    eps = {e["episode_id"]: e for e in load_rows(d, "episodes")}
    assert not any(e["success"] for e in eps.values())  # the stand-in SLM never takes the item
    summary = counterfactual_labels(d, tmp_path / "cf", slm, OracleTeacher(), CounterfactualConfig(2), progress=False)
    labels = load_labels(tmp_path / "cf")
    sampled = {k: y for k, (y, s) in labels.items() if s}
    # t = 0 (and the corridor's east walks) already were the teacher's action: never sampled
    assert ("scripted-0@0", 0) in labels and not labels[("scripted-0@0", 0)][1]
    assert len(sampled) == summary["sampled_steps"] == summary["episodes_run"] == 4
    # every sampled step stands in the item's room, where the teacher's one action ("take ...") wins
    assert all(y == 1 for y in sampled.values()) and summary["rescued_rollouts"] == 2
    # determinism: a second labelling elsewhere gives identical label bytes; a rerun resumes with nothing to run
    counterfactual_labels(d, tmp_path / "cf2", slm, OracleTeacher(), CounterfactualConfig(2), progress=False)
    assert (tmp_path / "cf" / LABELS_FILE).read_bytes() == (tmp_path / "cf2" / LABELS_FILE).read_bytes()
    assert counterfactual_labels(d, tmp_path / "cf", slm, OracleTeacher(), CounterfactualConfig(2),
                                 progress=False)["episodes_run_now"] == 0
    # the counterfactual oracle escalates exactly one step per rescued rollout, and that step rescues it
    router = StepOracleRouter.from_labels(d, tmp_path / "cf")
    out = tmp_path / "cf_oracle"
    run(RoutedPolicy(slm, OracleTeacher(), router), RunConfig(
        "R2V/Scripted-v0", str(out), task_ids=("scripted-0", "scripted-1"), seeds=(0,), split="train",
        env_kwargs={"perturbations": None}, max_steps=6, progress=False))
    rows = load_rows(out, "episodes")
    assert all(r["success"] and r["teacher_calls"] == 1 for r in rows)


def test_counterfactual_labels_stay_zero_when_one_action_cannot_rescue(tmp_path):
    slm = _EastThenLook(take=True)  # only looks: one teacher "go east" leaves it short of a 3-room corridor's end
    d = _slm_rollouts(tmp_path, slm, tasks=("scripted-1",))
    summary = counterfactual_labels(d, tmp_path / "cf", slm, OracleTeacher(), CounterfactualConfig(3), progress=False)
    assert summary["episodes_run"] == 3 and summary["rescuing_steps"] == 0
    # the counterfactual router data keeps the sampled steps of failed rollouts only, labelled y_cf
    cfg = variant_config(RouterTrainConfig(progress=False), SETTINGS["counterfactual"])
    data = router_rows(d, cfg, tmp_path / "cf")
    assert len(data) == 3 and not data.y.any()


def test_trajectory_router_computes_its_features_from_contexts(tmp_path):
    data = _rollouts(60, 4)
    extra = np.random.default_rng(0).random((len(data), len(TRAJECTORY_NAMES)), dtype=np.float32)
    wide = dataclasses.replace(data, features=np.concatenate([data.features, extra], axis=1),
                               feature_names=(*FEATURE_NAMES, *TRAJECTORY_NAMES))
    train_router(wide, wide, RouterTrainConfig(epochs=1, batch_size=256, progress=False, features="trajectory"),
                 run_dir=tmp_path)
    router = MLPRouter.load(tmp_path / "router.pt")
    ctx = Context.start("Take the coin.", "A room.", {}, max_steps=10).advance("look", "You can't.", 0.0, {})
    f = np.zeros((1, len(FEATURE_NAMES)), dtype=np.float32)
    full = np.concatenate([f, trajectory_features(ctx)[None]], axis=1)
    assert router.predict(f, [ctx]) == pytest.approx(router.predict(full))
    with pytest.raises(ValueError, match="contexts"):
        router.predict(f)


def test_settings_resolve_from_yaml():
    cfg = load_config({"preset": "tiny", "router_variants": ["scaled", {"mine": {"features": "trajectory"}}],
                       "counterfactual": {"steps_per_rollout": 2, "oracle": True}, "repeats": {"n": 3}})
    assert list(cfg.study.variants) == ["scaled", "mine"] and cfg.study.repeats.n == 3 and cfg.study.active
    assert cfg.study.counterfactual.steps_per_rollout == 2
    with pytest.raises(UnknownChoiceError):
        resolve_variants([{"bad": {"epsilonn": 0.1}}])
    with pytest.raises(ValueError):
        load_config({"repeats": {"n": 0}})


def test_a_setting_is_paired_with_baselines_fitted_to_its_own_recall(tmp_path, trained_run_template):
    """The router study's matched comparison: the heuristic and entropy routers get the thresholds that reach the
    setting's validation failure recall, run routed on the same episodes, and the paired differences are the
    setting's episodes minus theirs."""
    from types import SimpleNamespace

    from r2v_agents.routers import EntropyRouter, HeuristicRouter
    from r2v_eval.cells import outcomes
    from r2v_train.evaluation.methods import evaluate
    from r2v_train.evaluation.report import study_tables
    from r2v_train.evaluation.study import _variant_row
    from tests.support.eval_runs import copy_trained_run, eval_config, make_agents

    router_path, _, valid_dir, cfg = copy_trained_run(trained_run_template, tmp_path)
    ev = eval_config(per_type=(), methods=("slm", "entropy", "heuristic", "r2v"))
    evaluate(make_agents(tmp_path, router_path, valid_dir), ev, tmp_path / "eval")
    # a setting that escalates more than the chain's router: its matched baselines move with it
    row = _variant_row(SimpleNamespace(router=cfg), make_agents(tmp_path, None, valid_dir), ev, "eager",
                       {"kappa": 8.0}, tmp_path, tmp_path / "eval", matched=True)
    valid = RouterData.from_run(valid_dir)
    fails = valid.y.astype(bool)
    mine = MLPRouter.load(tmp_path / "router_variants" / "eager" / "router" / "router.pt")
    recall = float(np.mean(mine.escalate(valid.features)[fails]))
    assert row["matched"]["recall"] == pytest.approx(recall) and 0 < recall
    ours = outcomes(tmp_path / "eval" / row["run"])
    for name in ("heuristic", "entropy"):
        m = row["matched"][name]
        run_dir = tmp_path / "eval" / m["run"]
        assert run_dir.name == f"{name}@{m['threshold']:.8g}" and m["episodes"] == len(ours) == 12
        base = {"heuristic": HeuristicRouter, "entropy": EntropyRouter}[name](m["threshold"])
        hit = base.escalate(valid.features)[fails]
        assert np.mean(hit) >= recall - 1e-9  # reaches the setting's recall ...
        above = base.predict(valid.features)[fails] > m["threshold"]
        assert np.mean(above) < recall  # ... with the highest such threshold
        theirs = outcomes(run_dir)
        sr = 100 * (np.mean([ours[e][0] for e in ours]) - np.mean([theirs[e][0] for e in ours]))
        assert m["paired"]["sr_diff"] == pytest.approx(sr)
    (tmp_path / "eval" / "variants.json").write_text(json.dumps({"condition": "composite", "counterfactual": {},
                                                                 "rows": {"r2v@eager": row}}))
    # matched on test SR: the cheapest baseline cell of the study no more than 2 SR points below the setting
    from r2v_eval.cells import sr_metrics
    from r2v_train.evaluation.study import match_on_test_sr

    m = match_on_test_sr(tmp_path, "composite")["rows"]["r2v@eager"][0]
    for name in ("heuristic", "entropy"):
        cells = {d.name: sr_metrics(d) for d in (tmp_path / "eval" / "runs" / "composite").glob(f"{name}*")}
        ok = {c: x for c, x in cells.items() if x["sr"] >= row["sr"] - 2 - 1e-9}
        if not ok:
            assert m[name] is None
            continue
        cheapest = min(ok, key=lambda c: ok[c]["llm_pct"])
        assert m[name]["llm_pct"] == pytest.approx(ok[cheapest]["llm_pct"])
        assert m[name]["paired"]["llm_pct_diff"] == pytest.approx(row["llm_pct"] - ok[cheapest]["llm_pct"])
    text = "\n".join(study_tables(tmp_path))
    assert "At matched reliability" in text and f"| r2v@eager | {recall:.3f} |" in text
    assert "## At matched test reliability" in text and "| r2v@eager | 1 |" in text


def test_deviation_labels_keep_the_failing_steps_that_left_the_expert(tmp_path, trained_run_template):
    """``labels: deviation`` = Eq. 7's label and the SLM's action differs from the env's expert action, row for
    row of the logged rollouts; a benchmark without a step-level expert gets a clear error."""
    from r2v_train.router.settings import deviation_labels
    from tests.support.eval_runs import copy_trained_run

    _, train_dir, _, cfg = copy_trained_run(trained_run_template, tmp_path)
    eq7 = router_rows(train_dir, cfg)
    dev = router_rows(train_dir, dataclasses.replace(cfg, labels="deviation"))
    keys = [(r["episode_id"], int(r["t"])) for r in load_rows(train_dir, "router", ["episode_id", "t"])]
    steps = {(r["episode_id"], int(r["t"])): r for r in load_rows(train_dir, "steps", ["episode_id", "t", "action",
                                                                                     "expert_action"])}
    expected = [int(y and steps[k]["action"].strip().lower() != steps[k]["expert_action"].strip().lower())
                for y, k in zip(eq7.y, keys)]
    assert dev.y.tolist() == expected and np.array_equal(dev.features, eq7.features)
    assert 0 < dev.y.sum() < eq7.y.sum()  # some failing steps followed the expert, some did not
    with pytest.raises(ValueError, match="expert action"):
        deviation_labels([{"episode_id": "e", "t": 0, "action": "print(1)", "expert_action": None}])
    assert "deviation" in SETTINGS


@pytest.mark.parametrize("name, labels", [("cvar_scaled", "episode"), ("cvar_deviation", "deviation")])
def test_the_miss_scale_grids_reach_the_grid_with_their_setting(tmp_path, monkeypatch, name, labels):
    """`r2v ablate-cvar-scaled` / `ablate-cvar-deviation` (and `ablations: [...]`): Table 5's grid on the named
    setting's budget. (Once broken by an unused-import cleanup: the dispatcher reached for names ablations.py no
    longer imported, and nothing ran it.)"""
    from r2v_train.evaluation import ablations
    from r2v_train.pipeline import run_ablation

    seen = {}
    monkeypatch.setattr(ablations, "ablate_cvar", lambda *a, **kw: seen.update(kw) or {"rows": []})
    run_ablation(name, load_config({"preset": "tiny"}), tmp_path)
    cfg = seen["router_cfg"]
    assert seen["name"] == name and cfg.labels == labels
    assert cfg.cost_scale == "miss" and cfg.threshold_rule == "cvar_budget"


def test_the_deviation_grid_trains_on_deviation_labels(tmp_path, trained_run_template):
    """Table 5's grid on ``deviation_scaled`` retrains with that setting's labels (it once trained every grid
    point on Eq. 7's labels whatever the setting said), and each point's threshold honours its epsilon."""
    import json as _json

    from r2v_agents.router_mlp import load_router
    from r2v_train.evaluation.ablations import ablate_cvar
    from tests.support.eval_runs import copy_trained_run, eval_config, make_agents

    router_path, train_dir, valid_dir, cfg = copy_trained_run(trained_run_template, tmp_path)
    grid_cfg = variant_config(cfg, SETTINGS["deviation_scaled"])
    out = ablate_cvar(make_agents(tmp_path, router_path, valid_dir), eval_config(per_type=()), tmp_path, train_dir,
                      valid_dir, alphas=(0.2,), epsilons=(0.02, 0.5), router_cfg=grid_cfg, name="cvar_deviation")
    rows = out["rows"]
    deviating = router_rows(valid_dir, grid_cfg).y.mean()
    assert deviating < RouterData.from_run(valid_dir).y.mean()
    for row, eps in zip(rows, (0.02, 0.5)):
        d = tmp_path / "ablations" / "cvar_deviation" / f"a0.2_e{eps:g}" / "router"
        meta = load_router(d / "router.pt")[3]
        assert _json.loads(_json.dumps(meta))["config"]["labels"] == "deviation"
        metrics = _json.loads((d / "router_metrics.json").read_text())
        assert metrics["valid"]["failure_rate"] == pytest.approx(deviating)  # trained on the deviation rows
        assert row["valid CVaR"] <= eps + 1e-9
    assert rows[0]["valid LLM%"] >= rows[1]["valid LLM%"]  # a tighter budget escalates at least as much
