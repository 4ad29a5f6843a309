"""Smoke test on real TextWorld games (small suite, two games): runner with a worker, verifier, features."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # end to end: TextWorld episodes through the runner

pytest.importorskip("textworld")

from r2v_agents.routed import RoutedPolicy  # noqa: E402
from r2v_agents.routers import HeuristicRouter  # noqa: E402
from r2v_agents.runner import RunConfig, run  # noqa: E402
from r2v_agents.shards import load_rows  # noqa: E402
from r2v_agents.slm import SLMPolicy  # noqa: E402
from r2v_agents.teachers import OracleTeacher  # noqa: E402
from r2v_agents.verifiers.textworld import TextWorldVerifier  # noqa: E402
from tests.support.prompt_sampler import PromptSampler  # noqa: E402

GAMES = ("tw-coin_collector-easy-000", "tw-cooking-easy-000")
KW = {"suite": "small", "split": "all", "perturbations": "composite"}


def test_oracle_and_routed_agent_on_textworld(tmp_path):
    s = run(OracleTeacher(), RunConfig("R2V/TextWorld-v0", str(tmp_path / "oracle"), task_ids=GAMES, seeds=(3,),
                                       env_kwargs=KW, max_steps=40, workers=1, progress=False))
    assert s.episodes == 2 and s.success_rate == 1.0  # perturbations never corrupt the game itself

    agent = RoutedPolicy(SLMPolicy(PromptSampler(), TextWorldVerifier(), k=3), OracleTeacher(),
                         HeuristicRouter(threshold=0.45), budget_per_episode=3)
    run(agent, RunConfig("R2V/TextWorld-v0", str(tmp_path / "routed"), task_ids=GAMES, seeds=(3,), env_kwargs=KW,
                         max_steps=12, progress=False))
    steps = load_rows(tmp_path / "routed", "steps")
    episodes = load_rows(tmp_path / "routed", "episodes")
    assert {e["task_id"] for e in episodes} == set(GAMES) and all(e["teacher_calls"] <= 3 for e in episodes)
    assert all(r["benchmark"] == "textworld" and len(r["features"]) == 15 for r in steps)
    scores = [c["verifier_score"] for r in steps for c in r["candidates"]]
    assert scores and all(0.0 <= x <= 1.0 for x in scores) and len(set(scores)) > 1
    assert len(load_rows(tmp_path / "routed", "router")) == len(steps)
