"""Shared checks of a finished ``r2v pipeline`` run directory, for the per-benchmark miniature tests."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from r2v_eval.results import main_table


def assert_pipeline_artifacts(run_dir: str | os.PathLike, summary: dict[str, Any]) -> dict[str, Any]:
    """Every chain stage finished and wrote its outputs, the six methods were evaluated, and the report (tables,
    plots, run times) agrees with the evaluation's shards; returns the evaluation's results.json."""
    import pyarrow.parquet as pq

    from r2v_agents.routers import MLPRouter
    from r2v_agents.shards import load_rows
    from r2v_train.chain.stages import MARKER, STAGES, stage_paths
    from r2v_train.evaluation.methods import METHODS
    from tests.support.eval_runs import assert_report_matches_shards

    run_dir = Path(run_dir)
    paths = stage_paths(run_dir)
    for stage in STAGES:
        assert (run_dir / stage / MARKER).exists(), stage
    manifest = json.loads(Path(paths["manifest"]).read_text())
    assert set(manifest["stages"]) == set(STAGES) and manifest["versions"]["trl"]
    assert load_rows(paths["teacher"], "episodes") and load_rows(paths["replay"], "episodes")
    for model in ("bc_model", "dpo_model"):
        assert (Path(paths[model]) / "config.json").is_file(), model
    assert pq.read_table(paths["pairs"]).num_rows >= 0  # written, possibly empty when BC never disagrees
    for part in ("train", "valid"):
        rows = load_rows(paths[f"router_data_{part}"], "router")
        assert rows and all(len(r["features"]) == 15 and r["y"] in (0, 1) for r in rows), part
    assert 0.0 <= MLPRouter.load(paths["router"]).threshold <= 1.0
    results = json.loads((run_dir / "eval" / "results.json").read_text())
    assert results["methods"] == list(METHODS)
    report = Path(summary["report"])
    text = report.read_text()
    for png in ["pareto.png"] + [f"reliability-{r}.png" for r in results["calibration"]]:
        assert (report.parent / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"]({png})" in text
    for heading in ("## Table 1", "## Router calibration", "chain stages"):
        assert heading in text
    saved = json.loads((run_dir / "pipeline.json").read_text())
    assert saved["main"] == main_table(results) and saved["timings_s"]["total"] > 0
    assert_report_matches_shards(report, results, run_dir / "eval")
    return results
