"""R2V/HumanEval-v0 through the gym API: every canonical solution wins, a wrong one per task loses, hostile
code is contained and the env keeps serving, observations are deterministic under a seed.

Needs HUMANEVAL_OVERRIDE_PATH (scripts/test.sh sets it from ../shared/data); skipped without it.
"""

from __future__ import annotations

import os
import secrets
import time
from concurrent.futures import ThreadPoolExecutor

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401 - registers the envs
from r2v_envs.errors import BackendUnavailableError, InvalidActionError, UnknownChoiceError
from r2v_envs.humaneval.data import N_TASKS, ensure_task_files, load_problems

pytestmark = pytest.mark.skipif(not os.environ.get("HUMANEVAL_OVERRIDE_PATH"),
                                reason="HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)")
SEED = 7
WORKERS = 2
ENV_ID = "R2V/HumanEval-v0"


def fence(code: str) -> str:
    return f"write_code\n```python\n{code}\n```"


@pytest.fixture(scope="module")
def problems():
    ensure_task_files(list(load_problems()[1]), workers=WORKERS)  # ground truth once (cached on disk)
    return load_problems()[1]


@pytest.fixture
def env():
    e = gym.make(ENV_ID, seed=SEED, perturbations=None, split="all")
    yield e
    e.close()


def play(env, task_id: str, actions: list[str]):
    obs, info = env.reset(options={"task_id": task_id})
    out = [(obs, 0.0, False, info)]
    for a in actions:
        obs, reward, terminated, _, info = env.step(a)
        out.append((obs, reward, terminated, info))
    return out


def expert_episode(env, task_id: str):
    obs, info = env.reset(options={"task_id": task_id})
    steps = []
    while info["expert_action"] is not None:
        steps.append(info["expert_action"].split("\n", 1)[0])
        obs, reward, terminated, truncated, info = env.step(info["expert_action"])
        if terminated or truncated:
            break
    return steps, reward, info


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_all_canonical_solutions_win_and_wrong_ones_lose(problems):
    """Through the env, 2 envs in parallel: expert path (write, test, submit) and a `return None` body."""
    ids = sorted(problems)
    assert len(ids) == N_TASKS

    def shard(part: list[str]):
        env = gym.make(ENV_ID, seed=SEED, perturbations=None, split="all")
        results = {}
        try:
            for t in part:
                steps, reward, info = expert_episode(env, t)
                wrong = play(env, t, [fence("return None"), "submit"])[-1]
                results[t] = (steps, reward, info["won"], wrong[1], wrong[3]["won"], info["sandbox"])
        finally:
            env.close()
        return results

    start = time.monotonic()
    with ThreadPoolExecutor(WORKERS) as pool:
        results = {}
        for part in pool.map(shard, [ids[i::WORKERS] for i in range(WORKERS)]):
            results.update(part)
    elapsed = time.monotonic() - start
    print(f"\njudged {2 * len(ids)} submissions through the env in {elapsed:.1f}s")
    assert {t: r[:3] for t, r in results.items() if r[:3] != (["write_code", "test", "submit"], 1.0, True)} == {}
    # `return None` is the right answer for no HumanEval+ task.
    assert [t for t, r in results.items() if r[3] != 0.0 or r[4]] == []


def test_off_by_one_mutation_fails(env, problems):
    p = problems["HumanEval/53"]  # add(x, y)
    assert play(env, "HumanEval/53", [fence("return x + y + 1"), "submit"])[-1][1:3] == (0.0, True)
    assert play(env, "HumanEval/53", [fence(p["prompt"] + p["canonical_solution"]), "submit"])[-1][1] == 1.0


def test_public_examples_report(env, problems):
    steps = play(env, "HumanEval/53", [fence("return x - y"), "test"])
    obs, _, terminated, info = steps[-1]
    assert info["channel"] == "tool_output" and not terminated
    assert "example 1: add(" in obs and "FAILED" in obs and obs.endswith("failed ===")
    assert "expected:" in obs and "got:" in obs


@pytest.mark.parametrize("action,expect", [
    ("hello there", "Unrecognised action"),
    ("write_code", "write_code needs code"),
    ("test", "No code saved yet"),
    ("submit", "No code saved yet"),
])
def test_malformed_or_premature_actions_get_feedback(env, problems, action, expect):
    obs, reward, terminated, info = play(env, "HumanEval/0", [action])[-1]
    assert expect in obs and "write_code" in obs and reward == 0.0 and not terminated


def test_non_text_action_is_typed_error(env, problems):
    env.reset(options={"task_id": "HumanEval/0"})
    with pytest.raises(InvalidActionError):
        env.step(None)


def test_episode_over_after_submit(env, problems):
    obs, reward, terminated, _ = play(env, "HumanEval/53", [fence("return 0"), "submit", "test"])[-1]
    assert terminated and "episode is over" in obs


