"""R2V/ALFWorld-v0 on alfworld's real tw-pddl engine, with offline generated games.

These tests need the ``alfworld`` package (``pip install 'r2v[alfworld]'`` compiles fast-downward and jericho
from source: cmake and g++, about 2 minutes). Without it they are skipped with that message.
"""

from __future__ import annotations

import json
import shutil

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.alfworld import engine as alfworld_engine
from r2v_envs.alfworld import generate
from r2v_envs.errors import InvalidActionError, UnknownChoiceError

pytest.importorskip("alfworld", reason="alfworld is not installed: pip install 'r2v[alfworld]' (needs cmake, g++)")
pytest.importorskip("fast_downward", reason="fast-downward-textworld is missing: pip install 'r2v[alfworld]'")

SEED = 0
SUITE_SEED = 0


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("alfworld-suite")


def make(cache, **kw):
    kw.setdefault("perturbations", None)
    return gym.make("R2V/ALFWorld-v0", seed=SEED, source="offline", cache_dir=cache, suite_seed=SUITE_SEED, **kw)


def play_expert(env, options):
    obs, info = env.reset(options=options)
    actions, observations = [], [obs]
    terminated = truncated = False
    while not (terminated or truncated):
        action = info["expert_action"]
        obs, reward, terminated, truncated, info = env.step(action)
        actions.append(action)
        observations.append(obs)
    return info, reward, actions, observations


@pytest.mark.parametrize("index", range(6))
def test_build_game_covers_every_family_and_is_deterministic(index):
    spec = generate.build_game(SUITE_SEED, index)
    family = generate.FAMILIES[index]
    assert spec.task_id.endswith(family) and spec.traj_data["task_type"] == family
    params = spec.traj_data["pddl_params"]
    assert all(isinstance(params[k], str) for k in ("object_target", "parent_target", "toggle_target",
                                                    "mrecep_target"))
    problem = spec.game["pddl_problem"]
    assert "(:goal" in problem and f"{params['object_target']}Type" in problem
    assert "UNKNOWN GOAL" not in spec.game["grammar"] and spec.game["solvable"]
    if family == "look_at_obj_in_light":
        assert params["toggle_target"] == "DeskLamp" and "(toggleable " in problem
    if family in ("pick_clean_then_place_in_recep",):
        assert "SinkBasinType" in problem and "_bar_SinkBasin" in problem  # ALFRED-style sink id
    assert "(openable " in problem or spec.meta["scene"] == "bedroom"
    assert generate.build_game(SUITE_SEED, index).game == spec.game
    assert generate.build_game(SUITE_SEED + 1, index).game != spec.game


@pytest.mark.slow
def test_expert_wins_every_game_of_the_test_split(cache):
    env = make(cache, split="test")
    ids = env.unwrapped.task_ids()
    assert len(ids) == round(0.15 * generate.DEFAULT_N_GAMES)
    env.unwrapped.prepare()  # generated here (two worker processes), each verified by the expert once
    for i, task_id in enumerate(ids):
        info, reward, actions, _ = play_expert(env, {"task_index": i})
        assert info["won"] and info["score"] == 1.0 and reward == 1.0, (task_id, actions)
        assert info["task_id"] == task_id and info["expert_action"] is None
        walkthrough = json.loads(generate.game_path(generate.suite_dir(SUITE_SEED, cache), task_id)
                                 .read_text())["walkthrough"]
        assert actions == walkthrough  # the expert is reproducible across processes
    env.close()


@pytest.mark.slow
def test_pick_two_family_is_won_too(cache):
    env = make(cache, split="all")
    task_id = next(t for t in env.unwrapped.task_ids() if t.endswith("pick_two_obj_and_place"))
    info, reward, actions, observations = play_expert(env, {"task_id": task_id})
    assert info["won"] and reward == 1.0
    assert sum(a.startswith("move ") for a in actions) >= 2
    assert "Your task is to: " in observations[0] and info["goal"].startswith("Your task is to: ")


def test_wrong_actions_fail_and_bad_input_gets_feedback(cache):
    env = make(cache, split="test", max_episode_steps=8)
    obs, info = env.reset(options={"task_index": 0})
    assert "go to " in " ".join(info["admissible_actions"])
    obs, reward, terminated, truncated, info = env.step("fly to the moon")
    assert obs == "Nothing happens." and reward == 0.0 and not terminated
    for action in ["inventory", "look", "go to garbagecan 1", "look", "inventory", "look", "look"]:
        obs, reward, terminated, truncated, info = env.step(action)
    assert truncated and not terminated and not info["won"] and info["score"] == 0.0
    with pytest.raises(InvalidActionError):
        env.unwrapped.step(None)
    with pytest.raises(UnknownChoiceError):
        gym.make("R2V/ALFWorld-v0", source="online")


@pytest.mark.slow
def test_same_seed_same_trajectory_under_composite_perturbations(cache):
    """The second env takes the game the first one loaded (a closed env's engines serve the process's next envs,
    r2v_envs.alfworld.engine); the third loads it afresh. All three play the same."""
    runs, engines = [], []
    for fresh in (True, False, True):
        if fresh:
            alfworld_engine.KEPT.close_all()
        env = make(cache, split="test", perturbations="composite")
        info, _, actions, observations = play_expert(env, {"task_index": 1})
        runs.append((actions, observations, info["won"]))
        engines.append(env.unwrapped._engine)
        env.close()
    assert runs[0] == runs[1] == runs[2] and runs[0][2]
    assert engines[1] is engines[0] and engines[2] is not engines[0]
    clean = make(cache, split="test")
    _, _, actions, observations = play_expert(clean, {"task_index": 1})
    assert actions == runs[0][0] and observations != runs[0][1]  # perturbations change only what is seen


def test_official_data_layout_and_seen_unseen_splits(cache, tmp_path, monkeypatch):
    """The official-data path, fed with generated games laid out as alfworld-download does."""
    env = make(cache, split="test")
    paths = env.unwrapped.prepare()[:3]
    data = tmp_path / "alfworld" / "json_2.1.1"
    for folder, src in zip(("train", "valid_seen", "valid_unseen"), paths):
        trial = data / folder / f"{src.parent.name}-Apple-None-CounterTop-1" / "trial_T0"
        shutil.copytree(src.parent, trial)
    monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path / "alfworld"))
    official = gym.make("R2V/ALFWorld-v0", seed=SEED, split="test", perturbations=None)
    assert official.unwrapped.source == "alfworld"
    assert [t.split("/")[0] for t in official.unwrapped.task_ids()] == ["valid_unseen"]
    info, reward, _, _ = play_expert(official, {})
    assert info["won"] and reward == 1.0
