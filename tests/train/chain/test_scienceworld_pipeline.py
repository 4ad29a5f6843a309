"""`r2v pipeline` end to end on R2V/ScienceWorld-v0 (r2v_train/configs/scienceworld-miniature.yaml): the tiny chain
on the real ScienceWorld engine with its gold sequences as teacher, the six methods evaluated, the report checked
against the shards."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,  # end to end: the miniature pipeline on ScienceWorld (a JVM per env)
              pytest.mark.skipif(not shutil.which("java"), reason="ScienceWorld needs Java (scripts/install.sh)")]

pytest.importorskip("scienceworld", reason="scienceworld is not installed: pip install 'r2v[scienceworld]'")
pytest.importorskip("trl")

from r2v_eval.results import main_table
from r2v_train.chain.stages import STAGES, read_marker, stage_paths
from r2v_train.config import CONFIG_DIR, load_config
from r2v_train.pipeline import run_pipeline
from tests.support.pipeline_runs import assert_pipeline_artifacts

CONFIG = CONFIG_DIR / "scienceworld-miniature.yaml"


@pytest.fixture(scope="module")
def scienceworld_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("scienceworld-pipeline")
    return run_dir, run_pipeline(load_config(CONFIG), run_dir)


def test_every_stage_and_artifact_on_scienceworld_and_the_report_matches_the_shards(scienceworld_run):
    from r2v_agents.shards import load_rows
    from r2v_agents.verifiers.scienceworld import ScienceWorldVerifier
    from r2v_train.evaluation.agents import agents_from_run

    run_dir, summary = scienceworld_run
    results = assert_pipeline_artifacts(run_dir, summary)
    manifest = json.loads(Path(stage_paths(run_dir)["manifest"]).read_text())
    assert manifest["config"]["env"]["env_id"] == "R2V/ScienceWorld-v0"
    teacher = load_rows(stage_paths(run_dir)["teacher"], "episodes")
    assert len(teacher) == 3 and all(e["success"] for e in teacher)  # the gold sequences win the train tasks
    assert len({e["task_id"].rsplit("/", 1)[0] for e in teacher}) == 3  # three task types, not three variations
    main = main_table(results)
    assert main["llm"]["sr"] > 0 and main["llm"]["llm_pct"] == 100.0 and main["slm"]["llm_pct"] == 0.0
    slm = agents_from_run(load_config(CONFIG).chain, run_dir).slm()  # the evaluated SLM scores with
    assert isinstance(slm.verifier, ScienceWorldVerifier)             # ScienceWorld's own verifier


def test_rerun_resumes_without_recomputing(scienceworld_run):
    run_dir, summary = scienceworld_run
    ids = {s: read_marker(run_dir, s)["run_id"] for s in STAGES}
    again = run_pipeline(load_config(CONFIG), run_dir)
    assert {s: read_marker(run_dir, s)["run_id"] for s in STAGES} == ids
    assert again["main"] == summary["main"]
