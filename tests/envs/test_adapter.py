"""``r2v_envs.perturb()`` on a user's own env: the documented env of docs/perturb-your-env.md (its code is taken
from the page), perturbed deterministically across processes, vectorised, run by the runner and evaluated by the
page's own ``r2v eval`` commands; channels the env cannot feed are skipped and said once."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

import r2v_envs
from r2v_envs.adapter import ChannelSkippedWarning, TextEnvAdapter
from r2v_envs.errors import PerturbationConfigError, UnknownChoiceError

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "perturb-your-env.md"


def page_blocks(lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", PAGE.read_text(), re.DOTALL | re.MULTILINE)


@pytest.fixture(scope="module")
def user_module(tmp_path_factory):
    """The page's env saved as ``my_corridor.py``, as the page tells the user to, and imported from there."""
    folder = tmp_path_factory.mktemp("user")
    (folder / "my_corridor.py").write_text(page_blocks("python")[0])
    sys.path.insert(0, str(folder))
    try:
        import my_corridor

        yield folder, my_corridor
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("my_corridor", None)


def play(env, episodes: int = 3) -> list:
    """Expert actions, with a bad command and a west step mixed in, over a few episodes of one env."""
    out = []
    for k in range(episodes):
        obs, info = env.reset(options={"task_id": f"seed-{k}", "episode_index": k})
        out.append([obs, info["goal"], info["admissible_actions"], info["perturbations"]])
        for t in range(12):
            action = ("xyzzy", "go west", info["expert_action"])[t % 3]
            obs, reward, terminated, truncated, info = env.step(action)
            out.append([obs, reward, terminated, truncated, info["won"], info["perturbations"]])
            if terminated or truncated:
                break
    return out


SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from r2v_envs import perturb
from tests.envs.test_adapter import play
import my_corridor
print(json.dumps(play(perturb(my_corridor.Corridor(), perturbations="composite", seed=int(sys.argv[2])))))
"""


def test_same_seed_same_bytes_in_two_processes(user_module):
    folder, _ = user_module

    def run(z: int) -> str:
        return subprocess.run([sys.executable, "-c", SCRIPT, str(folder), str(z)], cwd=ROOT, check=True,
                              capture_output=True, text=True).stdout

    first, second, other = run(7), run(7), run(8)
    assert first == second and first != other
    events = [e for row in json.loads(first) for e in row[-1]]
    assert {e["type"] for e in events} >= {"flaky", "partial", "distractor"}  # the composite stack acts


def test_perturbations_change_only_what_is_seen(user_module):
    _, mod = user_module
    clean = play(r2v_envs.perturb(mod.Corridor(), perturbations=None, seed=7))
    noisy = play(r2v_envs.perturb(mod.Corridor(), perturbations="composite", seed=7))
    assert [r[1:5] for r in clean if len(r) == 6] == [r[1:5] for r in noisy if len(r) == 6]  # rewards, ends, won
    assert [r[0] for r in clean] != [r[0] for r in noisy]
    assert all(not r[-1] for r in clean)


def test_check_env_and_contract_keys(user_module):
    _, mod = user_module
    env = gym.make("my_corridor:MyOrg/Corridor-v0", seed=0, perturbations=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset()
    assert set(r2v_envs.core.INFO_KEYS) <= set(info) and info["perturbation_seed"] == 0
    assert isinstance(env.unwrapped, TextEnvAdapter) and isinstance(env.unwrapped.inner, mod.Corridor)
    assert len(env.unwrapped.task_ids("all")) == 40 and len(env.unwrapped.task_ids("test")) == 6
    obs, _, terminated, _, info = env.step("xyzzy")  # unknown text: the env's own answer, no crash
    assert obs.startswith("You are in room 0") and not terminated
    with pytest.raises(r2v_envs.errors.InvalidActionError):
        env.step(None)
    env.close()


def test_vector_env_matches_single_envs(user_module):
    envs = gym.make_vec("my_corridor:MyOrg/Corridor-v0", num_envs=2, vectorization_mode="async")
    try:
        obs, infos = envs.reset(seed=[3, 4])
        obs2, *_ = envs.step(tuple(infos["expert_action"]))
    finally:
        envs.close()
    for i, z in enumerate((3, 4)):
        env = gym.make("my_corridor:MyOrg/Corridor-v0")
        o, info = env.reset(seed=z)
        o2, *_ = env.step(info["expert_action"])
        assert (obs[i], obs2[i]) == (o, o2)


class Bare(gym.Env):
    """Text in a dict observation, no goal, no admissible actions, no won flag, and a time limit of its own."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return {"text": "A bare room.\nA lever.", "pixels": [0, 1]}, {}

    def step(self, action):
        self.t += 1
        done = action["cmd"] == "pull lever"
        return {"text": "Click." if done else "Nothing.", "pixels": [1]}, float(done), done, self.t >= 3, {}


def test_missing_channels_are_skipped_and_said_once():
    env = r2v_envs.perturb(Bare(), seed=1, obs_key="text", action_key="cmd", tasks=4)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            env.reset()
            env.step("look")
        *_, terminated, _, info = env.step("pull lever")
    said = [str(w.message) for w in caught if w.category is ChannelSkippedWarning]
    assert len([m for m in said if "'goal'" in m]) == 1 and len([m for m in said if "'admissible_actions'" in m]) == 1
    assert len([m for m in said if "'won'" in m]) == 1
    assert set(env.unwrapped.skipped_channels) == {"goal", "admissible_actions"}
    assert info["won"] and terminated and info["observation_fields"] == {"pixels": [1]}
    env.reset()
    for _ in range(3):
        *_, terminated, truncated, info = env.step("look")
    assert truncated and not terminated  # the env's own time limit stays a truncation


def test_bad_declarations_are_typed_errors():
    with pytest.raises(PerturbationConfigError, match="needs text"):
        r2v_envs.perturb(Bare(), seed=0).reset()
    with pytest.raises(UnknownChoiceError, match="observation field"):
        r2v_envs.perturb(Bare(), seed=0, obs_key="txt").reset()
    with pytest.raises(UnknownChoiceError):
        r2v_envs.perturb(Bare(), seed=0, perturbations="flakey")
    with pytest.raises(UnknownChoiceError):
        r2v_envs.perturb(Bare(), seed=0, profile="chess")
    with pytest.raises(PerturbationConfigError):
        r2v_envs.perturb(object(), seed=0)


def test_the_pages_r2v_eval_commands(user_module, tmp_path):
    folder, _ = user_module
    commands = [shlex.split(c) for c in page_blocks("bash")[0].splitlines() if c.strip()]
    assert [c[:3] for c in commands] == [["r2v", "eval", "--agent"]] * 2
    env = {**os.environ, "PYTHONPATH": f"{folder}:{ROOT}"}
    for argv in commands:
        agent = argv[3]
        args = [*argv[2:-1], str(tmp_path / agent), "--no-progress", "--bootstrap", "50"]
        if agent == "random":  # in this process (the page's module is on sys.path)
            from r2v_eval.cli import main

            main(args)
        else:  # a fresh process with env workers: their fork server imports (registers) the module itself
            out = subprocess.run([sys.executable, "-m", "r2v_train.cli", "eval", *args, "--workers", "2"], check=False,
                                 cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, out.stderr[-3000:]
        results = json.loads((tmp_path / agent / "results.json").read_text())
        cells = {c["perturbation"]: c for c in results["cells"]}
        assert set(cells) == {"none", "composite"} and all(c["episodes"] == 10 for c in cells.values())
        if agent == "expert":
            assert all(c["sr"] == 100.0 for c in cells.values())
