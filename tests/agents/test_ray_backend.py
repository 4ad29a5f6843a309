"""The runner's Ray backend: same shards as the local backend, and a killed env actor loses nothing.

Starts a real local Ray instance (2 CPUs, no dashboard) once for the module; skipped without the ``ray`` extra.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import gymnasium as gym
import pytest

pytestmark = pytest.mark.slow  # end to end: a Ray cluster

from r2v_agents.runner import RunConfig, run
from r2v_agents.teachers import OracleTeacher
from r2v_envs.errors import UnknownChoiceError
from tests.support.scripted_runs import NoisyExpert, config, shard_bytes

KILL_MARKER = "R2V_TEST_RAY_KILL_MARKER"


class KillActorOnce(gym.Wrapper):
    """Inside a Ray actor, when armed (``<marker>.armed`` exists), on its 3rd step, ``ray.kill``s its own actor
    once (an O_EXCL marker file says it happened): the actor dies with all its episodes in flight. Does
    nothing outside an actor."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def reset(self, **kwargs):
        self.steps = 0  # envs are reused across episodes (and warm actors across runs)
        return self.env.reset(**kwargs)

    def step(self, action):
        self.steps += 1
        marker = os.environ.get(KILL_MARKER)
        if self.steps == 3 and marker and os.path.exists(marker + ".armed"):
            import ray

            if ray.is_initialized() and ray.get_runtime_context().get_actor_id() is not None:
                try:
                    fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.close(fd)
                    ray.kill(ray.get_runtime_context().current_actor)
                    time.sleep(30)  # killed before this returns
        return self.env.step(action)


WRAP = ("tests.agents.test_ray_backend:KillActorOnce",)


@pytest.fixture(scope="module")
def ray_local(tmp_path_factory):
    ray = pytest.importorskip("ray", reason="the Ray backend needs the 'ray' extra: pip install 'ray[default]'")
    marker_dir = tmp_path_factory.mktemp("ray-marker")
    os.environ[KILL_MARKER] = str(marker_dir / "killed")  # inherited by the raylet and its workers
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield marker_dir / "killed"
    ray.shutdown()
    del os.environ[KILL_MARKER]


def test_config_checks_backend():
    with pytest.raises(UnknownChoiceError):
        RunConfig("R2V/Scripted-v0", "x", backend="spark")
    with pytest.raises(ValueError, match="workers >= 1"):
        RunConfig("R2V/Scripted-v0", "x", backend="ray", workers=0)


def test_ray_shards_equal_local_shards(tmp_path, ray_local):
    local = run(NoisyExpert(), config(tmp_path / "local", wrappers=WRAP))
    ray_files = {}
    for mode in (False, True):  # policy in the driver (lock step) / a copy in each actor (chunks)
        out = tmp_path / f"ray-{mode}"
        summary = run(NoisyExpert(), config(out, wrappers=WRAP, backend="ray", workers=2, envs_per_worker=2,
                                            policy_in_workers=mode))
        assert (summary.episodes, summary.successes, summary.steps) == (local.episodes, local.successes,
                                                                         local.steps)
        assert summary.worker_restarts == 0 and len(summary.worker_cpu_s) == 2
        ray_files[mode] = shard_bytes(out)
    assert len(ray_files[False]) == 12
    assert ray_files[False] == ray_files[True] == shard_bytes(tmp_path / "local")
    assert not ray_local.exists()  # the killing wrapper stayed quiet until the kill test


@pytest.mark.parametrize("policy_in_workers", [False, True])
def test_killed_actor_loses_nothing(tmp_path, ray_local, policy_in_workers):
    ray_local.unlink(missing_ok=True)
    Path(f"{ray_local}.armed").touch()
    local = tmp_path / "local"
    run(NoisyExpert(), config(local, wrappers=WRAP))
    out = tmp_path / "ray"
    summary = run(NoisyExpert(), config(out, wrappers=WRAP, backend="ray", workers=2, envs_per_worker=2,
                                        policy_in_workers=policy_in_workers))
    Path(f"{ray_local}.armed").unlink()
    assert ray_local.exists() and summary.worker_restarts == 1  # an actor really died mid-run
    assert summary.episodes == 18
    assert shard_bytes(out) == shard_bytes(local)
    assert not list((out / "pending").iterdir())


def test_ray_policy_actor_serves_decisions(tmp_path, ray_local):
    from r2v_agents.ray_backend import RayPolicy

    policy = RayPolicy(OracleTeacher, replicas=2, num_cpus=0)
    assert (policy.name, policy.sees_oracle) == ("oracle", True)
    try:
        served = run(policy, config(tmp_path / "served", backend="ray", workers=1, envs_per_worker=3))
    finally:
        policy.close()
    direct = run(OracleTeacher(), config(tmp_path / "direct"))
    assert served.successes == direct.successes == 18
    assert shard_bytes(tmp_path / "served") == shard_bytes(tmp_path / "direct")


def test_runs_leave_no_actors_behind(ray_local):
    import ray

    from r2v_agents.ray_backend import close_warm_actors

    assert ray.available_resources().get("CPU", 0) < 2  # warm actors kept for the next run (keep_workers)
    close_warm_actors()
    deadline = time.time() + 10  # ray.kill is asynchronous
    while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
        time.sleep(0.1)
    assert ray.available_resources().get("CPU", 0) == 2