HOSTILE = {
    "infinite_loop": "while True:\n    pass",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except Exception:\n        pass",
    "setsid_escaper": ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(300)\n"
                       "time.sleep(300)"),
    "huge_allocation": "x = bytearray(10 * 2**30)\nreturn x",
    "write_outside": "open('/tmp/r2v-escape-TOKEN', 'w').write('x')\nreturn x + y",
    "network_socket": ("import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\n"
                       "return x + y"),
    "read_environment": "import os\nreturn len(os.environ.get('R2V_HOST_SECRET', ''))",
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", sorted(HOSTILE))
def test_hostile_code_is_contained_and_env_keeps_serving(env, problems, kind, monkeypatch):
    token = secrets.token_hex(6)
    monkeypatch.setenv("R2V_HOST_SECRET", "s3cret")
    code = HOSTILE[kind].replace("TOKEN", token)
    start = time.monotonic()
    steps = play(env, "HumanEval/53", [fence(code), "test", "submit"])
    elapsed = time.monotonic() - start
    test_obs, (verdict_obs, reward, terminated, info) = steps[2][0], steps[3]
    assert terminated and reward == 0.0 and not info["won"], verdict_obs
    assert elapsed < 30, f"{kind} took {elapsed:.1f}s"
    assert not os.path.exists(f"/tmp/r2v-escape-{token}")
    if kind == "read_environment":
        assert "got:      0" in test_obs  # the host variable is not visible inside
    # the same env serves the next episode normally
    p = problems["HumanEval/53"]
    assert play(env, "HumanEval/53", [fence(p["prompt"] + p["canonical_solution"]), "submit"])[-1][1] == 1.0


def test_info_reports_isolation_and_keys(env, problems):
    obs, info = env.reset(options={"task_id": "HumanEval/0"})
    assert info["sandbox"] == r2v_envs.sandbox.available_isolations()[0]
    assert info["goal"] == problems["HumanEval/0"]["prompt"] and info["goal"] in obs
    assert info["admissible_actions"][1:] == ["test", "submit"] and info["expert_action"].startswith("write_code")


def test_observations_deterministic_under_seed(problems):
    def rollout(seed: int) -> list:
        env = gym.make(ENV_ID, seed=seed, split="all")  # composite perturbations (the default)
        try:
            out = []
            for episode in range(3):
                obs, info = env.reset(seed=seed) if episode == 0 else env.reset()
                out.append((obs, info["goal"], info["task_id"], info["perturbations"]))
                for action in [fence("return 1"), "test", "test", "submit"]:
                    obs, reward, terminated, _, info = env.step(action)
                    out.append((obs, reward, info["perturbations"]))
            return out
        finally:
            env.close()

    first = rollout(SEED)
    assert rollout(SEED) == first
    assert rollout(SEED + 1) != first
    kinds = {e["type"] for step in first for e in step[-1]}
    assert kinds, "the composite stack applied no perturbation in 15 steps"


def test_unknown_task_and_missing_data(monkeypatch, problems, tmp_path):
    env = gym.make(ENV_ID, seed=SEED, perturbations=None)
    with pytest.raises(UnknownChoiceError):
        env.reset(options={"task_id": "HumanEval/999"})
    env.close()
    bad = gym.make(ENV_ID, seed=SEED, data_path=str(tmp_path / "nope.jsonl.gz"))
    with pytest.raises(BackendUnavailableError, match="HUMANEVAL_OVERRIDE_PATH"):
        bad.reset()


def test_check_env_passes(problems):
    from gymnasium.utils.env_checker import check_env

    # no clock held still: info["step_wall_s"] (a measured time) is only on steps that ran code, and check_env's
    # sampled action runs none (CI at df4bc11 failed tests/envs/test_vector.py's check_env on 0.0 vs 0.0001 s)
    env = gym.make(ENV_ID, seed=SEED, perturbations=None, task_id="HumanEval/53")
    try:
        check_env(env.unwrapped, skip_render_check=True)
    finally:
        env.close()


# sum(itertools.count()) loops inside C, where EvalPlus' SIGALRM per-input limit never fires.
C_LOOP = "import itertools\nreturn sum(itertools.count())"


@pytest.mark.timeout(60)
def test_test_action_is_bounded_by_its_budget_and_says_so(problems):
    env = gym.make(ENV_ID, seed=SEED, perturbations=None, task_id="HumanEval/53", test_budget_s=2.0)
    try:
        env.reset()
        # add(0, 1) returns, add(1, 0) loops: example 1 is judged, example 2 is cut by the budget.
        env.step(fence(f"if x == 1:\n    {C_LOOP.replace(chr(10), chr(10) + '    ')}\nreturn x + y"))
        start = time.monotonic()
        obs, reward, terminated, _, info = env.step("test")
        elapsed = time.monotonic() - start
        assert 2.0 <= info["step_wall_s"] <= elapsed < 4.0, (info["step_wall_s"], elapsed)
        assert "[time budget] `test` stops after 2 s" in obs and not terminated and reward == 0.0
        assert "stopped: the 2 s budget of `test` ran out" in obs and obs.endswith("=== 1 passed, 2 failed ===")
        # the judge keeps serving: the canonical solution then passes all three examples at once
        p = problems["HumanEval/53"]
        env.step(fence(p["prompt"] + p["canonical_solution"]))
        obs, *_, info = env.step("test")
        assert obs.endswith("=== 3 passed, 0 failed ===") and "[time budget]" not in obs
        assert 0.0 < info["step_wall_s"] < 2.0
    finally:
        env.close()


def test_step_wall_time_only_on_steps_that_ran_code_and_bad_budget_rejected(env, problems):
    steps = play(env, "HumanEval/53", [fence("return x + y"), "hello", "test", "submit"])
    assert ["step_wall_s" in info for *_, info in steps] == [False, False, False, True, True]  # reset first
    assert all(isinstance(info["step_wall_s"], float) and info["step_wall_s"] > 0.0 for *_, info in steps[3:])
    with pytest.raises(ValueError, match="test_budget_s"):
        gym.make(ENV_ID, seed=SEED, test_budget_s=0)
