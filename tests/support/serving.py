"""Helpers of the serving tests (tests/serving/): one small task per env id, an episode played in process and
through a server, and a `r2v serve` run for the README's command (``python -m tests.support.serving``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401 - registers the ids

ROOT = Path(__file__).resolve().parents[2]
HUMANEVAL_DATA = "/work/shared/data/HumanEvalPlus-v0.1.10.jsonl.gz"


def env_kwargs(env_id: str, alfworld_cache: Path | None = None) -> dict[str, Any]:
    """Constructor arguments that pin one small task per id (skipping ids whose backend or data is missing)."""
    if env_id == "R2V/Scripted-v0":
        return {"task_id": "scripted-1"}
    if env_id == "R2V/TextWorld-v0":
        pytest.importorskip("textworld")
        return {"suite": "small", "task_id": "tw-cooking-medium-001"}
    if env_id == "R2V/ALFWorld-v0":
        pytest.importorskip("alfworld")
        pytest.importorskip("fast_downward")
        from r2v_envs.alfworld import generate

        task = generate.task_ids(6)[0]
        generate.ensure_games([task], 0, alfworld_cache, workers=1)
        return {"source": "offline", "n_games": 6, "cache_dir": str(alfworld_cache), "task_id": task}
    if env_id == "R2V/HumanEval-v0":
        if not os.environ.get("HUMANEVAL_OVERRIDE_PATH"):
            if not os.path.isfile(HUMANEVAL_DATA):
                pytest.skip("HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)")
            os.environ["HUMANEVAL_OVERRIDE_PATH"] = HUMANEVAL_DATA  # read in place, never copied
        pytest.importorskip("evalplus")
        return {"task_id": "HumanEval/53"}
    if env_id == "R2V/TerminalBench-v0":
        return {"backend": "local", "task_id": "greeting-cli"}
    if env_id == "R2V/BabyAI-v0":
        pytest.importorskip("minigrid")
        return {"task_id": "GoToLocal-0001"}
    if env_id == "R2V/ScienceWorld-v0":
        pytest.importorskip("scienceworld")
        return {"task_id": "find-non-living-thing/225"}  # 7 gold actions
    raise AssertionError(f"{env_id} is registered but has no case here: add one")


def wire(value: Any) -> str:
    """The bytes a value has on the wire (what a byte-for-byte comparison compares)."""
    from r2v_envs.serving.wire import jsonable

    return json.dumps(jsonable(value), sort_keys=True, ensure_ascii=False)


def reference_episode(env_id: str, kwargs: dict, seed: int, max_steps: int,
                      oracle: bool = False) -> tuple[list[str], list[tuple]]:
    """(actions, transitions) of one episode in process: the expert's actions, with one unknown command as the
    second action (feedback text is part of what must match). A transition is (obs, reward, terminated,
    truncated, served info)."""
    return reference_episodes(env_id, kwargs, [seed], max_steps, oracle)[seed]


def reference_episodes(env_id: str, kwargs: dict, seeds: list[int], max_steps: int,
                       oracle: bool = False) -> dict[int, tuple[list[str], list[tuple]]]:
    """:func:`reference_episode` for each seed, played on one env in turn (``reset(seed=s)`` replays exactly what a
    fresh env seeded ``s`` plays: the env contract; one env spares a JVM or a planner start per seed)."""
    from r2v_envs.serving.environment import served_info

    env = gym.make(env_id, **kwargs)
    episodes = {}
    try:
        for seed in seeds:
            obs, info = env.reset(seed=seed)
            out, actions = [(obs, None, False, False, served_info(info, oracle))], []
            for t in range(max_steps):
                action = "xyzzy" if t == 1 else str(info.get("expert_action") or "look")
                obs, reward, term, trunc, info = env.step(action)
                actions.append(action)
                out.append((obs, reward, term, trunc, served_info(info, oracle)))
                if term or trunc:
                    break
            episodes[seed] = (actions, out)
        return episodes
    finally:
        env.close()


def play(reset: Callable[[], tuple], step: Callable[[str], tuple], actions: list[str]) -> list[tuple]:
    """The transitions of ``actions`` through a client (``reset()`` -> (obs, info), ``step(a)`` -> 5 values)."""
    obs, info = reset()
    out = [(obs, None, False, False, info)]
    for a in actions:
        out.append(tuple(step(a)))
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen | None = None, timeout_s: float = 120.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with {proc.returncode}: {proc.stderr.read() if proc.stderr else ''}")
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.2)
    raise TimeoutError(f"{url} did not become healthy in {timeout_s} s")


def run_documented_serve(argv: list[str]) -> dict:
    """Start ``argv`` (an ``r2v serve`` command; its ``--port`` replaced by a free one), play one episode through
    it with OpenEnv's generic client, stop it with SIGINT; returns what was seen (printed as JSON by ``__main__``)."""
    from openenv import AutoEnv

    port = free_port()
    argv = list(argv)
    argv[argv.index("--port") + 1] = str(port)
    proc = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, proc)
        client = AutoEnv.from_env("r2v", base_url=url, skip_install=True).sync()
        with client:
            result = client.reset(seed=0)
            steps, info = 0, result.observation["info"]
            while not result.done and steps < 20:
                result = client.step({"text": info["admissible_actions"][0]})
                info, steps = result.observation["info"], steps + 1
    finally:
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    return {"steps": steps, "goal": info.get("goal"), "oracle_hidden": "expert_action" not in info,
            "returncode": proc.returncode, "listening": f"127.0.0.1:{port}" in err, "traceback": "Traceback" in err}


if __name__ == "__main__":
    # the installed console script, as a user runs it (its exit status after Ctrl-C is part of what is checked)
    print(json.dumps(run_documented_serve([shutil.which("r2v") or "r2v", *sys.argv[1:]])))
