"""R2V/BabyAI-v0 on the real minigrid engine and its real BabyAI bot: the bot wins the test split, the text says
what the grid holds, bad input gets feedback, the same seed gives the same bytes in two processes, the vector API
and ``r2v eval`` (random and expert) run on it."""

from __future__ import annotations

import collections
import json
import re
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

pytest.importorskip("minigrid", reason="minigrid is not installed: pip install 'r2v[babyai]'")

import r2v_envs  # noqa: F401
from r2v_envs.babyai.env import LEVELS
from r2v_envs.babyai.text import COMMANDS
from r2v_envs.errors import InvalidActionError, UnknownChoiceError

ROOT = Path(__file__).resolve().parents[2]
ENV_ID = "R2V/BabyAI-v0"


def play_expert(env, task_id: str, fallback: str = "toggle"):
    obs, info = env.reset(options={"task_id": task_id})
    observations = [obs]
    while True:
        obs, reward, terminated, truncated, info = env.step(info["expert_action"] or fallback)
        observations.append(obs)
        if terminated or truncated:
            return info, reward, observations


def test_bot_wins_the_test_split_on_every_level():
    env = gym.make(ENV_ID, seed=0, split="test", perturbations=None)
    tasks = env.unwrapped.task_ids()[:50]
    wins, runs = collections.Counter(), collections.Counter()
    for task_id in tasks:
        info, reward, _ = play_expert(env, task_id)
        level = task_id.rsplit("-", 1)[0]
        runs[level] += 1
        wins[level] += info["won"]
        assert reward == float(info["won"]) and info["score"] == float(info["won"])
    env.close()
    assert len(runs) >= 5 and set(runs) == set(LEVELS)
    assert sum(wins.values()) >= 0.95 * len(tasks), dict(wins)


def test_splits_are_disjoint_and_cover_every_level():
    env = gym.make(ENV_ID, seed=0, perturbations=None).unwrapped
    splits = {s: env.task_ids(s) for s in ("train", "valid", "test")}
    assert sum(map(len, splits.values())) == len(env.task_ids("all")) == len(LEVELS) * 60
    assert not set(splits["train"]) & set(splits["test"]) and not set(splits["valid"]) & set(splits["test"])
    for ids in splits.values():
        assert {t.rsplit("-", 1)[0] for t in ids[:len(LEVELS)]} == set(LEVELS)  # level by level in turn
    with pytest.raises(UnknownChoiceError, match="did you mean 'GoToLocal'"):
        gym.make(ENV_ID, levels=["GoToLocl"])


SEEN = re.compile(r"You see (?:a|an|the) (?:(locked|closed|open) )?(\w+) (\w+) (.+)\.$")


def _offset(where: str) -> tuple[int, int]:
    ahead = re.search(r"(\d+) steps? ahead", where)
    side = re.search(r"(\d+) steps? to your (left|right)", where)
    right = 0 if side is None else int(side.group(1)) * (1 if side.group(2) == "right" else -1)
    return (int(ahead.group(1)) if ahead else 0), right


def test_the_text_says_what_the_grid_holds():
    """Every "You see ..." line, mapped back from (ahead, right) to a grid cell, names the object in that cell."""
    env = gym.make(ENV_ID, seed=0, split="train", perturbations=None)
    checked = 0
    for task_id in env.unwrapped.task_ids()[:14]:
        obs, info = env.reset(options={"task_id": task_id})
        for _ in range(6):
            game = env.unwrapped._game
            f, r = game.dir_vec, game.right_vec
            for line in obs.splitlines():
                m = SEEN.match(line)
                if not m or m.group(3) not in ("ball", "key", "box", "door"):
                    continue
                state, color, kind, where = m.groups()
                ahead, right = _offset(where)
                cell = game.grid.get(*(game.agent_pos + f * ahead + r * right))
                assert (cell.type, cell.color) == (kind, color), (line, obs)
                if kind == "door":
                    assert state == ("locked" if cell.is_locked else "open" if cell.is_open else "closed")
                checked += 1
            obs, *_, info = env.step(info["expert_action"] or "turn left")
    assert checked > 50


