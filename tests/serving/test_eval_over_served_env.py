"""`r2v eval --envs URL`: an evaluation over an `r2v serve` server equals the same evaluation in process.

The runner resolves a URL through r2v_envs/resolve.py: its env slots open one server session per env, reset it with
``seed=z`` (the served env is made without a seed, so the reset sets z, as ``gym.make(id, seed=z)`` does in
process) and cap the steps client-side. Same tasks, seeds, step cap and deterministic agent: the same results.json
cells and the same step rows, with the episodes run in the main process (workers=0) and in worker processes that
connect after the fork (workers=2). A setting the server was not launched with is a typed error before any
episode runs.
"""

from __future__ import annotations

import json

import pandas as pd
import pytest

from r2v_envs.errors import ServedEnvMismatchError, ServerUnavailableError
from r2v_envs.resolve import env_task_ids, open_env, served_info
from r2v_envs.serving.app import serve_in_thread
from r2v_envs.serving.config import ServeConfig
from r2v_eval.cells import outcomes
from r2v_eval.cli import main
from tests.support.serving import free_port, reference_episodes, wire

pytestmark = pytest.mark.timeout(600)
SEEDS, MAX_STEPS = ("0", "1"), "5"
AGENT = "r2v_eval.agents:first_admissible"  # deterministic: the first admissible action


def _setting(env_id: str, alfworld_cache) -> tuple[dict, list[str]]:
    """(env kwargs without perturbations, two tasks) of a small suite of ``env_id``."""
    if env_id == "R2V/TextWorld-v0":
        pytest.importorskip("textworld")
        kw = {"suite": "small"}
        return kw, env_task_ids(env_id, "test", **kw)[:2]
    pytest.importorskip("alfworld")
    pytest.importorskip("fast_downward")
    from r2v_envs.alfworld import generate

    tasks = generate.task_ids(6)[:2]
    generate.ensure_games(tasks, 0, alfworld_cache, workers=1)  # offline games, generated once per module
    return {"source": "offline", "n_games": 6, "cache_dir": str(alfworld_cache)}, tasks


def _eval(env: str, out, kw: dict, tasks: list[str], workers: int) -> dict:
    main(["--agent", AGENT, "--envs", env, "--perturbations", "composite", "--seeds", *SEEDS, "--task-ids", *tasks,
          "--max-steps", MAX_STEPS, "--env-kwargs", json.dumps(kw), "--workers", str(workers), "--no-progress",
          "--out", str(out)])
    return json.loads((out / "results.json").read_text())


def _steps(out, run_dir: str) -> pd.DataFrame:
    frames = [pd.read_parquet(p) for p in sorted((out / run_dir).glob("steps-*.parquet"))]
    return pd.concat(frames, ignore_index=True).drop(columns=["env_id"])  # env_id: the URL vs the registered id


@pytest.mark.parametrize("env_id", ["R2V/TextWorld-v0", pytest.param("R2V/ALFWorld-v0", marks=pytest.mark.slow)])
def test_r2v_eval_over_a_served_env_equals_the_eval_in_process(env_id, alfworld_cache, tmp_path):
    kw, tasks = _setting(env_id, alfworld_cache)
    local = _eval(env_id, tmp_path / "local", kw, tasks, workers=0)
    served = json.dumps({**kw, "perturbations": "composite"})
    with serve_in_thread(ServeConfig(env=env_id, env_kwargs=served, port=0, oracle=True, workers=2)) as srv:
        remote = {w: _eval(srv.url, tmp_path / f"remote-{w}", kw, tasks, workers=w) for w in (0, 2)}
    (want,) = local["cells"]
    assert want["episodes"] == len(tasks) * len(SEEDS)
    for w, results in remote.items():
        (got,) = results["cells"]
        assert (got["env"], got["perturbation"]) == (want["env"], want["perturbation"])  # named by the served id
        assert (got["sr"], got["episodes"]) == (want["sr"], want["episodes"]), w
        assert outcomes(tmp_path / f"remote-{w}" / got["run_dir"]) == outcomes(tmp_path / "local" / want["run_dir"])
        pd.testing.assert_frame_equal(_steps(tmp_path / f"remote-{w}", got["run_dir"]),
                                      _steps(tmp_path / "local", want["run_dir"]))


