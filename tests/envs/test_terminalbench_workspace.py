"""The agent's writes are never lost: random file operations in a shipped task's workspace, played once in the
sandbox (through the env, as an agent plays them) and once with plain bash on a copy of the same build, leave the
same tree (paths, bytes, modes) and the same exit statuses, on a cold build cache and on a warm one, at every
isolation level this machine has.

A new machine's first episode once answered ``Permission denied`` to the agent's first overwrite of a file the
task's build had made (the files the build copied after its last ``RUN`` step stayed root's), while every
episode on a warm cache passed: only a cold cache shows that class of bug.
"""

from __future__ import annotations

import random
import re
import shutil
from pathlib import Path

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.sandbox import available_isolations
from tests.support.terminalbench import TREE_COMMAND, parse_tree, plain_tree, play_plain, workspace_ops

pytestmark = pytest.mark.timeout(240)
# Shipped tasks whose build copies files after its last RUN step (the class of the first-contact bug), with
# nested folders and names with spaces.
TASKS = ("backup-script-fix", "json-config-fix", "organize-by-extension")
_EXIT = re.compile(r"\n\[exit code (-?\d+)\]\n[^\n]*$")


def exit_status(obs: str) -> int:
    m = _EXIT.search(obs)
    return int(m.group(1)) if m else 0


def build_of(cache: Path, task_id: str) -> Path:
    """The task's build (its WORKDIR) as the local backend cached it: what every episode starts from."""
    entries = list((cache / "terminalbench-builds").glob(f"{task_id}-*/app"))
    assert len(entries) == 1, entries
    return entries[0]


@pytest.mark.parametrize("isolation", [pytest.param(level, marks=[] if level == "bwrap" else [pytest.mark.slow])
                                       for level in available_isolations()])  # bwrap's uid: where the bug lived
def test_random_file_operations_match_a_plain_copy_cold_and_warm(isolation, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("R2V_CACHE", str(cache))  # a new machine: nothing built yet
    env = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend="local", isolation=isolation,
                   split="all", max_output_chars=1_000_000, max_episode_steps=100)
    try:
        for task_id in TASKS if isolation == "bwrap" else TASKS[:1]:  # the uid's level: every task
            for temperature in ("cold", "warm"):  # the first episode builds the task, the second restores it
                seed = f"{isolation}-{task_id}-{temperature}"
                _obs, _info = env.reset(options={"task_id": task_id})
                build = build_of(cache, task_id)
                plain = tmp_path / seed
                shutil.copytree(build, plain, symlinks=True)
                assert parse_tree(env.step(TREE_COMMAND)[0]) == plain_tree(plain), f"{seed}: the starting trees"
                files = sorted(k for k, v in plain_tree(plain).items() if v[0] == "file")
                ops = workspace_ops(random.Random(seed), files)
                sandboxed = [exit_status(env.step(f"run {op}")[0]) for op in ops]
                assert sandboxed == play_plain(plain, ops), (seed, list(zip(ops, sandboxed)))
                assert parse_tree(env.step(TREE_COMMAND)[0]) == plain_tree(plain), (seed, ops)
    finally:
        env.close()
