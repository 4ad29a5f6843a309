"""The routed R2V agent (Algorithm 2) through the runner: routing, budgets, logging, router data."""

from __future__ import annotations

import numpy as np
import pytest

import r2v_envs  # noqa: F401
from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import AlwaysLLM, AlwaysSLM, HeuristicRouter, OracleRouter
from r2v_agents.runner import RunConfig, run
from r2v_agents.shards import load_rows
from r2v_agents.slm import SLMPolicy
from r2v_agents.teachers import OpenAITeacher, OpenAITeacherConfig, OracleTeacher
from r2v_agents.verifiers.textworld import TextWorldVerifier
from tests.support.prompt_sampler import PromptSampler

TASKS = tuple(f"scripted-{i}" for i in range(1, 7))


def slm() -> SLMPolicy:
    return SLMPolicy(PromptSampler(), TextWorldVerifier(), k=3)


def cfg(out, **kw) -> RunConfig:
    base = dict(task_ids=TASKS, seeds=(0, 1), env_kwargs={"perturbations": None}, max_steps=10, progress=False)
    base.update(kw)
    return RunConfig("R2V/Scripted-v0", str(out), **base)


def test_budgets_are_never_exceeded(tmp_path):
    agent = RoutedPolicy(slm(), OracleTeacher(), AlwaysLLM(), budget_per_episode=2, total_budget=15)
    s = run(agent, cfg(tmp_path))
    eps = load_rows(tmp_path, "episodes")
    assert all(e["teacher_calls"] <= 2 for e in eps)
    assert s.teacher_calls == agent.teacher_queries == 15 < s.steps  # the total cap binds too
    steps = load_rows(tmp_path, "steps")
    assert all(r["router_prob"] == 1.0 and len(r["features"]) == 15 and len(r["candidates"]) == 3 for r in steps)
    teacher_rows = [r for r in steps if r["source"] == "oracle"]
    assert all(r["action"] == r["expert_action"] for r in teacher_rows)


def test_failed_teacher_queries_spend_budget_and_keep_the_slm_action(tmp_path):
    dead = OpenAITeacher(OpenAITeacherConfig(model="m", base_url="http://127.0.0.1:9/v1", timeout_s=0.2,
                                             max_retries=0))
    agent = RoutedPolicy(slm(), dead, AlwaysLLM(), total_budget=4)
    s = run(agent, cfg(tmp_path, task_ids=TASKS[:2], seeds=(0,)))
    steps = load_rows(tmp_path, "steps")
    assert s.teacher_calls == 0 and dead.stats.requests == agent.teacher_queries == 4
    assert sum('"teacher_failed": true' in r["meta"] for r in steps) == 4
    assert all(r["source"] == "slm" for r in steps)


def test_routing_helps_and_oracle_router_matches_slm_failures(tmp_path):
    s_slm = run(RoutedPolicy(slm(), OracleTeacher(), AlwaysSLM()), cfg(tmp_path / "slm"))
    assert s_slm.teacher_calls == 0 and 0 < s_slm.successes < s_slm.episodes
    router_rows = load_rows(tmp_path / "slm", "router")
    episodes = {e["episode_id"]: e["success"] for e in load_rows(tmp_path / "slm", "episodes")}
    assert len(router_rows) == s_slm.steps and all(r["y"] == int(not episodes[r["episode_id"]]) for r in router_rows)

    oracle = OracleRouter.from_run(tmp_path / "slm")
    s_or = run(RoutedPolicy(slm(), OracleTeacher(), oracle), cfg(tmp_path / "oracle"))
    assert s_or.success_rate == 1.0  # the oracle teacher takes over every episode the SLM alone failed
    for e in load_rows(tmp_path / "oracle", "episodes"):
        assert (e["teacher_calls"] > 0) == (not episodes[e["episode_id"]])

    s_h = run(RoutedPolicy(slm(), OracleTeacher(), HeuristicRouter(threshold=0.3)), cfg(tmp_path / "heur"))
    assert 0 < s_h.teacher_calls < s_h.steps


def test_bad_budget_is_rejected():
    with pytest.raises(ValueError):
        RoutedPolicy(slm(), OracleTeacher(), AlwaysLLM(), total_budget=-1)


def test_routed_policy_with_a_saved_r2v_router(tmp_path):
    pytest.importorskip("torch")
    from r2v_agents.features import FEATURE_NAMES
    from r2v_agents.router_mlp import RouterMLP, save_router
    from r2v_agents.routers import MLPRouter

    model = RouterMLP(in_features=15)
    spec = {"names": list(FEATURE_NAMES), "mean": [0.0] * 15, "std": [1.0] * 15, "variant": "no_entropy"}
    model.set_standardisation(spec["mean"], spec["std"])
    save_router(tmp_path / "router.pt", model, spec, threshold=0.5, meta={})
    router = MLPRouter.load(tmp_path / "router.pt")
    agent = RoutedPolicy(slm(), OracleTeacher(), router, budget_per_episode=1)
    run(agent, cfg(tmp_path / "run", task_ids=TASKS[:3], seeds=(0,)))
    steps = load_rows(tmp_path / "run", "steps")
    assert all(r["features"][:4] == [0.0] * 4 for r in steps)  # the router's variant drives the SLM features
    expected = router.predict(np.array([r["features"] for r in steps]))
    assert [r["router_prob"] for r in steps] == pytest.approx(expected.tolist(), abs=1e-6)
    assert all(e["teacher_calls"] <= 1 for e in load_rows(tmp_path / "run", "episodes"))
