"""The whole training chain (r2v_train/chain/stages.py, tiny preset) end to end on the small TextWorld suite."""

from __future__ import annotations

import json
import os
import shutil

import pytest

pytestmark = pytest.mark.slow  # end to end: the whole tiny chain and a miniature pipeline

pytest.importorskip("textworld")
torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from r2v_eval.results import by_setting, main_table
from r2v_train.chain.stages import MARKER, STAGES, read_marker, run_chain, stage_paths  # noqa: E402
from r2v_train.config import tiny_config  # noqa: E402
from tests.support.miniatures import MINIATURE_PIPELINE, run_once  # noqa: E402


@pytest.fixture(scope="module")
def chain(tmp_path_factory, tiny_chain_template):
    """A copy of the session's tiny chain run: these tests remove outputs and rerun stages in it."""
    template, results = tiny_chain_template
    run_dir = tmp_path_factory.mktemp("chain") / "run"
    shutil.copytree(template, run_dir, symlinks=True)
    return run_dir, results


def test_every_stage_writes_its_outputs(chain):
    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM

    from r2v_agents.routers import MLPRouter
    from r2v_agents.shards import load_rows

    run_dir, results = chain
    assert list(results) == list(STAGES) and not any(r["skipped"] for r in results.values())
    for stage in STAGES:
        assert os.path.exists(os.path.join(run_dir, stage, MARKER)), stage
    paths = stage_paths(run_dir)
    assert results["teacher"]["outputs"]["success_rate"] == 1.0  # the clean expert wins every train game
    assert results["replay"]["outputs"]["success_rate"] == 1.0   # its actions still win under perturbations
    assert {e["z"] for e in load_rows(paths["replay"], "episodes")} == {1, 2}
    pairs = pq.read_table(paths["pairs"]).to_pylist()
    assert pairs and all(p["chosen"] != p["rejected"] and p["chosen_score"] > p["rejected_score"] for p in pairs)
    assert sum(p["prompt_alt"] is not None and p["prompt_alt"] != p["prompt"] for p in pairs) > len(pairs) // 2
    dpo = json.load(open(os.path.join(paths["dpo_model"], "bc_done.json")))
    assert any("consistency/jsd" in h for h in dpo["log_history"])  # the consistency term is logged
    bc_model, dpo_model = (AutoModelForCausalLM.from_pretrained(paths[k]) for k in ("bc_model", "dpo_model"))
    assert any(not torch.equal(a, b) for a, b in zip(bc_model.parameters(), dpo_model.parameters()))
    for part in ("train", "valid"):
        rows = load_rows(paths[f"router_data_{part}"], "router")
        assert rows and all(len(r["features"]) == 15 and r["y"] in (0, 1) for r in rows)
    router = MLPRouter.load(paths["router"])
    assert 0.0 <= router.threshold <= 1.0
    manifest = json.load(open(paths["manifest"]))
    assert manifest["config"]["replay"]["seeds"] == [1, 2] and manifest["versions"]["trl"]
    assert set(manifest["stages"]) == set(STAGES)
    print({s: round(r["wall_s"], 1) for s, r in results.items()})  # per-stage wall times (pytest -s)


def test_rerun_skips_and_removed_outputs_rerun_downstream(chain):
    run_dir, _ = chain
    ids = {s: read_marker(run_dir, s)["run_id"] for s in STAGES}
    again = run_chain(tiny_config(), run_dir)
    assert all(r["skipped"] for r in again.values())
    assert {s: read_marker(run_dir, s)["run_id"] for s in STAGES} == ids  # nothing recomputed
    shutil.rmtree(os.path.join(run_dir, "router_data"))
    rerun = run_chain(tiny_config(), run_dir)
    assert [s for s, r in rerun.items() if not r["skipped"]] == ["router_data", "router"]
    assert {s: read_marker(run_dir, s)["run_id"] for s in STAGES[:6]} == {s: ids[s] for s in STAGES[:6]}


@pytest.fixture(scope="module")
def miniature(tiny_chain_template, tmp_path_factory):
    """The main job at its miniature size on a copy of the finished chain (the miniature config's chain is the tiny
    preset, so its stages are reused): ``(run dir, summary)``. It is the README test's run of ``bash scripts/main.sh
    --config r2v_train/configs/miniature.yaml ...`` (exit status checked there), made once for both."""
    from r2v_train.config import CONFIG_DIR, load_config
    from r2v_train.run_dir import pipeline_file

    assert load_config(CONFIG_DIR / "miniature.yaml").chain == tiny_config()
    tmp, _ = run_once(MINIATURE_PIPELINE, tmp_path_factory.mktemp("main-job"), tiny_chain_template[0])
    run_dir = tmp / MINIATURE_PIPELINE.chain
    return run_dir, json.loads(pipeline_file(run_dir).read_text())


