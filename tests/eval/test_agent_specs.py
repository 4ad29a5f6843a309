"""`r2v eval`'s documented defaults and agent specs: ``--tasks N`` on every registered benchmark, step rows that
record the split of the task that ran, and the ``slm:``/``r2v:`` specs reached through the ``r2v.agents`` entry
points by ``python -m r2v_eval`` as well as by ``r2v eval``."""

from __future__ import annotations

import os
import subprocess
import sys

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401 - registers the ids
from r2v_agents.shards import load_rows
from r2v_eval.agents import build_agent, plugin_agents
from r2v_eval.cli import main
from r2v_eval.grid import GridConfig, resolve_tasks
from tests.support import ROOT

IDS = sorted(i for i in gym.registry if i.startswith("R2V/"))
NEEDS = {"R2V/TextWorld-v0": "textworld", "R2V/ALFWorld-v0": "alfworld", "R2V/HumanEval-v0": "evalplus",
         "R2V/ScienceWorld-v0": "scienceworld"}


@pytest.mark.parametrize("env_id", IDS)
def test_tasks_n_takes_the_first_n_tasks_of_the_split_on_every_registered_id(env_id):
    pytest.importorskip(NEEDS.get(env_id, "gymnasium"))
    if env_id == "R2V/HumanEval-v0" and not os.environ.get("HUMANEVAL_OVERRIDE_PATH"):
        pytest.skip("HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)")
    kwargs = {"suite": "small"} if env_id == "R2V/TextWorld-v0" else {}
    got = resolve_tasks(GridConfig(env_ids=(env_id,), tasks=2, env_kwargs=kwargs), env_id)
    env = gym.make(env_id, seed=0, **kwargs, perturbations=None)
    try:
        test = env.unwrapped.task_ids("test")
    finally:
        env.close()
    assert len(got) == min(2, len(test)) and got == test[:len(got)]


def test_step_and_episode_rows_record_the_split_of_the_task_that_ran(tmp_path):
    out = tmp_path / "eval"
    main(["--agent", "r2v_eval.agents:first_admissible", "--envs", "R2V/Scripted-v0", "--tasks", "2",
          "--seeds", "0", "--perturbations", "none", "--out", str(out), "--no-progress"])
    cell = out / "runs" / "R2V_Scripted-v0" / "none"
    env = gym.make("R2V/Scripted-v0", seed=0)
    test = env.unwrapped.task_ids("test")
    env.close()
    episodes = load_rows(cell, "episodes", ["task_id", "split"])
    assert len(episodes) == 2 and all(e["split"] == "test" and e["task_id"] in test for e in episodes)


def test_the_training_package_declares_the_run_directory_agents():
    assert {"slm", "r2v"} <= set(plugin_agents())
    with pytest.raises(Exception, match="manifest.json"):  # reached the training package's builder
        build_agent("slm:/nonexistent-run")


@pytest.mark.parametrize("spec", ["slm", "r2v"])
def test_python_m_r2v_eval_accepts_run_directory_specs(tmp_path, spec):
    """A fresh interpreter that never imported r2v_train: the entry point alone must route the spec."""
    done = subprocess.run([sys.executable, "-m", "r2v_eval", "--agent", f"{spec}:{tmp_path / 'no-run'}",
                           "--envs", "R2V/Scripted-v0", "--tasks", "1", "--seeds", "0", "--out",
                           str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "no manifest.json there" in done.stderr, done.stderr[-2000:]
    assert "come with the training package" not in done.stderr