def test_a_runner_episode_over_a_url_is_the_in_process_episode_byte_for_byte():
    # the runner's env slot in process: gym.make(id, seed=z) then reset(options); over a URL: open_env(url, seed=z),
    # a session whose resets carry seed=z; the serving tests' reference (reset(seed=z) on an unseeded env) agrees
    kw, z = {"task_id": "scripted-1"}, 5
    (actions, ref), = reference_episodes("R2V/Scripted-v0", kw, [z], 4, oracle=True).values()
    options = {"task_id": "scripted-1", "episode_index": 0}

    def play(env, reset_seed=None) -> list[str]:
        try:
            out = [(*env.reset(seed=reset_seed, options=options),)]
            for a in actions[:3]:
                out.append(env.step(a))
                if out[-1][2] or out[-1][3]:
                    break
        finally:
            env.close()
        return [wire(t) for t in out]

    with serve_in_thread(ServeConfig(env="R2V/Scripted-v0", env_kwargs=json.dumps(kw), port=0, oracle=True,
                                     workers=1)) as srv:
        local = play(open_env("R2V/Scripted-v0", seed=z, max_episode_steps=3, **kw))
        remote = play(open_env(srv.url, seed=z, max_episode_steps=3))
        seeded_at_reset = play(open_env(srv.url, max_episode_steps=3), reset_seed=z)
    assert remote == local == seeded_at_reset
    assert len(remote) >= 3
    helper = [wire((ref[0][0], ref[0][4])), *(wire(t) for t in ref[1:3])]
    assert remote[:3] == helper  # before the step cap of 3, the helper's uncapped episode is the same
    if len(remote) == 4:
        assert json.loads(remote[3])[3] is True  # the client-side TimeLimit truncated step 3


def test_a_setting_the_server_was_not_launched_with_is_a_typed_error(tmp_path):
    kw = json.dumps({"task_id": "scripted-1", "perturbations": "composite"})
    with serve_in_thread(ServeConfig(env="R2V/Scripted-v0", env_kwargs=kw, port=0, oracle=True, workers=1)) as srv:
        info = served_info(srv.url)
        assert info["env_id"] == "R2V/Scripted-v0" and info["perturbations"] == "composite"
        assert set(info["task_ids"]) == {"train", "valid", "test"} and info["oracle"] is True
        with pytest.raises(ServedEnvMismatchError, match=r"perturbations='composite', not None.*server per setting"):
            main(["--agent", AGENT, "--envs", srv.url, "--perturbations", "none", "composite", "--seeds", "0",
                  "--tasks", "1", "--no-progress", "--out", str(tmp_path / "bad")])
        assert not (tmp_path / "bad" / "runs").exists()  # refused before any episode ran
        with pytest.raises(ServedEnvMismatchError, match="task_id='scripted-1', not 'scripted-2'"):
            open_env(srv.url, task_id="scripted-2")
        with pytest.raises(ServedEnvMismatchError, match="at most 20 steps"):
            open_env(srv.url, max_episode_steps=50)
    with serve_in_thread(ServeConfig(env="R2V/Scripted-v0", env_kwargs=kw, port=0, workers=1)) as srv, \
            pytest.raises(ServedEnvMismatchError, match="--oracle"):
        main(["--agent", AGENT, "--envs", srv.url, "--perturbations", "composite", "--seeds", "0", "--tasks", "1",
                  "--no-progress", "--out", str(tmp_path / "no-oracle")])
    with serve_in_thread(ServeConfig(env="R2V/Scripted-v0", env_kwargs=kw, port=0, token="s3cret", workers=1)) as srv:
        with pytest.raises(ServerUnavailableError, match="token"):
            served_info(srv.url, token="wrong")
        assert served_info(srv.url, token="s3cret")["env_id"] == "R2V/Scripted-v0"
    with pytest.raises(ServerUnavailableError):
        open_env(f"http://127.0.0.1:{free_port()}")  # nothing listens there
