"""The policy protocol, the third-party adapter and the runnable example."""

from __future__ import annotations

import pytest

from r2v_agents.context import Context
from r2v_agents.policy import AgentPolicy, CallablePolicy, Decision, as_policy, visible_info


class Counting:
    """A stateful agent: its action depends on how often it was called this episode."""

    def __init__(self):
        self.resets = 0

    def reset(self, goal, info):
        self.calls, self.goal = 0, goal
        self.resets += 1

    def act(self, obs, info):
        self.calls += 1
        return Decision(action=f"{self.goal}:{self.calls}", source="agent", meta={"obs": obs})


def ctx(episode: str, step: int) -> Context:
    c = Context.start(episode, f"obs{step}", {"step": 0})
    for t in range(step):
        c = c.advance(f"a{t}", f"obs{t + 1}", 0.0, {"step": t + 1})
    from dataclasses import replace
    return replace(c, extra={"episode_id": episode})


def test_agent_adapter_keeps_one_copy_per_episode():
    proto = Counting()
    pol = as_policy(proto)
    assert isinstance(pol, AgentPolicy)
    first = pol.act_batch([ctx("A", 0), ctx("B", 0)], [{}, {}])
    second = pol.act_batch([ctx("A", 1), ctx("B", 1)], [{}, {}])
    assert [d.action for d in first + second] == ["A:1", "B:1", "A:2", "B:2"]
    assert proto.resets == 0  # the prototype itself is never mutated
    pol.end_episodes(["A"])
    assert pol.act_batch([ctx("A", 0)], [{}])[0].action == "A:1"


def test_callable_adapter_and_bad_returns():
    pol = as_policy(lambda obs, info: obs.upper())
    assert isinstance(pol, CallablePolicy)
    assert pol.act_batch([ctx("A", 2)], [{}])[0].action == "OBS2"
    bad = as_policy(lambda obs, info: 3)
    with pytest.raises(TypeError, match="str or a Decision"):
        bad.act_batch([ctx("A", 0)], [{}])
    with pytest.raises(TypeError, match="cannot make a policy"):
        as_policy(42)


def test_single_env_protocol_on_a_batch_policy_tracks_history():
    seen = []

    class Recorder(CallablePolicy):
        def act_batch(self, contexts, infos):
            seen.append(contexts[0].actions)
            return super().act_batch(contexts, infos)

    pol = Recorder(lambda obs, info: "go " + obs)
    pol.reset("goal", {})
    assert pol.act("east", {}).action == "go east"
    assert pol.act("west", {}).action == "go west"
    assert seen == [[], ["go east"]]


def test_visible_info_hides_oracle_keys():
    info = {"goal": "g", "expert_action": "x", "won": True, "score": 1.0, "admissible_actions": ["a"]}
    assert visible_info(info) == {"goal": "g", "admissible_actions": ["a"]}


def test_third_party_example_runs(tmp_path):
    from r2v_agents.examples.third_party_agent import main

    out = main([str(tmp_path / "run")])
    assert out["episodes"] == 12 and out["steps"] > 0 and out["success_rate"] > out["look_success_rate"]
