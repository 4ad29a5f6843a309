"""The miniature R2V pipeline on HumanEval+ and TerminalBench (the TextWorld one is tests/train/chain/test_chain_e2e.py).

Each runs `r2v pipeline` with the tiny chain preset (the tiny model trained from scratch, the env's oracle as
teacher) on a few tasks and steps of the benchmark: every stage runs, every artifact is written, the report's
Table 1 agrees with the evaluation's shards (the same check as the TextWorld miniature), a rerun skips every
stage, and a pipeline killed mid-stage resumes: the stages it finished are skipped, the interrupted one reruns.
HumanEval+ needs HUMANEVAL_OVERRIDE_PATH (scripts/test.sh sets it).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: the miniature pipeline on HumanEval+ and TerminalBench

from r2v_eval.results import main_table
from tests.support import DATA

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from r2v_agents.shards import load_rows  # noqa: E402
from r2v_envs.sandbox import available_isolations  # noqa: E402
from r2v_envs.terminalbench.task import SHIPPED_TASKS_DIR  # noqa: E402
from r2v_train.chain.stages import MARKER, STAGES, read_marker, run_chain, stage_paths  # noqa: E402
from r2v_train.config import CONFIG_DIR, load_config
from r2v_train.evaluation.methods import METHODS  # noqa: E402
from r2v_train.pipeline import run_pipeline  # noqa: E402
from tests.support.eval_runs import assert_report_matches_shards  # noqa: E402

HUMANEVAL = pytest.param(("R2V/HumanEval-v0", {}), marks=pytest.mark.skipif(
    not os.environ.get("HUMANEVAL_OVERRIDE_PATH"), reason="HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)"),
    id="humaneval")
TERMINALBENCH = pytest.param(("R2V/TerminalBench-v0", {}), id="terminalbench")


def miniature(env_id: str, env_kwargs: dict) -> dict:
    """The miniature pipeline config (r2v_train/configs/miniature.yaml's sizes) on another benchmark."""
    return {"preset": "tiny", "progress": False,
            "chain": {"env": {"env_id": env_id, "env_kwargs": env_kwargs, "max_steps": 4, "workers": 0},
                      "split": {"max_train_tasks": 2, "max_valid_tasks": 2},
                      "replay": {"seeds": [1]},
                      "bc": {"max_steps": 4, "batch_size": 2, "save_steps": 2},
                      "preferences": {"k": 2, "max_contexts": 8, "max_new_tokens": 8, "chunk_size": 4},
                      "dpo": {"max_steps": 1, "batch_size": 2, "save_steps": 1},
                      "router_data": {"train_seeds": [101], "valid_seeds": [201, 202], "k": 2, "max_new_tokens": 8,
                                      "max_steps": 3}},
            "evaluate": {"max_tasks": 2, "seeds": [0], "per_type": [], "heuristic_sweep": [], "max_steps": 3,
                         "bootstrap": 200}}


@pytest.fixture(scope="module", params=[HUMANEVAL, TERMINALBENCH])
def pipeline_run(request, tmp_path_factory):
    torch.set_num_threads(1)
    env_id, env_kwargs = request.param
    cfg = load_config(miniature(env_id, env_kwargs))
    run_dir = tmp_path_factory.mktemp(env_id.split("/")[1])
    return env_id, cfg, run_dir, run_pipeline(cfg, run_dir)


def test_every_stage_and_artifact_and_the_report_matches_the_shards(pipeline_run):
    import pyarrow.parquet as pq

    env_id, _, run_dir, summary = pipeline_run
    paths = stage_paths(run_dir)
    for stage in STAGES:
        assert read_marker(run_dir, stage)["key"], stage
    assert json.load(open(os.path.join(run_dir, "teacher", MARKER)))["outputs"]["success_rate"] == 1.0
    assert {e["task_id"] for e in load_rows(paths["teacher"], "episodes")} == set(
        json.load(open(paths["split"]))["used"]["train"])
    assert pq.read_table(paths["pairs"]).num_rows > 0
    for key in ("bc_model", "dpo_model"):
        assert os.path.exists(os.path.join(paths[key], "bc_done.json"))
    for part in ("train", "valid"):
        assert load_rows(paths[f"router_data_{part}"], "router")
    assert os.path.exists(paths["router"])
    results = json.load(open(run_dir / "eval" / "results.json"))
    assert results["methods"] == list(METHODS) and results["config"]["env_id"] == env_id
    for method, rel in ((m, c["run_dir"]) for m, c in main_table(results).items()):
        eps = load_rows(run_dir / "eval" / rel, "episodes")
        assert len(eps) == 2 and all(e["task_id"] in json.load(open(paths["split"]))["test"] for e in eps), method
    report = Path(summary["report"])
    assert_report_matches_shards(report, results, run_dir / "eval")
    assert (report.parent / "pareto.png").read_bytes()[:4] == b"\x89PNG"


def test_rerun_skips_and_a_killed_stage_resumes(pipeline_run):
    _, cfg, run_dir, _ = pipeline_run
    ids = {s: read_marker(run_dir, s)["run_id"] for s in STAGES}
    again = run_chain(cfg.chain, run_dir)
    assert all(r["skipped"] for r in again.values())
    # a run killed during router_data: its marker is not written yet and only its train rollouts are on disk
    os.remove(os.path.join(run_dir, "router_data", MARKER))
    shutil.rmtree(os.path.join(run_dir, "router_data", "valid"))
    train = Path(run_dir, "router_data", "train")
    kept = {p: p.stat().st_mtime_ns for p in train.rglob("*.parquet")}
    resumed = run_chain(cfg.chain, run_dir)
    assert [s for s, r in resumed.items() if not r["skipped"]] == ["router_data", "router"]
    assert {s: read_marker(run_dir, s)["run_id"] for s in STAGES[:6]} == {s: ids[s] for s in STAGES[:6]}
    assert kept and {p: p.stat().st_mtime_ns for p in kept} == kept  # finished episodes were not replayed
    assert list(Path(run_dir, "router_data", "valid").rglob("*.parquet"))


@pytest.mark.skipif("bwrap" not in available_isolations(), reason="two of the test-data tasks name the container's "
                    "paths (/app, /tests): the local backend runs them under bubblewrap only")
def test_cpu_presets_load_and_a_tasks_dir_runs_the_same(tmp_path):
    """The SmolLM2 presets of r2v_train/configs load as documented, and terminalbench.yaml with
    ``tasks_dir`` set to another Terminal-Bench-format folder splits and plays that folder's tasks instead."""
    import yaml

    he, tb = (load_config(CONFIG_DIR / f"{n}.yaml") for n in ("humaneval", "terminalbench"))
    assert (he.chain.env.env_id, tb.chain.env.env_id) == ("R2V/HumanEval-v0", "R2V/TerminalBench-v0")
    for cfg in (he, tb):
        assert cfg.chain.bc.base_model == cfg.baseline_slm == "smollm2" and cfg.chain.bc.lora_r > 0
        assert cfg.chain.dpo.batch_size == 1 and cfg.chain.threads == 1  # SmolLM2 DPO on CPU: batch 2 took ~21 GB
        assert cfg.evaluate.env_id == cfg.chain.env.env_id
    data = yaml.safe_load((CONFIG_DIR / "terminalbench.yaml").read_text())
    data["chain"]["env"]["workers"] = 0
    small = DATA / "terminalbench"  # 3 tasks: the 70/15/15 split has no valid task
    data["chain"]["env"]["env_kwargs"] = {"tasks_dir": str(small)}
    with pytest.raises(ValueError, match="no train or no valid task"):
        run_chain(load_config(data).chain, tmp_path / "small", only=["split"])
    folder = tmp_path / "tasks"  # another folder: the shipped tasks and the test-data tasks together
    for src in (SHIPPED_TASKS_DIR, small):
        for task in src.iterdir():
            if task.is_dir() and not task.name.startswith(("_", ".")):
                shutil.copytree(task, folder / task.name)
    data["chain"]["env"]["env_kwargs"] = {"tasks_dir": str(folder)}
    cfg = load_config(data)
    assert cfg.evaluate.env_kwargs == {"tasks_dir": str(folder)}  # the evaluation plays the same folder
    out = run_chain(cfg.chain, tmp_path / "run", only=["split", "teacher"])
    split = json.load(open(stage_paths(tmp_path / "run")["split"]))
    ids = set(split["train"]) | set(split["valid"]) | set(split["test"])
    assert len(ids) == 16 and {"copy-tests-to-workdir", "harbor-csv-stats", "upstream-uv-bootstrap"} < ids
    eps = load_rows(stage_paths(tmp_path / "run")["teacher"], "episodes")
    assert {e["task_id"] for e in eps} == set(split["used"]["train"]) and out["teacher"]["outputs"]["success_rate"] == 1
