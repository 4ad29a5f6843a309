"""`r2v pipeline` end to end on R2V/BabyAI-v0 (r2v_train/configs/babyai-miniature.yaml): the tiny chain on minigrid's
BabyAI levels with the BabyAI bot as teacher, the six methods evaluated, the report checked against the shards.

About 16 s of CPU (44 s wall at load average 10 on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: the miniature pipeline on BabyAI

pytest.importorskip("minigrid", reason="minigrid is not installed: pip install 'r2v[babyai]'")
pytest.importorskip("trl")

from r2v_eval.results import main_table
from r2v_train.chain.stages import STAGES, read_marker, stage_paths
from r2v_train.config import CONFIG_DIR, load_config
from r2v_train.pipeline import run_pipeline
from tests.support.pipeline_runs import assert_pipeline_artifacts

CONFIG = CONFIG_DIR / "babyai-miniature.yaml"


@pytest.fixture(scope="module")
def babyai_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("babyai-pipeline")
    return run_dir, run_pipeline(load_config(CONFIG), run_dir)


def test_every_stage_and_artifact_on_babyai_and_the_report_matches_the_shards(babyai_run):
    from r2v_agents.shards import load_rows
    from r2v_agents.verifiers.babyai import BabyAIVerifier
    from r2v_train.evaluation.agents import agents_from_run

    run_dir, summary = babyai_run
    results = assert_pipeline_artifacts(run_dir, summary)
    manifest = json.loads(Path(stage_paths(run_dir)["manifest"]).read_text())
    assert manifest["config"]["env"]["env_id"] == "R2V/BabyAI-v0"
    teacher = load_rows(stage_paths(run_dir)["teacher"], "episodes")
    assert len(teacher) == 3 and all(e["success"] for e in teacher)  # the BabyAI bot wins the train tasks
    assert len({e["task_id"].rsplit("-", 1)[0] for e in teacher}) == 3  # three levels, not three seeds of one
    main = main_table(results)
    assert main["llm"]["sr"] > 0 and main["llm"]["llm_pct"] == 100.0 and main["slm"]["llm_pct"] == 0.0
    slm = agents_from_run(load_config(CONFIG).chain, run_dir).slm()  # the evaluated SLM scores with BabyAI's
    assert isinstance(slm.verifier, BabyAIVerifier)                   # own verifier


def test_rerun_resumes_without_recomputing(babyai_run):
    run_dir, summary = babyai_run
    ids = {s: read_marker(run_dir, s)["run_id"] for s in STAGES}
    again = run_pipeline(load_config(CONFIG), run_dir)
    assert {s: read_marker(run_dir, s)["run_id"] for s in STAGES} == ids
    assert again["main"] == summary["main"]
