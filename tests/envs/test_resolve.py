"""`open_env`, the one env resolver of the runner, `r2v eval`, Table 1 and the pipeline, on the spec kinds that need
no server (the URL kind: tests/serving/test_eval_over_served_env.py): a registered id, ``module:Id``,
``module:callable``, and the bad specs, each a typed error that names what an env spec is."""

from __future__ import annotations

import gymnasium as gym
import pytest

from r2v_envs.errors import EnvSpecError
from r2v_envs.resolve import env_task_ids, open_env

SCRIPTED = "R2V/Scripted-v0"


def scripted(**kwargs) -> gym.Env:
    """A user's env factory: ``module:callable``."""
    return gym.make(SCRIPTED, **kwargs)


def not_an_env(**kwargs) -> object:
    return {"kwargs": kwargs}


def _first_observation(env: gym.Env) -> str:
    try:
        obs, _ = env.reset(seed=3, options={"task_id": "scripted-0"})
        return obs
    finally:
        env.close()


@pytest.mark.parametrize("spec", [SCRIPTED, f"r2v_envs:{SCRIPTED}", f"{__name__}:scripted"])
def test_every_local_spec_kind_opens_the_same_env(spec):
    env = open_env(spec, seed=0, perturbations="composite")
    assert isinstance(env.unwrapped, type(gym.make(SCRIPTED).unwrapped))
    assert _first_observation(env) == _first_observation(gym.make(SCRIPTED, seed=0, perturbations="composite"))


@pytest.mark.parametrize("spec", [None, "", 7, ("R2V/Scripted-v0",)])
def test_a_spec_that_is_not_a_nonempty_string_is_a_typed_error(spec):
    with pytest.raises(EnvSpecError, match="an env spec is an id"):
        open_env(spec)


def test_a_callable_that_returns_no_env_is_a_typed_error():
    with pytest.raises(EnvSpecError, match="returned dict, not a gymnasium.Env"):
        open_env(f"{__name__}:not_an_env")


def test_an_unknown_id_is_gymnasiums_own_error_with_its_hint():
    with pytest.raises(gym.error.NameNotFound):
        open_env("R2V/NoSuchEnv-v0")


def test_the_task_listing_does_not_depend_on_the_perturbations():
    assert env_task_ids(SCRIPTED, "test") == env_task_ids(SCRIPTED, "test", perturbations="composite")
