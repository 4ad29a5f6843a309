"""DRRN as an r2v learner: it learns the scripted corridor (success rises from the first to the last tenth of
training, with a CI), a run resumes to the same weights, and ``drrn:RUN_DIR`` is an ``r2v eval`` agent."""

from __future__ import annotations

import tomllib
from importlib.metadata import EntryPoint

import pytest
import torch

from r2v_agents.context import Context
from r2v_agents.drrn import DRRN, MODEL_FILE, DRRNArch, DRRNPolicy, context_state
from r2v_agents.shards import load_rows
from r2v_envs.errors import BackendUnavailableError, UnknownChoiceError
from r2v_eval import agents as eval_agents
from r2v_eval.cli import EvalArgs, evaluate
from r2v_train.drrn.config import DRRNConfig
from r2v_train.drrn.replay import transitions
from r2v_train.drrn.trainer import CHECKPOINT, DRRNTrainer, train_drrn
from tests.support import ROOT

SEED = 0
# Small enough to train in a few seconds; a corridor of 2-5 rooms needs 2-5 steps, so 8 steps leave room to wander
# (a uniform policy wins about 15% of them: "go west" in the first room loses).
TINY = dict(env_id="R2V/Scripted-v0", max_steps=8, encoder="bag", buckets=1024, embed=16, hidden=16,
            learning_starts=32, batch_size=32, updates_per_step=0.5, target_every=50, learning_rate=3e-3,
            temperature=0.1, episodes_per_round=8, seed=SEED, progress=False)


@pytest.fixture(autouse=True)
def _one_thread():
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def test_drrn_success_rises_on_the_scripted_corridor(tmp_path):
    s = train_drrn(DRRNConfig(episodes=80, **TINY), str(tmp_path))
    first, last = s["first_tenth"]["sr"], s["last_tenth"]["sr"]
    assert s["episodes"] == 80 and s["updates"] > 0
    assert last >= 80 and s["rise"]["diff_ci"][0] > 0, (first, last, s["rise"])
    # the curve's line and band: ten tenths of 8 episodes, the first and last the summary's own
    tenths = s["tenths"]
    assert [t["episodes"] for t in tenths] == [8] * 10
    assert (tenths[0]["sr"], tenths[-1]["sr"]) == (first, last) and tenths[-1]["sr_ci"][0] > tenths[0]["sr_ci"][1]
    assert (tmp_path / "learning_curve.png").read_bytes()[:4] == b"\x89PNG"


def test_a_resumed_run_ends_with_the_weights_of_an_uninterrupted_one(tmp_path):
    straight = DRRNTrainer(DRRNConfig(episodes=40, checkpoint_every=1, **TINY), str(tmp_path / "a"))
    straight.train()
    DRRNTrainer(DRRNConfig(episodes=24, checkpoint_every=1, **TINY), str(tmp_path / "b")).train()
    resumed = DRRNTrainer(DRRNConfig(episodes=40, checkpoint_every=1, **TINY), str(tmp_path / "b"))
    assert resumed.state["episodes"] == 24 and resumed.state["updates"] > 0  # from the checkpoint, not from scratch
    resumed.train()
    for (name, a), b in zip(straight.net.state_dict().items(), resumed.net.state_dict().values()):
        assert torch.equal(a, b), name
    assert straight.curve["episodes"] == resumed.curve["episodes"]  # the same games, the same outcomes
    learned = lambda t: [(p["success"], p["loss"]) for p in t.curve["train"].values()]  # noqa: E731 - not wall times
    assert learned(straight) == learned(resumed)
    with pytest.raises(ValueError, match="different gamma"):
        DRRNTrainer(DRRNConfig(episodes=48, **{**TINY, "gamma": 0.5}), str(tmp_path / "b"))
    assert (tmp_path / "b" / CHECKPOINT).exists()


