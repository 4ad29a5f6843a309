"""Documented commands run at a miniature size, each once per test process: the README test
(tests/docs/test_readme_commands.py) runs every documented command through these, and the chain's end-to-end tests
(tests/train/chain/test_chain_e2e.py) read the main job's miniature run from here instead of running it again."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from r2v_eval.results import main_table

ROOT = Path(__file__).resolve().parents[2]
R2V = [shutil.which("r2v") or "r2v"]  # the installed console script: `sys.exit(console())`, as a user runs it


@dataclass(frozen=True)
class Mini:
    """How a documented shell command runs here: ``argv(tmp)`` at a miniature size, then ``check(tmp, stdout)``."""

    argv: Callable[[Path], list[str]]
    slow: bool = False
    timeout_s: int = 120
    check: Callable[[Path, str], None] = lambda tmp, out: None
    needs: Mini | None = None
    """a miniature whose outputs this one reads (run first, in the same temporary directory)"""
    chain: str | None = None
    """a run directory (under the temporary directory) to start from a copy of the session's tiny chain, so that
    the documented command resumes its finished stages instead of training them again"""
    games: tuple[str, str] | None = None
    """(suite, split) of TextWorld games generated in the background from the session's start (tests/conftest.py):
    the command then finds them in the cache, as it does on a user's second run"""


def _pipeline_report(run: str) -> Callable[[Path, str], None]:
    def check(tmp: Path, out: str) -> None:
        results = json.loads((tmp / run / "eval" / "results.json").read_text())
        assert {"slm", "r2v", "llm"} <= set(main_table(results))
        assert (tmp / run / "report.md").is_file()
    return check


# the main job: scripts/main.sh as written (it execs the installed `r2v pipeline`), the miniature's flags after it
MINIATURE_PIPELINE = Mini(lambda tmp: ["bash", "scripts/main.sh", "--config", "r2v_train/configs/miniature.yaml",
                                       "--run-dir", str(tmp / "mini"), "--progress", "False"],
                          slow=True, timeout_s=1200, check=_pipeline_report("mini"), chain="mini")

_DONE: dict[int, tuple[Path, str]] = {}


def run_once(mini: Mini, tmp_path: Path, chain_template: Path | None = None) -> tuple[Path, str]:
    """``(temporary directory, stdout)`` of a miniature, run once per test process; a miniature that starts from the
    session's tiny chain (``mini.chain``) gets a copy of ``chain_template`` first."""
    if mini.chain is not None and id(mini) not in _DONE:
        shutil.copytree(chain_template, tmp_path / mini.chain, symlinks=True)
    return _ran(mini, tmp_path)


def _ran(mini: Mini, tmp_path: Path) -> tuple[Path, str]:
    """``(temporary directory, stdout)`` of a miniature, run once per process (two documented commands share the
    pipeline's; the viewer reads the evaluation's)."""
    if id(mini) not in _DONE:
        if mini.needs is not None:
            tmp_path = _ran(mini.needs, tmp_path)[0]
        _DONE[id(mini)] = (tmp_path, run_command(mini.argv(tmp_path), mini.timeout_s))
    return _DONE[id(mini)]


def command_env() -> dict[str, str]:
    """The environment of a documented command: the install skipped (done), the checkout importable."""
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "R2V_SKIP_INSTALL": "1", "PYTHONPATH": path}


def run_command(argv: list[str], timeout_s: int) -> str:
    """stdout of ``argv`` run from the repository root; a non-zero exit status fails with both streams' tails."""
    proc = subprocess.run(argv, cwd=ROOT, env=command_env(), capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    assert proc.returncode == 0, f"{shlex.join(argv)} -> {proc.returncode}\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc.stdout
