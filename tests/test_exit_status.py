"""Exit statuses of the installed command lines, run as a user's shell runs them (subprocesses): 0 on success, 2 on a
usage error, 1 on a failure with one typed line on stderr and no traceback.

Console scripts are ``sys.exit(main())``: ``r2v pipeline`` returned its summary dict, so the process printed the dict
and exited 1 after a run that succeeded. Tests that call ``main()`` in process cannot see that; these can. The main
job itself (``bash scripts/main.sh`` at a miniature size) is checked for 0 by tests/docs/test_readme_commands.py.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.serving import ROOT, run_documented_serve

R2V = shutil.which("r2v")
pytestmark = pytest.mark.skipif(R2V is None, reason="the r2v console script is not installed (pip install -e .)")
EVAL = ["--agent", "random", "--envs", "R2V/Scripted-v0", "--tasks", "1", "--seeds", "0", "--perturbations", "none",
        "--no-progress"]
COMMANDS = {"r2v": [R2V], "r2v eval": [R2V, "eval"], "python -m r2v_eval": [sys.executable, "-m", "r2v_eval"],
            "python -m r2v_envs.serving": [sys.executable, "-m", "r2v_envs.serving"]}


def _run(argv: list[str], tmp: Path) -> subprocess.CompletedProcess:
    return subprocess.run(argv, cwd=tmp, capture_output=True, text=True, timeout=300, check=False)


def _failed_in_one_line(proc: subprocess.CompletedProcess, kind: str) -> None:
    assert proc.returncode == 1, (proc.returncode, proc.stderr[-2000:])
    assert "Traceback" not in proc.stderr and f"error: [{kind}]" in proc.stderr, proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "{" not in proc.stdout  # no summary dict printed by the interpreter


@pytest.mark.parametrize("name", ["r2v eval", "python -m r2v_eval"])
def test_eval_exits_0_on_success_2_on_usage_1_on_failure(name, tmp_path):
    cmd = COMMANDS[name]
    ok = _run([*cmd, *EVAL, "--out", str(tmp_path / "ok")], tmp_path)
    assert ok.returncode == 0, ok.stderr[-2000:]
    assert ok.stdout.strip().endswith("report.md") and (tmp_path / "ok" / "results.json").is_file()
    usage = _run([*cmd, *EVAL, "--no-such-flag"], tmp_path)
    assert usage.returncode == 2 and "Traceback" not in usage.stderr, usage.stderr[-2000:]
    _failed_in_one_line(_run([*cmd, "--agent", "nosuch.module:agent", "--envs", "R2V/Scripted-v0", "--out",
                              str(tmp_path / "bad")], tmp_path), "AgentSpecError")


def test_r2v_exits_0_on_success_2_on_usage_1_on_failure(tmp_path):
    ok = _run([R2V, "doctor"], tmp_path)
    assert ok.returncode == 0 and ok.stdout.strip(), ok.stderr[-2000:]
    assert _run([R2V, "--help"], tmp_path).returncode == 0
    for usage in ([R2V], [R2V, "no-such-command"], [R2V, "pipeline", "--no-such-flag"]):
        proc = _run(usage, tmp_path)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, (usage, proc.stderr[-2000:])
    _failed_in_one_line(_run([R2V, "pipeline", "--config", str(tmp_path / "missing.yaml"), "--run-dir",
                              str(tmp_path / "run")], tmp_path), "FileNotFoundError")
    _failed_in_one_line(_run([R2V, "eval", *EVAL, "--envs", "R2V/NoSuchEnv-v0", "--out", str(tmp_path / "e")],
                             tmp_path), "NameNotFound")


@pytest.mark.slow  # two server processes import OpenEnv's stack (~7 s each)
def test_serving_module_exits_0_after_ctrl_c_2_on_usage_1_on_failure(tmp_path):
    pytest.importorskip("openenv", reason="needs the serve extra")
    cmd = COMMANDS["python -m r2v_envs.serving"]
    seen = run_documented_serve([*cmd, "--env", "R2V/Scripted-v0", "--port", "8000"])
    assert seen["returncode"] == 0 and seen["steps"] > 0 and not seen["traceback"], seen
    assert _run([*cmd, "--no-such-flag"], ROOT).returncode == 2
    _failed_in_one_line(_run([*cmd, "--env", "R2V/NoSuchEnv-v0", "--port", "0"], ROOT), "BadRequestError")