def test_drrn_run_dir_is_an_r2v_eval_agent(tmp_path, monkeypatch):
    run = tmp_path / "run"
    train_drrn(DRRNConfig(episodes=8, **TINY), str(run))
    # the kind is declared in pyproject.toml's r2v.agents entry points; an editable install registers it only when
    # reinstalled, so the declared entry point is handed to r2v_eval as the installed metadata would
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["r2v.agents"]["drrn"]
    ep = EntryPoint(name="drrn", value=declared, group=eval_agents.AGENT_ENTRY_POINTS)
    monkeypatch.setattr(eval_agents, "plugin_agents", lambda: {"drrn": ep})
    with pytest.raises(BackendUnavailableError, match="model.pt"):
        eval_agents.build_agent(f"drrn:{tmp_path / 'nothing'}")
    policy, name = eval_agents.build_agent(f"drrn:{run}")
    assert isinstance(policy, DRRNPolicy) and policy.temperature == TINY["temperature"] and name == "drrn"
    greedy, name = eval_agents.build_agent(f"drrn:{run}?temperature=0&seed=3")
    assert (greedy.temperature, greedy.seed, name) == (0.0, 3, "drrn?temperature=0&seed=3")
    assert greedy.net.state_dict()["q.0.weight"].equal(policy.net.state_dict()["q.0.weight"])
    with pytest.raises(UnknownChoiceError, match="tempreature"):
        eval_agents.build_agent(f"drrn:{run}?tempreature=0")
    with pytest.raises(eval_agents.AgentSpecError, match="temperature must be >= 0"):
        eval_agents.build_agent(f"drrn:{run}?temperature=-1")
    with pytest.raises(eval_agents.AgentSpecError, match="could not convert"):
        eval_agents.build_agent(f"drrn:{run}?seed=0&temperature=x")
    results = evaluate(EvalArgs(agent=f"drrn:{run}", out=str(tmp_path / "eval"), envs=("R2V/Scripted-v0",),
                                perturbations=("none", "partial"), seeds=(0,), tasks=3, progress=False,
                                bootstrap=50))
    rows = load_rows(tmp_path / "eval" / "runs" / "R2V_Scripted-v0" / "partial", "steps")
    assert len(results["session"]) == 2 and rows and all(r["source"] == "agent" for r in rows)


def test_a_hidden_action_list_is_scored_from_the_last_one_seen():
    torch.manual_seed(SEED)
    policy = DRRNPolicy(DRRN(DRRNArch(buckets=64, embed=4, hidden=4)))
    start = Context.start("g", "o", {"admissible_actions": ["go east"]})
    start = Context(**{**start.__dict__, "extra": {"episode_id": "e@0"}})
    assert policy.act_batch([start], [{}])[0].action == "go east"
    hidden = start.advance("go east", "o2", 0.0, {})  # partial perturbation: no admissible list this step
    assert policy.act_batch([hidden], [{}])[0].action == "go east"
    policy.end_episodes(["e@0"])
    assert policy.act_batch([Context.start("g", "o", {})], [{}])[0].action == ""
    rows = [{"goal": "g", "observation": "o", "history_actions": [], "admissible_actions": ["a"], "action": "a",
             "reward": 0.0, "terminated": False},
            {"goal": "g", "observation": "o2", "history_actions": ["a"], "admissible_actions": None, "action": "a",
             "reward": 1.0, "terminated": True}]
    t = transitions({"episode": {"error": None}, "steps": rows})
    assert t[0].next_actions == ("a",) and t[1].done


@pytest.mark.parametrize("history", [1, 3])
def test_the_learner_reads_the_states_the_policy_acted_on(history):
    """--history N: the replay's state and next state of a step are the text the policy scored at that step and the
    next, so Q is learned on what it acts on."""
    ctx, rows, states = Context.start("g", "o0", {"admissible_actions": ["a", "b"]}), [], []
    for i, action in enumerate(["go east", "go west", "take coin", "look"]):
        rows.append({"goal": "g", "observation": ctx.observation, "history_actions": ctx.actions,
                     "admissible_actions": ["a", "b"], "action": action, "reward": 0.0, "terminated": False})
        states.append(context_state(ctx, history))
        ctx = ctx.advance(action, f"o{i + 1}", 0.0, {})
    t = transitions({"episode": {"error": None}, "steps": rows}, history=history)
    assert [x.state for x in t] == states[:3] and [x.next_state for x in t] == states[1:]
    assert ("go east" in states[3]) == (history == 3)  # the oldest of the last three actions, not only the last
