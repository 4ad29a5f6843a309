"""The one results.json schema (:mod:`r2v_eval.results`): its table views, and results files written before it."""

from __future__ import annotations

import pytest

from r2v_eval.results import by_setting, cells, main_table, runs, settings, sweeps, upgrade

CELL = {"sr": 50.0, "sr_ci": [0.0, 100.0], "llm_pct": 10.0, "llm_pct_ci": [0.0, 20.0], "episodes": 4}
OLD = {"config": {"env_id": "R2V/TextWorld-v0"}, "methods": ["slm", "r2v"], "main_condition": "composite",
       "conditions": {"composite": {"r2v": {**CELL, "sr": 75.0}, "slm": CELL}, "flaky": {"slm": {**CELL, "sr": 25.0}}},
       "runs": {"composite": {"r2v": "runs/composite/r2v", "slm": "runs/composite/slm"}, "flaky": {"slm": "runs/flaky/slm"}},
       "sweeps": {"heuristic": [{**CELL, "threshold": 0.3, "run": "runs/composite/heuristic@0.3"},
                                {**CELL, "threshold": 0.1, "run": "runs/composite/heuristic@0.1"}]},
       "pareto": ["slm"]}


def test_a_results_file_written_before_the_cells_reads_as_the_same_tables():
    new = upgrade(OLD)
    assert "conditions" not in new and "runs" not in new and "sweeps" not in new and new["pareto"] == ["slm"]
    assert {(c["env"], c["perturbation"], c["agent"]) for c in cells(OLD)} == {
        ("R2V_TextWorld-v0", "composite", "r2v"), ("R2V_TextWorld-v0", "composite", "slm"),
        ("R2V_TextWorld-v0", "flaky", "slm"), ("R2V_TextWorld-v0", "composite", "heuristic@0.3"),
        ("R2V_TextWorld-v0", "composite", "heuristic@0.1")}
    # the views give back what the old layout held, sweeps sorted by threshold and kept out of the tables
    view = by_setting(OLD)
    assert {s: {a: c["sr"] for a, c in t.items()} for s, t in view.items()} == {
        s: {a: c["sr"] for a, c in t.items()} for s, t in OLD["conditions"].items()}
    assert list(view) == ["composite", "flaky"] and list(view["composite"]) == ["r2v", "slm"]
    assert main_table(OLD)["r2v"]["run_dir"] == "runs/composite/r2v" and settings(OLD) == ["composite", "flaky"]
    assert [(c["threshold"], c["run_dir"], c["sweep"]) for c in sweeps(OLD)["heuristic"]] == [
        (0.1, "runs/composite/heuristic@0.1", "heuristic"), (0.3, "runs/composite/heuristic@0.3", "heuristic")]
    assert runs(OLD, "flaky") == {"slm": "runs/flaky/slm"}
    with pytest.raises(KeyError):
        runs(OLD, "none")
    assert upgrade(new) is new  # a file in the schema is read as it is


def test_settings_put_the_main_condition_first_and_an_eval_without_one_keeps_name_order():
    res = {"main_condition": "partial", "cells": [{"perturbation": p, "agent": "a", "run_dir": p}
                                                  for p in ("composite", "flaky", "partial")]}
    assert settings(res) == ["partial", "composite", "flaky"]
    assert settings({"cells": res["cells"]}) == ["composite", "flaky", "partial"]
