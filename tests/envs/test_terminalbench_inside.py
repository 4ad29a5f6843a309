"""The programs the judge runs inside the sandbox, each on its own, outside any sandbox: the shim (offline ``pytest``,
``pip``, ``apt-get``), the judge's pytest plugin (only the task's own tests and conftests run) and the judge's daemon
(pytest runs requested over its socket, the verdict file, a bad request survived)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from r2v_envs.terminalbench.judge.inside import shim
from r2v_envs.terminalbench.judge.runtime import build_test_runtime
from r2v_envs.terminalbench.judge.verdict import read_junit, read_verdict

PASSING = "def test_ok():\n    assert 1 + 1 == 2\n"
FAILING = "def test_ok():\n    assert 1 + 1 == 2\n\n\ndef test_bad():\n    assert 0\n"
FORGER = ("import _pytest.reports as r\n_i = r.TestReport.__init__\n"
          "def _f(self, *a, **k):\n    _i(self, *a, **k)\n    self.outcome = 'passed'\n"
          "r.TestReport.__init__ = _f\n")


_ROOT = tempfile.mkdtemp(prefix="r2v-inside-tests-")


@pytest.fixture(scope="module", autouse=True)
def _remove_folders():
    yield
    shutil.rmtree(_ROOT, ignore_errors=True)


@pytest.fixture(scope="module")
def runtime():
    return build_test_runtime()


def folder(files: dict[str, str]) -> Path:
    """A fresh folder holding ``files`` (removed with the module's folder)."""
    root = Path(tempfile.mkdtemp(prefix="r2v-inside-", dir=_ROOT))
    root.chmod(0o755)
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


# ------------------------------------------------------------------------------------------------ the shim
def test_the_judge_owns_pytest_s_configuration():
    args, dropped = shim.judge_pytest_args(["-p", "evil", "-c", "x.ini", "--rootdir=/app", "-o", "addopts=-k x",
                                            "-rA", "-x"], "/tests", "/rt/pytest.ini")
    assert dropped == ["-p", "evil", "-c", "x.ini", "--rootdir=/app", "-o", "addopts=-k x"]
    assert args[:3] == ["-rA", "-x", "/tests"]  # no path given: the trusted tests, never the working directory
    assert args[-6:] == ["-c", "/rt/pytest.ini", "--rootdir", "/tests", "--confcutdir", "/tests"]
    assert "r2v_judge_plugin" in args and "no:cacheprovider" in args


def test_installs_map_onto_the_host_and_apt_is_skipped_and_said_so(capsys):
    assert shim.pip(["install", "--no-cache-dir", "pytest==8.4.1"]) == 0
    assert shim.pip(["install", "r2v-no-such-package"]) == 1
    assert shim.apt(["install", "-y", "--no-install-recommends", "tmux", "asciinema"]) == 0
    err = capsys.readouterr().err
    assert "cannot install r2v-no-such-package" in err
    assert "skipped `apt-get install tmux asciinema`" in err


def test_the_runtime_s_commands_run_the_judge_s_pytest(runtime, tmp_path):
    tests, out = folder({"test_outputs.py": FAILING}), folder({})
    out.chmod(0o1777)
    env = {"PATH": f"{runtime}/bin:/usr/bin:/bin", "TEST_DIR": str(tests), "R2V_JUDGE_OUT": str(out),
           "R2V_TEST_PYTHON": sys.executable}
    r = subprocess.run(["bash", "-c", "uv pip install pytest==8.4.1 && uvx -w pytest pytest $TEST_DIR -rA"],
                       env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 1 and "1 failed, 1 passed" in r.stdout, r.stderr[-2000:]
    assert read_junit(out) == {"test_outputs::test_ok": "passed", "test_outputs::test_bad": "failed"}


# ---------------------------------------------------------------------------------------------- the plugin
def test_the_plugin_refuses_conftests_and_tests_that_are_not_the_task_s(runtime):
    tests = folder({"test_outputs.py": FAILING})
    work = folder({"conftest.py": FORGER, "test_planted.py": FORGER + PASSING, "test_outputs.py": FAILING})
    out = folder({})
    env = {"PATH": f"{runtime}/bin:/usr/bin:/bin", "TEST_DIR": str(tests), "R2V_JUDGE_OUT": str(out),
           "R2V_TEST_PYTHON": sys.executable}
    r = subprocess.run(["python3", "-m", "pytest", ".", "-rA"], env=env, cwd=work, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1, r.stdout[-2000:]  # the copy of the task's tests ran, and failed, as it should
    assert read_junit(out) == {"test_outputs::test_ok": "passed", "test_outputs::test_bad": "failed"}
    refused = json.loads(next(out.glob("judge-*.json")).read_text())["refused"]
    assert sorted({Path(p).name for p in refused}) == ["conftest.py", "test_planted.py"]


# ---------------------------------------------------------------------------------------------- the daemon
@pytest.mark.skipif(os.geteuid() != 0, reason="the daemon sets its runs' uid: it starts as root")
def test_the_daemon_runs_requested_pytest_runs_into_its_verdict_file(runtime):
    """Outside the sandbox the runs keep this process's uid (the interpreter may live where another uid cannot
    reach, e.g. under /root); the uid drop itself is the end-to-end tests' business."""
    tests = folder({"test_outputs.py": FAILING})
    verdict_dir, sock = Path(tempfile.mkdtemp(dir=_ROOT)), Path(tempfile.mkdtemp(dir=_ROOT)) / "judge.sock"
    sock.parent.chmod(0o755)
    script = ("python3 -c \"import socket, sys; s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); "
              "s.sendall(b'garbage'); s.close()\" $R2V_JUDGE_SOCKET; "  # a malformed request: recorded, survived
              f"pytest {tests}/test_outputs.py -rA; echo pytest-said-$?")
    env = {"PATH": f"{runtime}/bin:/usr/bin:/bin", "R2V_JUDGE_SOCKET": str(sock), "TEST_DIR": str(tests),
           "R2V_TEST_PYTHON": sys.executable, "HOME": "/tmp"}
    r = subprocess.run([sys.executable, "-I", f"{runtime}/lib/r2v_judged.py", "0", str(verdict_dir / "v.jsonl"),
                        str(sock), f"{runtime}/site", str(tests), f"{runtime}/pytest.ini", "--", "bash", "-c", script],
                       env=env, cwd="/", capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "pytest-said-1" in r.stdout, (r.stdout[-2000:], r.stderr[-2000:])
    results, runs = read_verdict(verdict_dir / "v.jsonl", expected_files=["test_outputs.py"])
    assert results == {"test_outputs.py::test_ok": "passed", "test_outputs.py::test_bad": "failed"}
    assert runs["runs"] == 1 and runs["missing_files"] == [] and runs["unfinished_runs"] == []
    events = [json.loads(line).get("event") for line in (verdict_dir / "v.jsonl").read_text().splitlines()]
    assert events[0] == "bad_request" and events[-1] == "script_exit"
