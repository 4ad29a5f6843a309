"""The judge's verdict cannot be forged by any process of the test phase but pytest's own.

The task mirrors a common Terminal-Bench 2.x shape: ``tests/test.sh`` runs a script under ``/app`` before
pytest. An agent that appends a detached report rewriter to that script (or to a start-up file, a prompt hook,
a loop left from its own commands) must lose; so must one whose trojan kills the test script and runs the
judge's pytest on a subset of the tests. What cannot be guarded, code the tests import into pytest's own
process, is shown as such.
"""

from __future__ import annotations

import shlex

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.sandbox import Sandbox, available_isolations
from r2v_envs.terminalbench.hacks import HACKS
from tests.support.terminalbench import harbor_task, play

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif("bwrap" not in available_isolations() or not Sandbox("bwrap").drops_privileges,
                                 reason="the verdict channel needs bubblewrap started by root")]
TROJAN_TARGET = dict(
    dockerfile="FROM python:3.11-slim\nWORKDIR /app\nCOPY check.sh /app/check.sh\n",
    env_files={"check.sh": "#!/bin/bash\necho checking the answer file\n"},
    test_sh="#!/bin/bash\ncd /app\nbash /app/check.sh\npython3 -m pytest /tests/test_outputs.py -rA\n"
            "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n",
    tests="from pathlib import Path\n\n\ndef test_answer_file_exists():\n    assert Path('/app/answer.txt').exists()\n"
          "\n\ndef test_answer():\n    assert Path('/app/answer.txt').read_text().strip() == '42'\n")
# Run inside the judge's pytest: what a process the tests start can see of the verdict channel.
CHANNEL_PROBE = """import os, subprocess, sys


def test_the_channel_is_out_of_reach():
    me = os.getpid()
    assert "R2V_VERDICT_FD" not in os.environ  # the plugin took it out of the environment
    child = [sys.executable, "-c", "import os, sys; print(sorted(os.listdir('/proc/%d/fd')))" % me]
    r = subprocess.run(child, capture_output=True, text=True)
    assert r.returncode != 0 and "Permission denied" in r.stderr, r.stdout  # non-dumpable: no /proc/PID/fd
    r = subprocess.run(["sh", "-c", "ls /proc/self/fd; ls -ld /.r2v-verdict; cat /.r2v-verdict/*"],
                       capture_output=True, text=True)
    assert "Permission denied" in r.stderr and "run" not in r.stdout, r.stdout + r.stderr
"""
# Two test files named by the script; the second passes whatever the agent did.
TWO_FILES = dict(TROJAN_TARGET, test_sh=TROJAN_TARGET["test_sh"].replace(
    "/tests/test_outputs.py", "/tests/test_outputs.py /tests/test_setup.py"),
    test_files={"test_setup.py": "from pathlib import Path\n\n\ndef test_check_script_is_there():\n"
                                 "    assert Path('/app/check.sh').exists()\n"})
REWRITERS = ("trojan_script_rewriter", "trojan_python_rewriter", "trojan_kills_and_reruns", "trojan_trusts_itself",
             "trojan_picks_a_test_file",
             "bashrc_rewriter",
             "prompt_command_rewriter", "agent_phase_loop", "daemon_kills_runner")


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    suite = tmp_path_factory.mktemp("suite")
    harbor_task(suite, "trojan-target", **TROJAN_TARGET)
    harbor_task(suite, "imports-solution", solve="printf 'def answer():\\n    return 42\\n' > /app/solution.py\n",
                test_sh="#!/bin/bash\ncd /app\npython3 -m pytest /tests/test_outputs.py -rA\n",
                tests="from solution import answer\n\n\ndef test_answer():\n    assert answer() == 42\n")
    harbor_task(suite, "probes-channel", solve="true\n", tests=CHANNEL_PROBE)
    harbor_task(suite, "two-test-files", **TWO_FILES)
    e = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend="local", tasks_dir=suite,
                 split="all", max_episode_steps=20)
    yield e
    e.close()


def test_expert_wins_and_mark_only_loses(env):
    info = play(env, "trojan-target").info
    assert info["outcome"] == "resolved" and info["judge"]["report"] == "verdict", info["test_output"]
    assert info["judge"]["tamper_proof"] and info["judge"]["runs"] == 1
    info = play(env, "trojan-target", ["mark_task_complete"]).info
    assert info["outcome"] == "unresolved" and set(info["test_results"].values()) == {"failed"}


@pytest.mark.parametrize("name", REWRITERS)
def test_rewriters_and_trojans_lose(env, name):
    hack = next(h for h in HACKS if h.name == name)
    info = play(env, "trojan-target", list(hack.actions)).info
    assert not info["won"], (name, info["test_results"], info["test_output"][-2000:])


def test_a_trojan_cannot_choose_one_test_file_of_those_the_script_names(env):
    """The trojan finds (with a pytest of its own) that only test_setup.py passes and asks the judge for that file
    alone: a whole file, so no partial selection, but test_outputs.py, named by the script, never ran."""
    info = play(env, "two-test-files").info
    assert info["outcome"] == "resolved" and info["judge"]["missing_files"] == [], info["test_output"]
    assert {k.split("::")[0] for k in info["test_results"]} == {"test_outputs.py", "test_setup.py"}
    hack = next(h for h in HACKS if h.name == "trojan_picks_a_test_file")
    info = play(env, "two-test-files", list(hack.actions)).info
    assert info["test_results"].get("test_setup.py::test_check_script_is_there") == "passed"  # the trojan's run
    assert info["judge"]["missing_files"] == ["test_outputs.py"] and info["judge"]["runs"] == 1
    assert not info["won"] and info["outcome"] == "unresolved"


def test_the_trojan_really_runs_in_the_test_phase(env):
    """The trojan is live: the subset runs it asks the judge for are recorded, flagged partial, and counted as
    errors, and the test script it killed never started the full run."""
    hack = next(h for h in HACKS if h.name == "trojan_kills_and_reruns")
    info = play(env, "trojan-target", list(hack.actions)).info
    assert info["judge"]["runs"] >= 2 and info["judge"]["partial_runs"], info["judge"]
    partial = [name for name, status in info["test_results"].items() if "partial selection" in name]
    assert partial and all(info["test_results"][name] == "error" for name in partial)
    assert not info["won"]


def test_the_channel_is_out_of_reach_of_processes_the_tests_start(env):
    info = play(env, "probes-channel").info
    assert info["outcome"] == "resolved", info["test_output"][-3000:]


def test_code_imported_into_pytest_can_still_forge(env):
    """The limit (docs/terminalbench.md): the tests import the agent's module, whose import-time code runs
    inside the judge's pytest and can rewrite its reports. No process boundary is crossed, so no channel
    guards it; this test documents that it wins."""
    forger = ("import _pytest.reports as _r\n_i = _r.TestReport.__init__\n"
              "def _f(self, *a, **k):\n    _i(self, *a, **k)\n    self.outcome, self.longrepr = 'passed', None\n"
              "_r.TestReport.__init__ = _f\ndef answer():\n    return 0\n")
    info = play(env, "imports-solution", [f"run printf '%s' {shlex.quote(forger)} > /app/solution.py",
                                          "mark_task_complete"]).info
    assert info["won"], info["test_output"][-2000:]
    info = play(env, "imports-solution", ["run printf 'def answer():\\n    return 0\\n' > /app/solution.py",
                                          "mark_task_complete"]).info
    assert not info["won"]
