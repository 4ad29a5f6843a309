"""Terminal-Bench 2.x (Harbor) tasks as their Dockerfiles set them up, and pytest's verdict semantics.

The local backend interprets what TB 2.x Dockerfiles do offline: ``ARG``/``ENV`` with Docker's expansion,
``python3 -m venv`` outside the workdir, ``pip install`` mapped onto the host's packages, files written under
``/tmp``, ``/srv``, ``/home``; the build is cached, and a step it cannot run fails the load naming the step.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import gymnasium as gym
import pytest

import r2v_envs  # noqa: F401  (registers the envs)
from r2v_envs.sandbox import available_isolations
from r2v_envs.terminalbench.backends import TaskLoadError
from tests.support.terminalbench import harbor_task, play

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif("bwrap" not in available_isolations(), reason="a writable root needs bubblewrap")]
ROOT = Path(__file__).resolve().parents[2]
VENV_DOCKERFILE = """FROM python:3.12-slim
ARG VENV=/opt/v
ENV DEBIAN_FRONTEND=noninteractive PATH=${VENV}/bin:${PATH} GREETING="hello world"
RUN apt-get update && apt-get install -y --no-install-recommends curl && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv ${VENV}
RUN pip install --no-cache-dir --retries 3 pytest==8.4.1 pytest-json-ctrf==0.3.5
RUN echo pytest > /tmp/verifier-requirements.txt && mkdir -p /home/data && echo 7 > /home/data/seven
COPY data.txt /srv/data.txt
WORKDIR /app
RUN python3 << 'PY'
open("/app/seed.txt", "w").write("seed\\n")
PY
"""
VENV_TESTS = """import os, shutil
from pathlib import Path


def test_answer():
    assert Path("/app/answer.txt").read_text().strip() == "42"


def test_image_set_up():
    assert os.environ["GREETING"] == "hello world"
    assert os.environ["PATH"].split(":").index("/opt/v/bin") >= 0
    assert Path("/srv/data.txt").read_text() == "data\\n" and Path("/home/data/seven").read_text() == "7\\n"
    assert Path("/app/seed.txt").read_text() == "seed\\n" and Path("/opt/v/bin/python").exists()
