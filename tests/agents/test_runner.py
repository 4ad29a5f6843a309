"""The shared rollout runner: determinism, resume after SIGKILL, labels, errors, datasets loading."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import r2v_envs  # noqa: F401
from r2v_agents.features import N_FEATURES
from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.runner import run
from r2v_agents.shards import contexts_from_steps, load_dataset, load_rows
from r2v_agents.teachers import OracleTeacher
from r2v_agents.workers import EnvSlots
from tests.support.scripted_runs import SEEDS, TASKS, NoisyExpert, config, shard_bytes


def test_runner_is_deterministic_across_reruns_and_worker_counts(tmp_path):
    a = run(NoisyExpert(), config(tmp_path / "a"))
    run(NoisyExpert(), config(tmp_path / "b"))
    run(NoisyExpert(), config(tmp_path / "c", workers=2, envs_per_worker=2))
    run(NoisyExpert(), config(tmp_path / "d", workers=2, envs_per_worker=3, policy_in_workers=True))
    assert a.episodes == len(TASKS) * len(SEEDS) and 0 < a.successes < a.episodes  # both outcomes occur
    files = shard_bytes(tmp_path / "a")
    assert len(files) == 3 * 4  # 18 episodes in shards of 5: 4 triples
    assert files == shard_bytes(tmp_path / "b") == shard_bytes(tmp_path / "c") == shard_bytes(tmp_path / "d")
    assert not list((tmp_path / "a" / "pending").iterdir())


def test_labels_steps_and_episode_rows_agree(tmp_path):
    run(NoisyExpert(), config(tmp_path))
    episodes = {e["episode_id"]: e for e in load_rows(tmp_path, "episodes")}
    steps, router = load_rows(tmp_path, "steps"), load_rows(tmp_path, "router")
    assert sorted(episodes) == sorted(f"{t}@{z}" for t in TASKS for z in SEEDS)
    assert len(router) == len(steps) == sum(e["steps"] for e in episodes.values())
    for r in router:  # Eq. 7: y_t = 1[episode failed]
        assert r["y"] == int(not episodes[r["episode_id"]]["success"]) and len(r["features"]) == N_FEATURES
    for e in episodes.values():
        assert e["teacher_calls"] == 0 and e["error"] is None
        assert e["success"] == (e["return"] > 0)  # the scripted game pays 1.0 exactly when won
    # the step rows rebuild the contexts the policy saw: history is the logged actions
    for ctx, row in contexts_from_steps(steps):
        assert ctx.actions == row["history_actions"] and ctx.step == row["t"]
    assert any(s["perturbations"] != "[]" for s in steps)  # perturbation events are logged per step
    ds = load_dataset(tmp_path, "router")
    assert ds.num_rows == len(router) and set(ds.column_names) >= {"features", "y", "z", "task_id", "benchmark"}


def test_oracle_policy_wins_every_clean_episode(tmp_path):
    s = run(OracleTeacher(), config(tmp_path, env_kwargs={"perturbations": None}, max_steps=None))
    assert s.success_rate == 1.0 and s.teacher_calls == s.steps  # every oracle step counts as a teacher call


def test_env_errors_end_the_episode_not_the_run(tmp_path):
    bad = lambda obs, info: None  # noqa: E731 - not a str: the env raises InvalidActionError
    run(Decisionize(bad), config(tmp_path, task_ids=TASKS[:2], seeds=(0,)))
    rows = load_rows(tmp_path, "episodes")
    assert len(rows) == 2 and all("InvalidActionError" in r["error"] and not r["success"] for r in rows)


class Decisionize(BatchPolicy):
    def __init__(self, fn):
        self.fn = fn

    def act_batch(self, contexts, infos):
        return [Decision(action=self.fn(c.observation, i)) for c, i in zip(contexts, infos)]


def test_resume_refuses_a_different_env_setting(tmp_path):
    run(OracleTeacher(), config(tmp_path, task_ids=TASKS[:1], seeds=(0,)))
    with pytest.raises(ValueError, match="different"):
        run(OracleTeacher(), config(tmp_path, task_ids=TASKS[:1], seeds=(0,), max_steps=3))


def test_policy_in_workers_needs_a_picklable_policy(tmp_path):
    with pytest.raises(ValueError, match="picklable"):
        run(lambda obs, info: "look", config(tmp_path, workers=1, policy_in_workers=True))


class ShoutObservations:
    """A user wrapper named by import path (RunConfig.wrappers)."""

    def __new__(cls, env):
        import gymnasium as gym

        class Shout(gym.ObservationWrapper):
            def observation(self, obs):
                return obs.upper()
        return Shout(env)


def test_extra_wrappers_by_import_path(tmp_path):
    run(OracleTeacher(), config(tmp_path, task_ids=TASKS[:1], seeds=(0,), workers=1, envs_per_worker=1,
                                wrappers=("tests.agents.test_runner:ShoutObservations",)))
    steps = load_rows(tmp_path, "steps")
    assert steps and all(r["observation"] == r["observation"].upper() for r in steps)


class JitterSteps:
    """A user wrapper that sleeps 0-20 ms (truly random) before each step: worker timing varies run to run."""

    def __new__(cls, env):
        import gymnasium as gym

        class Jitter(gym.Wrapper):
            def step(self, action):
                time.sleep(int.from_bytes(os.urandom(1), "little") / 255 * 0.02)
                return self.env.step(action)
        return Jitter(env)


class RecordBatches(NoisyExpert):
    """NoisyExpert that records which (episode, step) contexts share each ``act_batch`` call."""

    def __init__(self):
        super().__init__()
        self.batches: list[list[str]] = []

    def act_batch(self, contexts, infos):
        self.batches.append([f"{c.extra['episode_id']}:{c.step}" for c in contexts])
        return super().act_batch(contexts, infos)


def test_lockstep_batches_do_not_depend_on_worker_timing(tmp_path):
    # a batched SLM forward pass's floats depend on which contexts share the batch, so the batches themselves
    # must be the same on a rerun even when env steps take random time (with lockstep=False they differ)
    runs = []
    for name in "ab":
        policy = RecordBatches()
        run(policy, config(tmp_path / name, seeds=(0,), workers=2, envs_per_worker=2,
                           wrappers=("tests.agents.test_runner:JitterSteps",)))
        runs.append(policy.batches)
    assert len(runs[0]) > 8 and any(len(b) > 1 for b in runs[0])
    assert runs[0] == runs[1]


def test_unknown_task_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="did you mean"):
        run(OracleTeacher(), config(tmp_path, task_ids=("scripted-O",)))


SCRIPT = """
import sys
sys.path.insert(0, {root!r})
from tests.support.scripted_runs import NoisyExpert, config
from r2v_agents.runner import run
from pathlib import Path
run(NoisyExpert(sleep_s={sleep}), config(Path({out!r}), shard_episodes=2, workers={workers}, envs_per_worker=2,
                                         policy_in_workers={in_workers}))
