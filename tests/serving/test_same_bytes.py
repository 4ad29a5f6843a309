"""Same seed, same bytes: an episode played through `r2v serve` equals the same episode in process, for every
registered id, through both OpenEnv's own generic client (plain dicts, no r2v code) and r2v's RemoteEnv.

Oracle keys (expert_action, won, score) are served only with --oracle; the agent-visible keys and the perturbation
events always are.
"""

from __future__ import annotations

import json

import pytest

import r2v_envs
from r2v_envs.serving.app import serve_in_thread
from r2v_envs.serving.client import RemoteEnv
from r2v_envs.serving.config import ServeConfig
from tests.support.serving import env_kwargs, play, reference_episode, wire

pytestmark = pytest.mark.timeout(600)
SEED = 7
STEPS = {"R2V/Scripted-v0": 8, "R2V/TextWorld-v0": 6, "R2V/ALFWorld-v0": 5, "R2V/HumanEval-v0": 3,
         "R2V/TerminalBench-v0": 4, "R2V/BabyAI-v0": 6, "R2V/ScienceWorld-v0": 5}
HEAVY = {"R2V/ALFWorld-v0", "R2V/HumanEval-v0", "R2V/TerminalBench-v0", "R2V/ScienceWorld-v0"}


def _generic_client(url: str):
    from openenv import AutoEnv

    return AutoEnv.from_env("r2v", base_url=url, skip_install=True).sync()  # OpenEnv's GenericEnvClient


def _generic_step(client, action: str) -> tuple:
    r = client.step({"text": action})
    o = r.observation
    return o["text"], r.reward, o["terminated"], o["truncated"], o["info"]


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=[pytest.mark.slow] if i in HEAVY else [])
                                    for i in r2v_envs.ENV_IDS])
def test_an_episode_through_the_server_is_byte_identical(env_id, alfworld_cache):
    kwargs = env_kwargs(env_id, alfworld_cache)
    actions, ref = reference_episode(env_id, kwargs, SEED, STEPS[env_id])
    with serve_in_thread(ServeConfig(env=env_id, env_kwargs=json.dumps(kwargs), port=0, check_env=False)) as srv:
        remote = RemoteEnv(srv.url)
        try:
            got = play(lambda: remote.reset(seed=SEED), remote.step, actions)
        finally:
            remote.close()
        with _generic_client(srv.url) as client:
            first = client.reset(seed=SEED).observation
            generic = play(lambda: (first["text"], first["info"]), lambda a: _generic_step(client, a), actions)
    assert len(ref) == len(got) == len(generic) >= 3
    for t, (want, a, b) in enumerate(zip(ref, got, generic)):
        assert wire(a) == wire(want), f"RemoteEnv differs at step {t}"
        assert wire(b) == wire(want), f"OpenEnv's generic client differs at step {t}"
    infos = [tr[4] for tr in got]
    assert all("expert_action" not in i and "won" not in i and "score" not in i for i in infos)
    assert all({"goal", "step", "perturbations"} <= set(i) for i in infos)


def test_oracle_keys_only_with_oracle():
    env_id, kwargs = "R2V/Scripted-v0", env_kwargs("R2V/Scripted-v0")
    actions, ref = reference_episode(env_id, kwargs, SEED, 8, oracle=True)
    with serve_in_thread(ServeConfig(env=env_id, env_kwargs=json.dumps(kwargs), port=0, oracle=True)) as srv:
        remote = RemoteEnv(srv.url)
        got = play(lambda: remote.reset(seed=SEED), remote.step, actions)
        remote.close()
    assert [wire(t) for t in got] == [wire(t) for t in ref]
    assert got[-1][4]["won"] is True and got[-1][2] is True  # the expert's episode, won, with the oracle keys
    assert all("expert_action" in t[4] for t in got)
