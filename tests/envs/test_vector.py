"""Every registered id through Gymnasium's own API: check_env, and ``gym.make_vec`` in sync and async modes.

Sync and async runs of the same reset seeds must return byte-identical observations (async moves them through
shared memory, r2v_envs/vector.py), the same batched infos, Gymnasium's next-step autoreset, and leave no process
behind. Each id plays one fixed task of a small suite, so the games are generated (or read from the cache) once.
"""

from __future__ import annotations

import os
import warnings

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import r2v_envs
from r2v_envs.core import TextSpace
from r2v_envs.scienceworld.engine import close_idle_engines

pytestmark = pytest.mark.timeout(300)
SEEDS = [3, 4]
STEPS = 2  # the step cap: the third step is the autoreset
# ALFWorld generates its games first; ScienceWorld starts a JVM per env (5 per vector test)
SLOW_IDS = {"R2V/ALFWorld-v0", "R2V/ScienceWorld-v0"}
STRONG = {"flaky": {"prob": 0.5}, "partial": {"prob": 0.5}, "distractor": {"prob": 1.0}, "injection": {"prob": 0.5}}


def _skip_unless(module: str) -> None:
    pytest.importorskip(module, reason=f"needs {module}")


@pytest.fixture(scope="module")
def alfworld_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("alfworld-vector")


def env_kwargs(env_id: str, alfworld_cache) -> dict:
    """Constructor arguments that pin one small task per id (and skip ids whose backend is missing)."""
    if env_id == "R2V/Scripted-v0":
        return {"task_id": "scripted-1"}
    if env_id == "R2V/TextWorld-v0":
        _skip_unless("textworld")
        return {"suite": "small", "task_id": "tw-cooking-medium-001"}
    if env_id == "R2V/ALFWorld-v0":
        _skip_unless("alfworld")
        _skip_unless("fast_downward")
        from r2v_envs.alfworld import generate

        task = generate.task_ids(6)[0]
        # generate the game here, once: two worker processes must not race to write it
        generate.ensure_games([task], 0, alfworld_cache, workers=1)
        return {"source": "offline", "n_games": 6, "cache_dir": str(alfworld_cache), "task_id": task}
    if env_id == "R2V/HumanEval-v0":
        if not os.environ.get("HUMANEVAL_OVERRIDE_PATH"):
            pytest.skip("HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)")
        _skip_unless("evalplus")
        return {"task_id": "HumanEval/53"}
    if env_id == "R2V/TerminalBench-v0":
        return {"backend": "local", "task_id": "greeting-cli"}
    if env_id == "R2V/BabyAI-v0":
        _skip_unless("minigrid")
        return {"task_id": "GoToLocal-0001"}
    if env_id == "R2V/ScienceWorld-v0":
        _skip_unless("scienceworld")
        return {"task_id": "lifespan-longest-lived/93"}  # a 4-action gold sequence; a JVM per env
    raise AssertionError(f"{env_id} is registered but has no case here: add one")


def _children() -> set[int]:
    """This process's children, but the session's background game servers (tests/conftest.py), which start when
    a game is missing, whatever test is running."""
    me, out = os.getpid(), set()
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) != me:
                        continue
                with open(f"/proc/{pid}/cmdline", "rb") as f:
                    if b"r2v_envs.textworld.generate" not in f.read():
                        out.add(int(pid))
            except (OSError, IndexError, ValueError):
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def play_vector(env_id: str, mode: str, kwargs: dict):
    """Reset with SEEDS, then STEPS + 1 steps of each env's expert action: observations, rewards, infos."""
    envs = gym.make_vec(env_id, num_envs=2, vectorization_mode=mode, perturbations=STRONG,
                        max_episode_steps=STEPS, **kwargs)
    try:
        obs, infos = envs.reset(seed=SEEDS)
        trace = [(obs, None, None, _info_view(infos))]
        for _ in range(STEPS + 1):
            actions = tuple(a if isinstance(a, str) else "look" for a in infos["expert_action"])
            obs, reward, term, trunc, infos = envs.step(actions)
            trace.append((obs, reward.tolist(), (term | trunc).tolist(), _info_view(infos)))
        replay, _ = envs.reset(seed=SEEDS)
        workers = [p.pid for p in getattr(envs, "processes", [])]
    finally:
        envs.close()
    return trace, replay, workers


def _info_view(infos: dict) -> dict:
    keys = ("task_id", "step", "episode_index", "perturbation_seed", "won", "goal")
    return {k: [str(x) for x in infos[k]] for k in keys} | {"_task_id": infos["_task_id"].tolist()}


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.slow) if i in SLOW_IDS else i
                                    for i in sorted(r2v_envs.ENV_IDS)])  # ALFWorld: games generated first
