"""The few-shot demonstration bank (``r2v eval --shots``): train tasks only, the family's shortest won expert
episodes first, deterministic, and rendered for models with and without a chat template."""

from __future__ import annotations

from dataclasses import replace

import gymnasium as gym
import pytest

from r2v_agents.context import Context
from r2v_eval.demos import DemoBank, expert_demo
from r2v_eval.model_agents import AGENT_PROMPT, HFChatAgent

ENV = "R2V/Scripted-v0"


def test_demos_are_the_shortest_won_train_episodes_and_deterministic():
    bank = DemoBank(2, {ENV: {}}, AGENT_PROMPT, candidates=6)
    demos = bank.demos("scripted", "scripted-8")
    env = gym.make(ENV, seed=0, perturbations=None)
    train = sorted(env.unwrapped.task_ids("train"))
    lengths = sorted((len(expert_demo(env, t, 12).steps), t) for t in train[:6])
    assert [d.task_id for d in demos] == [t for _, t in lengths[:2]]
    assert all(d.won for d in demos)
    again = DemoBank(2, {ENV: {}}, AGENT_PROMPT, candidates=6).messages(_ctx("scripted-8"))
    assert bank.messages(_ctx("scripted-8")) == again
    assert bank.demos("scripted", "scripted-8") is demos  # played once, cached per family


def test_a_long_expert_episode_is_cut_and_unknown_benchmarks_are_named():
    bank = DemoBank(1, {ENV: {}}, AGENT_PROMPT, max_steps=1)
    assert all(len(d.steps) == 1 for d in bank.demos("scripted", "scripted-8"))
    with pytest.raises(KeyError, match="textworld"):
        bank.demos("textworld", "tw-coin_collector-easy-001")
    with pytest.raises(ValueError):
        DemoBank(0, {ENV: {}}, AGENT_PROMPT)


class _PlainTokenizer:  # isolates render(): a tokenizer without a chat template
    chat_template = None
    pad_token = "<pad>"
    padding_side = "right"


class _Model:
    def eval(self):
        return self


def test_a_model_without_chat_template_reads_each_demo_prompt_followed_by_its_action():
    agent = HFChatAgent(_Model(), _PlainTokenizer())
    ctx = _ctx("scripted-8")
    plain = agent.render(ctx)
    agent.demos = DemoBank(1, {ENV: {}}, AGENT_PROMPT)
    shown = agent.render(ctx)
    demo = agent.demos.demos("scripted", "scripted-8")[0]
    first_prompt, first_action = demo.steps[0][0], demo.steps[0][1]
    assert shown.endswith(plain.split("\n\n", 1)[1]) and len(shown) > len(plain)
    assert f"{first_prompt.goal}" in shown and f"Action: {first_action}\n\n" in shown


def _ctx(task_id: str) -> Context:
    env = gym.make(ENV, seed=0, perturbations=None)
    obs, info = env.reset(seed=0, options={"task_id": task_id})
    return replace(Context.start(info["goal"], obs, info), benchmark="scripted")
