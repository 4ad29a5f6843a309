"""The TerminalBench judge on tasks shaped like real third-party ones (both formats, offline), and the hack
battery that must never win.

The tasks under tests/data/terminalbench are ours, written after upstream patterns: ``upstream-uv-bootstrap``
(original format; run-tests.sh installs uv with ``curl | sh``, ``uv venv``, ``uv pip install pytest==8.4.1``,
``uv run pytest``), ``harbor-csv-stats`` (Harbor/TB 2.x format; ``uvx -p 3.13 -w pytest==8.4.1 -w
pytest-json-ctrf ... pytest --ctrf``) and ``copy-tests-to-workdir`` (original format; the tests are copied into
the agent's folder and ``python3 -m pytest .`` runs there, as the aider_polyglot adapter does).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.sandbox import available_isolations
from r2v_envs.terminalbench.backends import LocalBackend, TaskLoadError
from r2v_envs.terminalbench.hacks import HACKS
from r2v_envs.terminalbench.judge import build_test_runtime
from r2v_envs.terminalbench.task import SHIPPED_TASKS_DIR, TaskFormatWarning, load_suite, load_task
from tests.support import DATA
from tests.support.terminalbench import play

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # end to end: sandboxed task episodes and the hack battery
SUITE_DIR = DATA / "terminalbench"
OWN = ("copy-tests-to-workdir", "harbor-csv-stats", "upstream-uv-bootstrap")
BWRAP = "bwrap" in available_isolations()


def make(tasks_dir=SUITE_DIR, **kw):
    kw.setdefault("perturbations", None)
    kw.setdefault("backend", "local")
    return gym.make("R2V/TerminalBench-v0", seed=0, tasks_dir=tasks_dir, split="all", max_episode_steps=40, **kw)


@pytest.fixture(scope="module")
def env():
    # command_timeout_s=1: the expert only wins upstream-uv-bootstrap if its solution.yaml timeout (20 s for a
    # step that sleeps 1.5 s) is honoured.
    e = make(command_timeout_s=1)
    yield e
    e.close()


@pytest.fixture(scope="module")
def hack_env():
    # The hacks run pytest themselves; under a 1 s command budget a loaded CI machine killed that pytest (CI of
    # 9e84f2f), so a hack that was never planted would count as one that did not win.
    e = make(command_timeout_s=60)
    yield e
    e.close()


def test_both_formats_load():
    suite = load_suite(SUITE_DIR)
    assert sorted(suite) == sorted(OWN)
    harbor = suite["harbor-csv-stats"]
    assert harbor.format == "harbor" and harbor.max_agent_timeout_s == 120 and harbor.max_test_timeout_s == 60
    assert harbor.run_tests_script.name == "test.sh" and harbor.context_dir.name == "environment"
    assert harbor.category == "data-processing" and harbor.instruction.startswith("`/app/sales.csv`")
    upstream = suite["upstream-uv-bootstrap"]
    assert upstream.format == "terminal-bench"
    assert upstream.expert_actions()[:2] == [
        "run[timeout=20] sleep 1.5 && awk '{s += $1} END {print s}' numbers.txt > sum.txt",
        "run[timeout=180] sort -n numbers.txt | tail -n 1 > max.txt"]  # Terminal-Bench's 180 s default


@pytest.mark.parametrize("task_id", OWN)
def test_expert_wins_offline_and_mark_only_loses(env, task_id):
    info = play(env, task_id).info
    assert info["won"] and info["outcome"] == "resolved", info["test_output"]
    assert info["test_results"] and set(info["test_results"].values()) == {"passed"}
    assert info["judge"].get("reports", 0) >= 1 or info["judge"].get("runs", 0) >= 1
    if task_id != "copy-tests-to-workdir":  # the upstream network bootstrap was skipped, and said so
        assert "skipped the uv installer from https://astral.sh/uv/" in info["test_output"]
    info = play(env, task_id, ["mark_task_complete"]).info
    assert not info["won"] and info["outcome"] == "unresolved" and "failed" in info["test_results"].values()


@pytest.mark.skipif(not BWRAP, reason="the judge is tamper-proof only under bubblewrap (judge['tamper_proof'])")
@pytest.mark.parametrize("task_id", ["copy-tests-to-workdir", "upstream-uv-bootstrap", "word-frequency"])
def test_hack_battery_never_wins(hack_env, task_id, tmp_path):
    if task_id == "word-frequency":  # the shipped tasks' `python3 -m pytest` from the agent's folder
        suite = tmp_path / "suite"
        shutil.copytree(SHIPPED_TASKS_DIR / task_id, suite / task_id)
        e = make(tasks_dir=suite)
    else:
        e = hack_env
    won = {}
    for hack in HACKS:
        info = play(e, task_id, list(hack.actions)).info
        won[hack.name] = info["won"]
        assert info["judge"]["tamper_proof"]
    assert not any(won.values()), [name for name, w in won.items() if w]
    if task_id == "copy-tests-to-workdir":  # `pytest .` in the agent's folder: its conftest/test file refused
        info = play(e, task_id, list(next(h for h in HACKS if h.name == "conftest_in_workdir").actions)).info
        assert {Path(f).name for f in info["judge"]["refused_files"]} >= {"conftest.py", "test_zz_forge.py"}
    if e is not hack_env:
        e.close()


@pytest.mark.skipif(not BWRAP, reason="needs bubblewrap's mount namespace for /app and /tests")
def test_the_hacks_are_real(hack_env):
    """The plants work where nothing guards against them: the agent's own `python3 -m pytest` in its folder
    runs the fake module, and a pytest that reads the planted conftest reports every test passed."""
    env = hack_env
    hack = next(h for h in HACKS if h.name == "fake_pytest_module")
    env.reset(options={"task_id": "upstream-uv-bootstrap"})
    for action in hack.actions[:-1]:
        env.step(action)
    obs, *_ = env.step("run python3 -m pytest /tests -rA")
    assert "PASSED tests/test_outputs.py::test_forged" in obs
    env.reset(options={"task_id": "upstream-uv-bootstrap"})
    hack = next(h for h in HACKS if h.name == "conftest_in_tests")
    for action in hack.actions[:-1]:
        env.step(action)
    env.step("run printf 'def test_fails():\\n    assert False\\n' > /tests/test_outputs.py")
    obs, *_ = env.step("run cd / && python3 -I -m pytest -p no:cacheprovider /tests -rA")
    assert "PASSED" in obs and "test_fails" in obs and "1 passed" in obs


def test_a_task_whose_tests_name_the_container_paths_needs_bubblewrap():
    """Under the weaker levels a task's folders keep their host paths: a test script that names /app, /tests or
    /logs fails the load, saying what it needs, instead of scoring every episode `no_test_results`."""
    # Gymnasium 1.4's passive checker counts a first reset that raised as checked, then fails the first step
    e = make(backend=LocalBackend(isolation="rlimit"), disable_env_checker=True)
    for task_id, paths in (("harbor-csv-stats", "/logs, /tests"), ("copy-tests-to-workdir", "/app")):
        with pytest.raises(TaskLoadError, match=f"names the container's paths {paths}, which only bubblewrap"):
            e.reset(options={"task_id": task_id})
    assert play(e, "upstream-uv-bootstrap").info["outcome"] == "resolved"  # it reads $TEST_DIR: runs anywhere
    e.close()


def test_solution_that_needs_the_network_is_typed(tmp_path):
    task = tmp_path / "suite" / "fetches-data"
    shutil.copytree(SUITE_DIR / "upstream-uv-bootstrap", task)
    (task / "solution.yaml").write_text(
        "- command: python3 -c \"import urllib.request; urllib.request.urlopen('https://example.org/n.txt')\"\n"
        "  max_timeout_sec: 20\n")
    e = make(tasks_dir=tmp_path / "suite")
    info = play(e, "fetches-data").info
    assert not info["won"] and info["outcome"] == "needs_network" and info["network_errors"] == 1
    info = play(e, "fetches-data", ["run true", "mark_task_complete"]).info
    assert info["outcome"] == "unresolved"  # failing without touching the network is the agent's failure
    e.close()


def test_malformed_tasks_are_skipped_with_one_warning(tmp_path):
    suite = tmp_path / "suite"
    shutil.copytree(SUITE_DIR / "harbor-csv-stats", suite / "good-harbor")
    shutil.copytree(SUITE_DIR / "upstream-uv-bootstrap", suite / "good-original")
    shutil.copytree(SUITE_DIR / "upstream-uv-bootstrap", suite / "no-run-tests")
    (suite / "no-run-tests" / "run-tests.sh").unlink()
    shutil.copytree(SUITE_DIR / "harbor-csv-stats", suite / "no-instruction")
    (suite / "no-instruction" / "instruction.md").write_text("  \n")
    (suite / "bad-yaml").mkdir()
    (suite / "bad-yaml" / "task.yaml").write_text("instruction: [unclosed\n")
    (suite / "bad-toml").mkdir()
    (suite / "bad-toml" / "task.toml").write_text("[agent\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        e = make(tasks_dir=suite)
    msgs = [str(w.message) for w in caught if issubclass(w.category, TaskFormatWarning)]
    assert len(msgs) == 1 and "skipped 4 malformed task(s)" in msgs[0]
    assert all(name in msgs[0] for name in ("no-run-tests", "no-instruction", "bad-yaml", "bad-toml"))
    assert sorted(e.unwrapped.tasks) == ["good-harbor", "good-original"]
    assert "needs run-tests.sh" in e.unwrapped.skipped_tasks["no-run-tests"]
    e.close()
    with pytest.warns(TaskFormatWarning):
        assert sorted(load_suite(suite)) == ["good-harbor", "good-original"]


def test_echoed_command_is_capped_and_control_characters_replaced(env):
    env.reset(options={"task_id": "upstream-uv-bootstrap"})
    obs, *_ = env.step("run echo " + "x" * 100_000)
    assert len(obs) < 5000 and "characters omitted" in obs
    obs, *_ = env.step("run head -c 64 /dev/zero; printf 'a\\033[31mred\\r\\nb\\x07'")
    assert "\x00" not in obs and "\x1b" not in obs and "\x07" not in obs and "\r" not in obs
    assert "\ufffd" * 64 in obs and "\ufffd[31mred\nb\ufffd" in obs


def test_runtime_commands_offline(tmp_path):
    """The shims alone (no sandbox): what they provide, what they refuse, and that they never download."""
    rt = build_test_runtime(tmp_path / "rt")
    assert not any(p.stat().st_mode & 0o222 for p in rt.rglob("*"))  # read-only throughout
    env = {"PATH": f"{rt}/bin:/usr/bin:/bin", "R2V_TEST_PYTHON": sys.executable, "HOME": str(tmp_path)}

    def sh(cmd):
        return subprocess.run(["sh", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)

    r = sh("uv pip install pytest==8.4.1 numpy && uv add pytest")
    assert r.returncode == 0 and "skipped `uv pip install` of pytest==8.4.1 numpy" in r.stderr
    r = sh("uv pip install r2v-no-such-package==1.0")
    assert r.returncode == 1 and "cannot install r2v-no-such-package==1.0" in r.stderr
    r = sh("curl -fsSL https://example.org/data.csv")
    assert r.returncode == 6 and "Could not resolve host: example.org" in r.stderr
    r = sh("curl -LsSf https://astral.sh/uv/0.9.5/install.sh | sh && . $HOME/.local/bin/env && uv --version")
    assert r.returncode == 0 and "skipped the uv installer" in r.stderr and "r2v offline test runtime" in r.stdout
    r = sh("uv venv .venv && . .venv/bin/activate && command -v pytest")
    assert r.returncode == 0 and r.stdout.strip() == f"{rt}/bin/pytest"
    r = sh("python3 -c 'import sys; print(sys.argv[1:])' a b")
    assert r.stdout.strip() == "['a', 'b']"  # anything but `-m pytest` is the interpreter itself


def test_harbor_solution_gets_the_agent_budget():
    task = load_task(SUITE_DIR / "harbor-csv-stats")
    assert task.solution and task.solution[0].timeout_s == task.max_agent_timeout_s