def test_check_env(env_id, alfworld_cache):
    env = gym.make(env_id, **env_kwargs(env_id, alfworld_cache))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    env.close()
    # check_env always notes that a wrapped env "is different from the unwrapped version"; ResourceWarnings come
    # from the garbage collector closing another test's files at random moments
    assert [str(w.message) for w in caught if "different from the unwrapped" not in str(w.message)
            and not issubclass(w.category, ResourceWarning)] == []


@pytest.mark.parametrize("env_id", [pytest.param(i, marks=pytest.mark.slow) if i in SLOW_IDS else i
                                    for i in sorted(r2v_envs.ENV_IDS)])  # ALFWorld: games generated first
def test_make_vec_sync_equals_async(env_id, alfworld_cache):
    kwargs = env_kwargs(env_id, alfworld_cache)
    before = _children()
    sync, sync_replay, _ = play_vector(env_id, "sync", kwargs)
    asyn, async_replay, workers = play_vector(env_id, "async", kwargs)

    # real text, not the shared-memory placeholder, and byte-identical across modes and processes
    for obs, *_ in sync:
        assert isinstance(obs, tuple) and all(TextSpace().contains(o) and o and set(o) != {"0"} for o in obs)
    assert [[o.encode() for o in obs] for obs, *_ in asyn] == [[o.encode() for o in obs] for obs, *_ in sync]
    assert [t[1:] for t in asyn] == [t[1:] for t in sync]
    # reset(seed=s) without z at make: z = s, and the same seeds replay the same episode
    assert sync[0][3]["perturbation_seed"] == [str(s) for s in SEEDS]
    assert sync_replay == sync[0][0] and async_replay == sync[0][0]
    # Gymnasium's next-step autoreset: the step after the cap returns the next episode's first observation
    assert sync[STEPS][2] == [True, True] and sync[STEPS + 1][2] == [False, False]
    assert sync[STEPS + 1][3]["step"] == ["0", "0"] and sync[STEPS + 1][3]["episode_index"] == ["1", "1"]
    single = gym.make(env_id, perturbations=STRONG, max_episode_steps=STEPS, **kwargs)
    _, info = single.reset(seed=SEEDS[0])
    for _ in range(STEPS):
        *_, info = single.step(info["expert_action"] if isinstance(info["expert_action"], str) else "look")
    assert single.reset()[0] == sync[STEPS + 1][0][0]
    single.close()
    # close() joined the workers and left nothing behind (ScienceWorld's closed envs keep their JVMs a while for the
    # process's next envs, r2v_envs.scienceworld.engine; closing those leaves nothing)
    assert workers and not any(_alive(p) for p in workers)
    if env_id == "R2V/ScienceWorld-v0":
        close_idle_engines()
    assert not [p for p in _children() - before if _alive(p)]


def test_seed_story_single_env():
    kw = {"task_id": "scripted-2", "perturbations": STRONG}
    a, b = gym.make("R2V/Scripted-v0", **kw), gym.make("R2V/Scripted-v0", **kw)

    def play(env, seed):
        obs, info = env.reset(seed=seed)
        out = [obs]
        for _ in range(4):
            out.append(env.step("go east")[0])
        return out, info["perturbation_seed"]

    assert play(a, 5) == play(b, 5) and play(a, 5)[1] == 5
    assert play(a, 6)[0] != play(a, 5)[0]
    # z given at make wins over the reset seed
    fixed = gym.make("R2V/Scripted-v0", seed=7, **kw)
    assert play(fixed, 5)[1] == 7 and play(fixed, 5)[0] == play(gym.make("R2V/Scripted-v0", seed=7, **kw), 5)[0]
    assert play(fixed, 5)[0] != play(a, 5)[0]


def test_shared_memory_view_round_trips_unicode():
    import copy
    import multiprocessing as mp

    from gymnasium.vector.utils import (
        create_shared_memory,
        read_from_shared_memory,
        write_to_shared_memory,
    )

    sp = TextSpace(max_length=6)
    mem = create_shared_memory(sp, n=3, ctx=mp)
    view = read_from_shared_memory(sp, mem, n=3)
    write_to_shared_memory(sp, 0, "😀" * 6, mem)
    write_to_shared_memory(sp, 2, "a\nb", mem)
    assert copy.deepcopy(view) == ("😀" * 6, "", "a\nb") and type(copy.deepcopy(view)) is tuple
    write_to_shared_memory(sp, 0, "x", mem)  # a shorter value replaces a longer one completely
    assert view[0] == "x" and view[-1] == "a\nb" and view[1:] == ("", "a\nb")
    with pytest.raises(ValueError, match="max_length"):
        write_to_shared_memory(sp, 1, "y" * 7 * 4, mem)
    assert np.array_equal(np.asarray(tuple(view)), np.asarray(("x", "", "a\nb")))
