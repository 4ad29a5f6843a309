"""`r2v table1`: the combined Table 1 from per-benchmark sub-runs (synthetic results, no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # end to end: pipelines per benchmark

from r2v_eval.results import cell_entry
from r2v_train import table1
from r2v_train.evaluation.methods import METHOD_LABELS, METHODS
from r2v_train.evaluation.report import parse_markdown_table


R2V_ROW = METHODS.index("r2v")  # fake_results gives method i the SR base + i


def fake_results(sub: Path, base: float) -> dict:
    """A finished sub-run: eval/results.json and pipeline.json with distinct numbers per method and benchmark."""
    cells = {m: {"sr": base + i, "sr_ci": [base + i - 5, base + i + 5], "llm_pct": 10.0 * i,
                 "llm_pct_ci": [10.0 * i - 1, 10.0 * i + 1], "episodes": 48, "steps": 100, "teacher_steps": i}
             for i, m in enumerate(METHODS)}
    cal = {r: {"ece": base / 1000 + j / 100, "brier": base / 100 + j / 10, "reliability": {}}
           for j, r in enumerate(table1.ROUTERS)}
    flaky = {m: {"sr": -1.0} for m in METHODS}
    results = {"cells": [cell_entry(sub / "eval", sub / "eval" / "runs" / cond / m, "R2V/ALFWorld-v0", cond, m, c)
                         for cond, table in (("composite", cells), ("flaky", flaky)) for m, c in table.items()],
               "main_condition": "composite", "methods": list(METHODS), "calibration": cal}
    (sub / "eval").mkdir(parents=True, exist_ok=True)
    (sub / "eval" / "results.json").write_text(json.dumps(results))
    (sub / "pipeline.json").write_text(json.dumps({"timings_s": {"total": base * 10}, "report": str(sub / "report.md")}))
    return results


def test_numbers_land_in_their_benchmark_columns_and_missing_ones_say_so(tmp_path):
    fake_results(tmp_path / "alfworld", 50.0)
    fake_results(tmp_path / "terminalbench", 70.0)
    (tmp_path / "humaneval").mkdir()
    (tmp_path / "humaneval" / table1.ERROR_FILE).write_text(json.dumps({"error": "RuntimeError: boom"}))
    md = table1.write_table1(tmp_path, ("alfworld", "humaneval", "terminalbench"))
    rows = {r["method"]: r for r in parse_markdown_table(md.read_text(), "## Table 1")}
    assert list(rows) == [METHOD_LABELS[m] for m in METHODS]
    for i, m in enumerate(METHODS):
        r = rows[METHOD_LABELS[m]]
        assert r["ALFWorld SR (%)"] == f"{50.0 + i:.1f} [{45.0 + i:.1f}, {55.0 + i:.1f}]"
        assert r["TerminalBench SR (%)"] == f"{70.0 + i:.1f} [{65.0 + i:.1f}, {75.0 + i:.1f}]"
        assert r["ALFWorld LLM%"] == f"{10.0 * i:.1f} [{10.0 * i - 1:.1f}, {10.0 * i + 1:.1f}]"
        assert r["HumanEval+ SR (%)"] == r["HumanEval+ LLM%"] == "failed"  # never a zero
        paper = table1.PAPER_TABLE1["alfworld"].get(m)  # the policy alone is ours: the paper has no such row
        assert r["ALFWorld paper SR / LLM%"] == (f"{paper[0]:.1f} / {paper[1]:.1f}" if paper else "-")
    assert rows["R2V"]["ALFWorld paper SR / LLM%"] == "98.2 / 41.7"  # the paper's "TextWorld" column
    assert rows["SLM-only"]["HumanEval+ paper SR / LLM%"] == "91.9 / 0.0"
    cal = {r["router"]: r for r in parse_markdown_table(md.read_text(), "## Router calibration")}
    assert cal["R2V"]["ALFWorld"] == "0.050 / 0.500" and cal["Heuristic router"]["TerminalBench"] == "0.090 / 0.900"
    assert cal["Entropy router"]["HumanEval+"] == "failed"
    runs = {r["benchmark"]: r for r in parse_markdown_table(md.read_text(), "## Runs")}
    assert runs["ALFWorld"]["wall time"] == "500 s" and runs["ALFWorld"]["episodes per method"] == "48"
    assert runs["HumanEval+"]["status"] == "failed: RuntimeError: boom"
    data = json.loads((tmp_path / table1.TABLE1_JSON).read_text())
    assert data["results"]["terminalbench"]["methods"]["r2v"]["sr"] == 70.0 + R2V_ROW
    assert data["results"]["humaneval"]["status"] == "failed" and "methods" not in data["results"]["humaneval"]
    # a benchmark with no sub-run at all
    md = table1.write_table1(tmp_path, ("alfworld", "nope"))
    rows = {r["method"]: r for r in parse_markdown_table(md.read_text(), "## Table 1")}
    assert rows["R2V"]["nope SR (%)"] == "not run" and rows["R2V"]["nope paper SR / LLM%"] == "-"


def test_finished_benchmarks_are_not_rerun_and_a_failure_does_not_stop_the_rest(tmp_path, monkeypatch):
    calls = []

    def fake_pipeline(cfg, sub):
        calls.append(Path(sub).name)
        if Path(sub).name == "humaneval":
            raise RuntimeError("no model")
        fake_results(Path(sub), 60.0)

    monkeypatch.setattr(table1, "run_pipeline", fake_pipeline)
    miniature = str(table1.CONFIG_DIR / "miniature.yaml")
    cfg = table1.load_table1_config({"benchmarks": "alfworld,humaneval,terminalbench",
                                     "configs": {b: miniature for b in table1.BENCHMARKS}})
    fake_results(tmp_path / "alfworld", 50.0)  # finished before
    md = table1.run_table1(cfg, tmp_path)
    assert calls == ["humaneval", "terminalbench"]
    rows = {r["method"]: r for r in parse_markdown_table(md.read_text(), "## Table 1")}
    assert rows["R2V"]["ALFWorld SR (%)"].startswith(f"{50 + R2V_ROW:.1f} ")
    assert rows["R2V"]["TerminalBench SR (%)"].startswith(f"{60 + R2V_ROW:.1f} ")
    assert rows["R2V"]["HumanEval+ SR (%)"] == "failed"
    calls.clear()
    monkeypatch.setattr(table1, "run_pipeline", lambda cfg, sub: (calls.append(Path(sub).name),
                                                                  fake_results(Path(sub), 80.0)))
    md = table1.run_table1(cfg, tmp_path)  # the rerun only retries the failed one, and clears its error
    assert calls == ["humaneval"] and not (tmp_path / "humaneval" / table1.ERROR_FILE).exists()
    rows = {r["method"]: r for r in parse_markdown_table(md.read_text(), "## Table 1")}
    assert rows["R2V"]["HumanEval+ SR (%)"].startswith(f"{80 + R2V_ROW:.1f} ")
    with pytest.raises(Exception, match="table1 config key"):
        table1.load_table1_config({"benchmark": ["alfworld"]})


def test_shipped_table1_config_names_each_benchmark_preset():
    cfg = table1.load_table1_config(table1.CONFIG_DIR / "table1.yaml")
    assert cfg.benchmarks == table1.BENCHMARKS
    assert {b: cfg.config_path(b).name for b in cfg.benchmarks} == {b: f"{b}.yaml" for b in table1.BENCHMARKS}
    assert cfg.config_path("alfworld").is_file()
