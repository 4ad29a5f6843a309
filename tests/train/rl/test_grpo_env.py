"""Online RL with TRL's GRPOTrainer on r2v envs: the rollout_func, the environment_factory env, and a short run."""

from __future__ import annotations

import inspect
import math

import gymnasium as gym
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

import r2v_envs  # noqa: E402,F401
from r2v_agents.prompts import parse_completion  # noqa: E402
from r2v_agents.slm import snap_to_admissible  # noqa: E402
from r2v_agents.tiny import build_tiny_model  # noqa: E402
from r2v_train.rl.grpo_env import EpisodeRollout, tool_env_factory  # noqa: E402
from tests.support.tiny_models import scripted_corpus_and_tokenizer  # noqa: E402

ENV = "R2V/Scripted-v0"
KW = {"perturbations": "composite", "task_id": "scripted-1"}


def test_rollout_tokens_masks_and_rewards_replay():
    torch.set_num_threads(1)
    torch.manual_seed(0)
    _, tok = scripted_corpus_and_tokenizer()
    model = build_tiny_model(tok, hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)
    roll = EpisodeRollout(ENV, KW, max_turns=3, max_new_tokens=4, admissible="snap")
    out = roll.rollout([5, 5, 6], model, tok, max_completion_tokens=200)
    assert len(out["prompt_ids"]) == 3 and out["prompt_ids"][0] == out["prompt_ids"][1]  # same start per seed
    for i, seed in enumerate([5, 5, 6]):
        ids, mask, lps = out["completion_ids"][i], out["env_mask"][i], out["logprobs"][i]
        assert len(ids) == len(mask) == len(lps) and mask[0] == 1
        assert all(lp == 0.0 for lp, m in zip(lps, mask) if m == 0) and all(lp < 0 for lp, m in zip(lps, mask) if m)
        # split the sequence into the model's actions and the env's replies, and replay the actions
        segments, cur, kind = [], [], mask[0]
        for t, m in zip(ids, mask):
            if m != kind:
                segments.append((kind, cur))
                cur, kind = [], m
            cur.append(t)
        segments.append((kind, cur))
        env = gym.make(ENV, **KW)
        obs, info = env.reset(seed=seed)
        ret = 0.0
        for kind, seg in segments:
            if kind == 1:
                action = snap_to_admissible(parse_completion(tok.decode(seg, skip_special_tokens=True)),
                                            info["admissible_actions"] or ())
                obs, reward, *_, info = env.step(action)
                ret += reward
            else:
                assert tok.decode(seg) == f"\nObservation:\n{obs[-400:]}\nAction:"  # the env's own reply
        assert ret == out["env_reward"][i] and info["perturbation_seed"] == seed
    roll.close()


def test_tool_env_is_what_trl_introspects():
    from transformers.utils import get_json_schema

    env = tool_env_factory(ENV, KW, seed=3)()
    # TRL: public functions on the class other than reset/get_reward are the tools
    tools = [n for n, _ in inspect.getmembers(type(env), predicate=inspect.isfunction)
             if not n.startswith("_") and n not in ("reset", "get_reward")]
    assert tools == ["act"]
    schema = get_json_schema(env.act)
    assert schema["function"]["parameters"]["required"] == ["command"]
    first = env.reset()
    assert first.startswith("Goal: Find the") and env.get_reward() == 0.0
    # the tool plays the same episode as a plain env reset with the same seed
    probe = gym.make(ENV, **KW)
    obs, info = probe.reset(seed=3)
    assert first.endswith(obs)
    while not info["won"]:
        action = info["expert_action"]
        obs, *_, info = probe.step(action)
        assert env.act(action) == obs
    assert env.get_reward() == 1.0 and env.act("look") == "The episode is over."


def test_a_few_grpo_steps_log_a_reward_and_change_the_parameters(tmp_path):
    from tests.support.examples import load_example

    example = load_example("grpo_textworld")
    Args, main = example.Args, example.main

    summary = main(Args(env_id=ENV, task_ids=("scripted-0",), max_steps=2, num_generations=4, max_turns=4,
                        output_dir=str(tmp_path / "grpo"), seed=1))
    assert summary["steps"] == 2 and summary["episodes"] == 8
    assert len(summary["rewards"]) == 2 and all(0.0 <= r <= 1.0 and math.isfinite(r) for r in summary["rewards"])
    assert summary["changed_tensors"] > 0