def test_miniature_pipeline_writes_every_artifact_and_its_report_matches_the_shards(miniature):
    """The miniature pipeline reuses the chain stages, evaluates the six methods, and its report gathers tables and
    plots that agree with the shards."""
    from pathlib import Path

    from r2v_train.evaluation.methods import METHODS
    from tests.support.eval_runs import assert_report_matches_shards

    run_dir, summary = miniature
    results = json.load(open(run_dir / "eval" / "results.json"))
    assert results["methods"] == list(METHODS) and set(by_setting(results)) == {"composite", "flaky"}
    from r2v_agents.shards import load_rows

    seeds = {c: {e["z"] for e in load_rows(run_dir / "eval" / by_setting(results)[c]["slm"]["run_dir"], "episodes")}
             for c in ("composite", "flaky")}
    assert seeds == {"composite": {0, 1}, "flaky": {3}}  # per-type conditions run on per_type_seeds
    report = Path(summary["report"])
    text = report.read_text()
    for png in ["pareto.png"] + [f"reliability-{r}.png" for r in results["calibration"]]:
        assert (report.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in text
    for heading in ("## Table 1", "## Per perturbation type", "## Router calibration", "chain stages"):
        assert heading in text
    saved = json.load(open(run_dir / "pipeline.json"))
    assert saved["main"] == main_table(results) and saved["timings_s"]["total"] > 0
    from r2v_train.pipeline import summary_text

    closing = summary_text(summary)  # what `r2v pipeline` prints at the end
    d = results["paired"]["heuristic"]
    assert "| R2V |" in closing and f"LLM% {d['llm_pct_diff']:+.1f}" in closing and "total " in closing
    assert_report_matches_shards(report, results, run_dir / "eval")
    from r2v_train.evaluation.report import write_report

    write_report(run_dir)  # re-rendered later (r2v report, an ablation): the run's timings stay
    assert report.read_text() == text


@pytest.mark.parametrize("method, spec", [("slm", "slm:{run}"), ("policy", "slm:{run}?k=1"), ("r2v", "r2v:{run}")])
def test_r2v_eval_and_the_pipeline_give_the_same_episodes_and_sr(miniature, method, spec, tmp_path):
    """One agent, one SR: ``r2v eval --agent slm:RUN`` (``slm:RUN?k=1``, ``r2v:RUN``) on the pipeline's own grid plays
    the episodes of Table 1's SLM-only (policy alone, R2V) cell move for move, and both count them by the one rule
    (:mod:`r2v_eval.cells`)."""
    from r2v_eval.cells import outcomes, sr_metrics
    from r2v_eval.cli import main as eval_main

    run_dir, _ = miniature
    results = json.load(open(run_dir / "eval" / "results.json"))
    ev, cond = results["config"], results["main_condition"]
    out = tmp_path / "eval"
    eval_main(["--agent", spec.format(run=run_dir), "--envs", ev["env_id"], "--env-kwargs",
               json.dumps(ev["env_kwargs"]), "--perturbations", cond, "--seeds", *map(str, ev["seeds"]),
               "--split", ev["split"], "--tasks", str(ev["max_tasks"]), "--max-steps", str(ev["max_steps"]),
               "--bootstrap", str(ev["bootstrap"]), "--out", str(out), "--no-progress"])
    (cell,) = json.load(open(out / "results.json"))["cells"]
    pipeline_cell = run_dir / "eval" / by_setting(results)[cond][method]["run_dir"]
    mine, theirs = outcomes(out / cell["run_dir"]), outcomes(pipeline_cell)
    assert len(mine) == ev["max_tasks"] * len(ev["seeds"]) and mine == theirs  # (success, steps, teacher steps)
    table1 = by_setting(results)[cond][method]
    assert cell["sr"] == table1["sr"] == sr_metrics(pipeline_cell, ev["bootstrap"])["sr"]
    assert cell["sr_ci"] == table1["sr_ci"] and cell["scored"] == table1["scored"]
    # one schema: the same fields, and on the same episodes the same values, but for where and when it ran
    assert set(cell) - {"drop_vs_clean"} == set(table1) and table1["agent"] == method
    same = set(table1) - {"agent", "run_dir", "mean_latency_s", "step_latency_s"}
    assert {k: cell[k] for k in same} == {k: table1[k] for k in same}
    if method == "r2v":  # the routed agent asked its teacher: the comparison covers the router and the teacher too
        assert sum(t for _, _, t in mine.values()) > 0 and cell["llm_pct"] == table1["llm_pct"]
