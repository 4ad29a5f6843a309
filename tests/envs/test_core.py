"""The text-env contract: splits, task selection, the seed story, spaces, import weight."""

from __future__ import annotations

import subprocess
import sys

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401
from r2v_envs.core import INFO_KEYS, TextSpace, split_tasks
from r2v_envs.errors import InvalidActionError, UnknownChoiceError

SEED = 3


def test_split_fractions_disjoint_and_stable():
    ids = [f"task-{i}" for i in range(264)]
    s = split_tasks(ids)
    assert [len(s[k]) for k in ("train", "valid", "test")] == [185, 40, 39]
    assert set(s["train"]).isdisjoint(s["valid"]) and set(s["train"]).isdisjoint(s["test"])
    assert set(s["valid"]).isdisjoint(s["test"])
    assert sorted(s["train"] + s["valid"] + s["test"]) == sorted(ids)
    assert split_tasks(list(reversed(ids))) == s  # order of the input does not matter
    assert split_tasks(ids, seed=43) != s


def test_info_has_every_shared_key():
    env = gym.make("R2V/Scripted-v0", seed=SEED)
    _, info = env.reset()
    assert set(INFO_KEYS) <= set(info)
    *_, info = env.step("look")
    assert set(INFO_KEYS) <= set(info) and info["step"] == 1 and info["perturbation_seed"] == SEED


def test_seed_fixes_first_task_and_reset_seed_resamples():
    first = [gym.make("R2V/Scripted-v0", seed=SEED).reset()[1]["task_id"] for _ in range(2)]
    assert first[0] == first[1]
    env = gym.make("R2V/Scripted-v0", seed=SEED)
    drawn = {env.reset(seed=s)[1]["task_id"] for s in range(20)}
    assert len(drawn) > 3 and drawn <= set(env.unwrapped.task_ids())


def test_task_selection_and_errors():
    env = gym.make("R2V/Scripted-v0", seed=SEED, split="test")
    ids = env.unwrapped.task_ids()
    assert env.reset(options={"task_index": 1})[1]["task_id"] == ids[1]
    assert env.reset(options={"task_id": "scripted-5"})[1]["task_id"] == "scripted-5"
    with pytest.raises(UnknownChoiceError, match="did you mean"):
        env.reset(options={"task_id": "scripted-500"})
    with pytest.raises(UnknownChoiceError, match="did you mean 'test'"):
        gym.make("R2V/Scripted-v0", split="tset")


def test_terminated_and_truncated_stay_separate():
    env = gym.make("R2V/Scripted-v0", seed=SEED, perturbations=None, max_episode_steps=3)
    env.reset(options={"task_id": "scripted-3"})
    results = [env.step("look")[2:4] for _ in range(3)]
    assert results == [(False, False), (False, False), (False, True)]
    env.reset(options={"task_id": "scripted-0"})
    assert env.step("go east")[2:4] == (False, False)
    assert env.step("take coin")[2:4] == (True, False)


def test_non_text_action_raises_typed_error():
    env = gym.make("R2V/Scripted-v0", seed=SEED, perturbations=None, disable_env_checker=True)
    env.reset()
    with pytest.raises(InvalidActionError):
        env.step(None)


def test_text_space():
    space = TextSpace(max_length=5)
    assert space.contains("") and space.contains("ü\n") and not space.contains("\x00")
    assert space.contains(space.sample())


def test_import_is_light():
    # every env module, and the agent modules an API-only or oracle user touches, without the heavy engines
    code = ("import sys, importlib\n"
            "for m in ('r2v_envs', 'r2v_envs.perturbations', 'r2v_envs.textworld.env', 'r2v_envs.alfworld.env',"
            " 'r2v_envs.humaneval.env', 'r2v_envs.terminalbench.env', 'r2v_envs.scienceworld.env', 'r2v_agents.runner',"
            " 'r2v_agents.teachers',"
            " 'r2v_agents.routers', 'r2v_agents.routed', 'r2v_agents.slm', 'r2v_agents.features', 'r2v_train.cli',"
            " 'r2v', 'r2v_eval', 'r2v_eval.grid', 'r2v_eval.view'):\n"
            "    importlib.import_module(m)\n"
            "heavy = [m for m in ('torch', 'textworld', 'alfworld', 'evalplus', 'transformers', 'trl', 'vllm',"
            " 'docker', 'openai', 'datasets', 'scienceworld', 'py4j', 'inspect_ai', 'verifiers', 'playwright')"
            " if m in sys.modules]\n"
            "assert not heavy, heavy")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_make_without_import():
    code = ("import gymnasium as gym\n"
            "env = gym.make('r2v_envs:R2V/Scripted-v0', seed=1)\n"
            "print(env.reset()[1]['task_id'])")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    assert out.stdout.strip().startswith("scripted-")
