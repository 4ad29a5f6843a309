"""``r2v eval`` with a python-callable agent on two benchmarks x two perturbations: the shards and the results are
identical across ``--workers 0/2`` and across a SIGKILL mid-run and a resume; ``show`` and ``compare`` read them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: evaluation grids across worker counts and a killed run

pytest.importorskip("textworld")

from r2v_agents.shards import load_rows  # noqa: E402
from r2v_eval.cli import main  # noqa: E402
from r2v_eval.robustness_report import show_episode  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ENV_KWARGS = json.dumps({"R2V/TextWorld-v0": {"suite": "small", "split": "all"}})
GRID = {"R2V/Scripted-v0": ("scripted-0", "scripted-1", "scripted-5"),
        "R2V/TextWorld-v0": ("tw-coin_collector-easy-000", "tw-cooking-easy-000")}


def walker(obs: str, info: dict) -> str:
    """A deterministic agent that reads what it sees: take what is there, else mostly go east, else a seeded
    admissible action (seeded by the observation, so the same text gets the same answer in any process)."""
    if os.environ.get("R2V_TEST_AGENT_SLEEP"):
        time.sleep(float(os.environ["R2V_TEST_AGENT_SLEEP"]))
    actions = info.get("admissible_actions") or ["look"]
    h = zlib.crc32(obs.encode())
    takes = [a for a in actions if a.startswith("take ")]
    if takes and h % 4:
        return takes[h % len(takes)]
    if "go east" in actions and h % 5:
        return "go east"
    return actions[h % len(actions)]


def _argv(out, env_id, workers, *extra):
    tasks = ["--task-ids", *GRID[env_id]]
    return ["--agent", "tests.eval.test_eval_grid:walker", "--out", str(out), "--envs", env_id, *tasks,
            "--perturbations", "flaky", "partial", "--seeds", "0", "1", "--max-steps", "10", "--env-kwargs",
            ENV_KWARGS, "--workers", str(workers), "--bootstrap", "200", "--no-progress", *extra]


def _run_both(out, workers):
    for env_id in GRID:  # task ids belong to one benchmark: one eval directory per env
        main(_argv(out / env_id.split("/")[1], env_id, workers))


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*.parquet"))}


def _cells(out: Path):
    return {d: json.loads((out / d / "results.json").read_text())["cells"] for d in ("Scripted-v0", "TextWorld-v0")}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    out = tmp_path_factory.mktemp("eval-w0")
    _run_both(out, 0)
    return out


def test_results_identical_across_worker_counts(reference, tmp_path):
    files = _files(reference)
    assert len([f for f in files if "episodes-" in f]) == 4  # 2 benchmarks x 2 perturbations
    _run_both(tmp_path, 2)
    assert _files(tmp_path) == files
    cells = _cells(reference)
    assert _cells(tmp_path) == cells
    srs = [c["sr"] for cs in cells.values() for c in cs]
    assert all(c["not_run"] == 0 and c["scored"] == c["episodes"] for cs in cells.values() for c in cs)
    assert len(set(srs)) > 1 and max(srs) > 0, srs  # the agent wins some episodes, and the cells differ
    tw = cells["TextWorld-v0"][0]
    assert tw["benchmark"] == "textworld" and set(tw["pass_k"]) == {"1", "2"} and tw["worst_seed"]["z"] in (0, 1)

    import datasets  # the trajectories load with the stock parquet builder

    cell = reference / "Scripted-v0" / cells["Scripted-v0"][0]["run_dir"]
    ds = datasets.load_dataset("parquet", data_files=str(cell / "steps-*.parquet"), split="train",
                               cache_dir=str(tmp_path / "hf"))
    assert ds.num_rows == sum(e["steps"] for e in load_rows(cell, "episodes")) > 0

    text = show_episode(reference / "Scripted-v0", "scripted-5@0", perturbation="flaky")
    assert "Goal: Find the key" in text and ">>> " in text
    assert "[PERTURBED: flaky/" in text  # the flaky wrapper's events are marked where they happened


def test_sigkill_then_resume_gives_the_same_results(reference, tmp_path):
    out = tmp_path / "TextWorld-v0"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "R2V_TEST_AGENT_SLEEP": "0.05"}
    proc = subprocess.Popen([sys.executable, "-m", "r2v_eval", *_argv(out, "R2V/TextWorld-v0", 1)], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(out.glob("runs/*/*/pending/*.json"))) < 2:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done_before = len(list(out.glob("runs/*/*/pending/*.json"))) + len(list(out.glob("runs/*/*/episodes-*")))
    assert 0 < done_before and not (out / "results.json").exists(), "kill the run mid-way"
    main(_argv(out, "R2V/TextWorld-v0", 0))
    ref = reference / "TextWorld-v0"
    assert _files(out) == _files(ref)
    assert json.loads((out / "results.json").read_text())["cells"] == json.loads(
        (ref / "results.json").read_text())["cells"]
    assert not list(out.glob("runs/*/*/pending/*.json"))


def test_compare_pairs_the_same_episodes(reference, capsys):
    main(["compare", str(reference / "Scripted-v0"), str(reference / "Scripted-v0"), "--bootstrap", "100"])
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| R2V_")]
    assert len(lines) == 2 and all("| 0.0 | [0.0, 0.0] |" in ln for ln in lines)