"""
VENV_TEST_SH = ("#!/bin/bash\nsource /opt/v/bin/activate\npip install -r /tmp/verifier-requirements.txt\n"
                "python -m pytest --ctrf /logs/verifier/ctrf.json /tests/test_outputs.py -rA\n"
                "if [ $? -eq 0 ]; then echo 1 > /logs/verifier/reward.txt; else echo 0 > /logs/verifier/reward.txt; fi\n")
# As nearly every TB 2.x image does (Harbor's agents drive tmux), some checking that the tools are there.
TOOLS_DOCKERFILE = """FROM python:3.13-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends tmux curl asciinema{extra} \\
    && rm -rf /var/lib/apt/lists/* && command -v tmux && command -v asciinema
WORKDIR /app
"""
SEMANTICS = {
    "skipped-test": "import sys, pytest\n\ndef test_ok():\n    assert open('/app/answer.txt').read().strip() == '42'\n\n"
                    "@pytest.mark.skipif(sys.platform == 'linux', reason='not here')\ndef test_other():\n    assert 0\n",
    "xfail-test": "import pytest\n\ndef test_ok():\n    assert open('/app/answer.txt').read().strip() == '42'\n\n"
                  "@pytest.mark.xfail(reason='known')\ndef test_known():\n    assert 0\n\n"
                  "@pytest.mark.xfail(reason='flaky', strict=False)\ndef test_passes_anyway():\n    assert 1\n",
    "strict-xpass": "import pytest\n\ndef test_ok():\n    assert open('/app/answer.txt').read().strip() == '42'\n\n"
                    "@pytest.mark.xfail(reason='expected to fail', strict=True)\ndef test_strict():\n    assert 1\n",
    "all-skipped": "import pytest\n\n@pytest.mark.skip(reason='nothing runs')\ndef test_a():\n    assert 0\n",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    root = tmp_path_factory.mktemp("suite")
    harbor_task(root, "venv-task", dockerfile=VENV_DOCKERFILE, env_files={"data.txt": "data\n"}, tests=VENV_TESTS,
                test_sh=VENV_TEST_SH)
    for name, tests in SEMANTICS.items():
        harbor_task(root, name, tests=tests)
    harbor_task(root, "missing-package", dockerfile="FROM python:3.12-slim\nWORKDIR /app\nRUN mkdir -p /app/data\n"
                "RUN pip install --no-cache-dir r2v-no-such-package==1.0\n")
    harbor_task(root, "system-write", dockerfile="FROM python:3.12-slim\nWORKDIR /app\nCOPY tool /etc/tool.conf\n",
                env_files={"tool": "#!/bin/sh\necho tool\n"})
    harbor_task(root, "image-tools", dockerfile=TOOLS_DOCKERFILE.format(extra=""))
    harbor_task(root, "lacks-tools", dockerfile=TOOLS_DOCKERFILE.format(extra=" r2v-no-such-tool")
                + "RUN apt-get install -y r2v-no-such-lib && ls /usr/lib/r2v-no-such-lib\n")
    return root


@pytest.fixture(scope="module")
def env(suite, tmp_path_factory):
    e = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend="local", tasks_dir=suite, split="all",
                 max_episode_steps=20)
    e.unwrapped.backend.builds.root = tmp_path_factory.mktemp("builds")  # a cold cache for this module
    yield e
    e.close()


def test_venv_env_expansion_and_writable_root_load_and_resolve(env):
    start = time.monotonic()
    env.reset(options={"task_id": "venv-task"})
    first = time.monotonic() - start
    obs, *_ = env.step("run echo $PATH; command -v python pip; cat /tmp/verifier-requirements.txt; echo $GREETING")
    assert "/opt/v/bin:" in obs and "/opt/v/bin/python" in obs and "/opt/v/bin/pip" in obs, obs
    assert "\npytest\n" in obs and "hello world" in obs
    obs, *_ = env.step("run echo kept > /tmp/mine && python -c 'import pytest; print(pytest.__name__)'")
    assert "pytest" in obs
    obs, *_ = env.step("run cat /tmp/mine")  # /tmp persists across commands, as in a container
    assert "kept" in obs
    info = play(env, "venv-task").info
    assert info["outcome"] == "resolved", info["test_output"][-3000:]
    assert set(info["test_results"].values()) == {"passed"}
    start = time.monotonic()
    env.reset(options={"task_id": "venv-task"})  # the build is cached: a copy, not the Dockerfile again
    again = time.monotonic() - start
    assert again < 1.0 and again < first, (first, again)
    assert play(env, "venv-task", ["mark_task_complete"]).info["outcome"] == "unresolved"


@pytest.mark.parametrize("task_id, resolved", [("skipped-test", True), ("xfail-test", True),
                                               ("strict-xpass", False), ("all-skipped", False)])
def test_pytest_verdict_semantics(env, task_id, resolved):
    info = play(env, task_id).info
    assert info["won"] is resolved, (info["test_results"], info["test_output"][-2000:])
    statuses = set(info["test_results"].values())
    expected = {"skipped-test": {"passed", "skipped"}, "xfail-test": {"passed", "xfailed", "xpassed"},
                "strict-xpass": {"passed", "failed"}, "all-skipped": {"skipped"}}[task_id]
    assert statuses == expected


def test_a_step_that_cannot_run_names_itself(env):
    with pytest.raises(TaskLoadError) as err:
        env.reset(options={"task_id": "missing-package"})
    assert err.value.step == 4 and err.value.needs_network and "r2v-no-such-package" in err.value.why
    assert "Dockerfile step 4 `RUN pip install" in str(err.value)  # numbered as in the file, FROM is step 1
    with pytest.raises(TaskLoadError) as err:
        env.reset(options={"task_id": "system-write"})
    assert err.value.step == 3 and not err.value.needs_network and "/etc/tool.conf" in err.value.why


def test_an_image_that_installs_the_usual_tools_loads_and_a_missing_one_is_named(env):
    """scripts/install.sh installs the tools Terminal-Bench images routinely carry; a load that fails names every
    package the image's apt-get steps install that the host lacks, all at once (not one per attempt)."""
    for tool in ("tmux", "asciinema"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} is not installed here (scripts/install.sh installs it as root)")
    env.reset(options={"task_id": "image-tools"})
    assert "tmux" in env.step("run command -v tmux")[0]
    with pytest.raises(TaskLoadError) as err:
        env.reset(options={"task_id": "lacks-tools"})
    assert err.value.step == 4 and err.value.host_lacks == ["r2v-no-such-tool", "r2v-no-such-lib"]  # step 2 too
    assert "lacks 2 package(s) the image's apt-get steps install: r2v-no-such-tool r2v-no-such-lib" in str(err.value)


def test_judge_script_lists_load_failures_apart(suite, tmp_path):
    out = tmp_path / "rows.json"
    r = subprocess.run([sys.executable, "benchmarks/terminalbench_judge.py", str(suite), "--tasks", "skipped-test",
                        "missing-package", "--hacks", "print_summary", "--json", str(out)], cwd=ROOT,
                       capture_output=True, text=True, timeout=240, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                                                                         "HOME": str(tmp_path)})
    assert r.returncode == 0, r.stderr[-3000:]
    table, _, failures = r.stdout.partition("Load failures")
    assert "| skipped-test | harbor | resolved | unresolved | 0 |" in table and "missing-package" not in table
    assert "| missing-package | 4: `RUN pip install" in failures
    rows = json.loads(out.read_text())
    assert [f["task"] for f in rows["load_failures"]] == ["missing-package"] and rows["load_failures"][0]["needs_network"]
