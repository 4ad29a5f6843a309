"""`r2v pipeline` end to end on R2V/ALFWorld-v0 (r2v_train/configs/alfworld-miniature.yaml): the tiny chain on
offline generated games, the six methods evaluated, the report checked against the shards.

About 35 s of CPU (the wall time grows with the machine's load: 80-230 s at load average 4-6 on 2 cores).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: the miniature pipeline on ALFWorld

pytest.importorskip("alfworld", reason="alfworld is not installed: pip install 'r2v[alfworld]' (needs cmake, g++)")
pytest.importorskip("fast_downward", reason="fast-downward-textworld is missing: pip install 'r2v[alfworld]'")
pytest.importorskip("trl")

from r2v_eval.results import main_table
from r2v_train.chain.stages import STAGES, read_marker  # noqa: E402
from r2v_train.config import CONFIG_DIR, load_config
from r2v_train.pipeline import run_pipeline  # noqa: E402
from tests.support.pipeline_runs import assert_pipeline_artifacts  # noqa: E402

CONFIG = CONFIG_DIR / "alfworld-miniature.yaml"


@pytest.fixture(scope="module")
def alfworld_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("alfworld-pipeline")
    return run_dir, run_pipeline(load_config(CONFIG), run_dir)


def test_every_stage_and_artifact_on_alfworld_and_the_report_matches_the_shards(alfworld_run):
    from r2v_agents.shards import load_rows
    from r2v_train.chain.stages import stage_paths

    run_dir, summary = alfworld_run
    results = assert_pipeline_artifacts(run_dir, summary)
    manifest = json.loads(Path(stage_paths(run_dir)["manifest"]).read_text())
    assert manifest["config"]["env"]["env_id"] == "R2V/ALFWorld-v0"
    teacher = load_rows(stage_paths(run_dir)["teacher"], "episodes")
    assert len(teacher) == 3 and all(e["success"] for e in teacher)  # alfworld's expert wins the train games
    main = main_table(results)
    assert main["llm"]["sr"] > 0 and main["llm"]["llm_pct"] == 100.0 and main["slm"]["llm_pct"] == 0.0
    from r2v_agents.verifiers.alfworld import ALFWorldVerifier
    from r2v_train.evaluation.agents import agents_from_run

    slm = agents_from_run(load_config(CONFIG).chain, run_dir).slm()  # the evaluated SLM scores with ALFWorld's
    assert isinstance(slm.verifier, ALFWorldVerifier)                 # own verifier (Appendix C)


def test_garbage_slm_text_is_contained_by_the_game(alfworld_run):
    """The barely trained SLM emits garbage (control characters, broken UTF-8): the game answers it and the
    episode goes on; non-string actions raise the typed error."""
    import gymnasium as gym

    import r2v_envs  # noqa: F401
    from r2v_agents.shards import load_rows
    from r2v_envs.errors import InvalidActionError

    run_dir, _ = alfworld_run
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    steps = load_rows(run_dir / "eval" / main_table(results)["slm"]["run_dir"], "steps")
    by_key = {(s["episode_id"], s["t"]): s for s in steps}
    garbage = [s for s in steps if s["action"] not in s["admissible_actions"]
               and (s["episode_id"], s["t"] + 1) in by_key]
    assert garbage  # an inadmissible action, and the episode went on after it
    assert all(isinstance(by_key[(s["episode_id"], s["t"] + 1)]["observation"], str) for s in garbage)
    env = gym.make("R2V/ALFWorld-v0", seed=0, source="offline", n_games=12, split="test", perturbations="composite")
    env.reset()
    for bad in (None, 3, b"go to desk 1", ["look"]):
        with pytest.raises(InvalidActionError):
            env.step(bad)
    obs, *_ = env.step("\x00\x01 go\udcff")
    assert isinstance(obs, str)
    env.close()


def test_rerun_resumes_without_recomputing(alfworld_run):
    run_dir, summary = alfworld_run
    ids = {s: read_marker(run_dir, s)["run_id"] for s in STAGES}
    again = run_pipeline(load_config(CONFIG), run_dir)
    assert {s: read_marker(run_dir, s)["run_id"] for s in STAGES} == ids  # no stage reran
    assert again["main"] == summary["main"]  # the evaluation's finished episodes were reused, not replayed