def test_bad_input_gets_feedback_and_budgets_truncate():
    env = gym.make(ENV_ID, seed=0, perturbations=None, levels=["GoToRedBallGrey"], seeds_per_level=10,
                   max_episode_steps=200)
    obs, info = env.reset(options={"task_id": "GoToRedBallGrey-0003"})
    assert obs.startswith(f"Mission: {info['goal']}\n") and info["admissible_actions"] == list(COMMANDS)
    before = env.unwrapped._game.agent_pos
    obs, _, terminated, _, info = env.step("fly to the moon \x00\udcff")
    assert obs.startswith("Unknown command") and not terminated and env.unwrapped._game.agent_pos == before
    assert env.step("  Turn   LEFT ")[0].startswith("You turn left and now face")
    for _ in range(8):  # into a wall sooner or later
        obs, *_ = env.step("go forward")
    assert "You can't move forward: a wall is in the way." in obs
    for bad in (None, 3, b"go forward"):
        with pytest.raises(InvalidActionError):
            env.step(bad)
    for _ in range(70):  # past the level's own budget (64 steps): a truncation, not a loss
        *_, terminated, truncated, info = env.step("turn left")
        if terminated or truncated:
            break
    assert truncated and not terminated and not info["won"] and not info["lost"]
    env.close()


def test_check_env_clean_no_warnings():
    env = gym.make(ENV_ID, seed=0, perturbations=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_env(env.unwrapped, skip_render_check=True)


SCRIPT = """
import json, gymnasium as gym, r2v_envs
env = gym.make("R2V/BabyAI-v0", seed=11, split="test", perturbations="composite")
out = []
for k, task_id in enumerate(env.unwrapped.task_ids()[:7]):
    obs, info = env.reset(options={"task_id": task_id, "episode_index": k})
    out.append([obs, info["goal"], info["admissible_actions"], info["perturbations"]])
    for t in range(15):
        obs, r, term, trunc, info = env.step(("turn left", "xyzzy", info["expert_action"] or "drop")[t % 3])
        out.append([obs, r, term, trunc, info["won"], info["expert_action"], info["perturbations"]])
        if term or trunc:
            break
print(json.dumps(out))
"""


def test_same_seed_same_bytes_in_two_processes():
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, check=True, capture_output=True,
                           text=True).stdout for _ in range(2)]
    assert runs[0] == runs[1] and len(runs[0]) > 1000
    assert {e["type"] for row in json.loads(runs[0]) for e in row[-1]} == {"flaky", "partial", "distractor",
                                                                          "injection"}


def test_vector_env_matches_single_envs():
    envs = gym.make_vec(ENV_ID, num_envs=2, vectorization_mode="async", split="test")
    try:
        obs, infos = envs.reset(seed=[5, 6])
        obs2, *_ = envs.step(tuple(infos["expert_action"]))
    finally:
        envs.close()
    for i, z in enumerate((5, 6)):
        env = gym.make(ENV_ID, split="test")
        o, info = env.reset(seed=z)
        assert (o, env.step(info["expert_action"])[0]) == (obs[i], obs2[i])
        env.close()


@pytest.mark.parametrize("agent", ["random", "expert"])
def test_r2v_eval_reports(agent, tmp_path):
    from r2v_eval.cli import main

    out = tmp_path / agent
    cap = ["--max-steps", "16"] if agent == "random" else []  # a random walk would run to the 64-step cap
    main(["--agent", agent, "--envs", ENV_ID, "--perturbations", "none", "composite", "--seeds", "0",
          "--tasks", "7", "--out", str(out), "--no-progress", "--bootstrap", "50", *cap])
    results = json.loads((out / "results.json").read_text())
    cells = {c["perturbation"]: c for c in results["cells"]}
    assert set(cells) == {"none", "composite"} and all(c["episodes"] == 7 and c["not_run"] == 0
                                                       for c in cells.values())
    assert (out / "report.md").is_file()
    if agent == "expert":
        assert all(c["sr"] == 100.0 for c in cells.values())
        from r2v_eval.view.page import write_page

        page = write_page(out).read_text()  # `r2v view`: one page with the episodes as the agent saw them
        assert "GoToLocal-0043@0" in page and "Mission: " in page
    else:
        assert cells["none"]["sr"] < 100.0


def test_doctor_reports_babyai_without_importing_minigrid():
    code = ("import sys, r2v_train.doctor as d; r = d.data_section()['babyai']; "
            "print(r['minigrid'], len(r['levels']), 'minigrid' in sys.modules, 'babyai' in d.format_report(d.gather()))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, capture_output=True, text=True)
    version, levels, imported, shown = out.stdout.split()
    assert version[0].isdigit() and int(levels) == len(LEVELS) and imported == "False" and shown == "True"