"""


@pytest.mark.parametrize("in_workers", [False, True])
def test_sigkill_then_resume_loses_nothing_and_leaves_no_corrupt_file(tmp_path, in_workers):
    ref, out = tmp_path / "ref", tmp_path / "killed"
    run(NoisyExpert(), config(ref, shard_episodes=2))
    root = str(Path(__file__).resolve().parents[2])
    script = textwrap.dedent(SCRIPT.format(root=root, out=str(out), sleep=0.01, workers=1,
                                             in_workers=in_workers))
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.time() + 60
    while time.time() < deadline and len(list(out.glob("episodes-*.parquet"))) < 2:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_before = len(load_rows(out, "episodes"))
    assert 0 < n_before < len(TASKS) * len(SEEDS), "kill the run mid-way"
    summary = run(NoisyExpert(), config(out, shard_episodes=2))
    assert summary.skipped >= n_before and summary.skipped + summary.episodes == len(TASKS) * len(SEEDS)
    for kind in ("episodes", "steps", "router"):
        assert load_rows(out, kind) == load_rows(ref, kind)
    assert not list(out.glob(".*.tmp")) and not list((out / "pending").iterdir())


def _play(env, reset_kwargs, actions):
    obs, info = env.reset(**reset_kwargs)
    trace = [(obs, info["perturbations"], info["admissible_actions"])]
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        trace.append((obs, reward, term, trunc, info["perturbations"], info["admissible_actions"]))
    return trace


def fixed_z_scripted(seed, **kwargs):
    """A user's ``module:callable`` that needs ``seed`` (its z is fixed at make)."""
    import gymnasium as gym

    return gym.make("R2V/Scripted-v0", seed=seed, **kwargs)


def test_env_slots_reuse_one_env_across_z_and_play_what_a_fresh_env_plays():
    import gymnasium as gym

    actions = ["look", "go east", "take coin", "go west"]
    kwargs = {"perturbations": "composite"}
    slots = EnvSlots("R2V/Scripted-v0", kwargs, max_steps=10)
    made, traces = [], {}
    try:
        for z in (3, 7, 3, 11):  # one slot: the same env serves every z
            key, env = slots._env_for(0, z)
            made.append(id(env.unwrapped))
            got = _play(env, {"seed": z, "options": {"task_id": TASKS[0], "episode_index": 0}}, actions)
            fresh = gym.make("R2V/Scripted-v0", seed=z, max_episode_steps=10, **kwargs)
            try:
                want = _play(fresh, {"options": {"task_id": TASKS[0], "episode_index": 0}}, actions)
            finally:
                fresh.close()
            assert key is None and got == want, z
            traces[z] = got
        assert slots.follows_reset_seed is True and len(set(made)) == 1
        assert len({repr(t) for t in traces.values()}) == 3  # the noise is on: each z plays differently

        # the runner's own commands: one env, and each reset's z is the one the command names
        out = slots.handle([("reset", 0, TASKS[0], 5), ("step", 0, "look")])
        assert [o[6] for o in out] == [None, None] and out[0][5]["perturbation_seed"] == 5
    finally:
        slots.close()

    fixed = EnvSlots("tests.agents.test_runner:fixed_z_scripted", kwargs, max_steps=10)
    try:
        keys = [fixed._env_for(0, z)[0] for z in (3, 7)]
        assert fixed.follows_reset_seed is False and keys == [3, 7]  # made per z, as before
        out = fixed.handle([("reset", 0, TASKS[0], 9)])
        assert out[0][6] is None and out[0][5]["perturbation_seed"] == 9
    finally:
        fixed.close()
