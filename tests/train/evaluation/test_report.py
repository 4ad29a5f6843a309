"""The report: every artifact written, and its numbers match the shards they were computed from."""

import pytest

from r2v_agents.shards import load_rows
from r2v_eval.results import main_table, sweeps
from r2v_eval.robustness_report import cells_section
from r2v_train.evaluation.methods import evaluate, matched_reliability
from r2v_train.evaluation.report import parse_markdown_table, write_report
from tests.support.eval_runs import assert_report_matches_shards, copy_trained_run, eval_config, make_agents


@pytest.fixture(scope="module")
def reported(tmp_path_factory, trained_run_template):
    tmp = tmp_path_factory.mktemp("report")
    router, _, valid, _ = copy_trained_run(trained_run_template, tmp)
    results = evaluate(make_agents(tmp, router, valid), eval_config(heuristic_sweep=(0.05, 0.9),
                                                                         entropy_sweep=(0.2, 0.6)), tmp / "eval")
    return tmp, results, write_report(tmp, extra={"wall time": "1 s"})


def test_report_writes_every_artifact(reported):
    tmp, results, path = reported
    text = path.read_text()
    for png in ["pareto.png"] + [f"reliability-{r}.png" for r in results["calibration"]]:
        assert (tmp / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in text
    for heading in ("## Table 1", "## Per perturbation type", "## Router calibration", "- wall time: 1 s",
                    "## Heuristic router across thresholds", "## Entropy router across thresholds"):
        assert heading in text


def test_report_numbers_match_the_shards(reported):
    tmp, results, path = reported
    assert_report_matches_shards(path, results, tmp / "eval")


def test_report_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path)


def test_heuristic_sweep_rows_match_their_shards_and_trade_cost_for_success(reported):
    """Each swept threshold is its own runner directory; a lower threshold escalates more and (here) succeeds more."""
    tmp, results, path = reported
    sweep = sweeps(results)["heuristic"]
    assert [c["threshold"] for c in sweep] == [0.05, 0.9]
    for c in sweep:
        eps = load_rows(tmp / "eval" / c["run_dir"], "episodes", columns=["success"])
        assert len(eps) == c["episodes"] and c["sr"] == pytest.approx(100 * sum(e["success"] for e in eps) / len(eps))
    low, high = sweep
    assert low["llm_pct"] > high["llm_pct"] and low["sr"] >= high["sr"]
    rows = parse_markdown_table(path.read_text(), "## Heuristic router across thresholds")
    assert [float(r["LLM%"]) for r in rows] == pytest.approx([c["llm_pct"] for c in sweep], abs=0.05)
    match = matched_reliability(results)  # the scripted run's heuristic reaches R2V's SR at some threshold
    assert match is not None and match["baseline_sr"] >= match["method_sr"] - 2
    cheapest = min((c for c in [main_table(results)["heuristic"], *sweep]
                    if c["sr"] >= match["method_sr"] - 2), key=lambda c: c["llm_pct"])
    assert match["baseline_llm_pct"] == cheapest["llm_pct"] and "At matched reliability" in path.read_text()


def test_entropy_sweep_is_its_own_curve_and_matched_like_the_heuristic(reported):
    tmp, results, path = reported
    sweep = sweeps(results)["entropy"]
    assert [(c["agent"], c["run_dir"].rsplit("/", 1)[-1]) for c in sweep] == [("entropy@0.2",) * 2, ("entropy@0.6",) * 2]
    low, high = sweep
    assert low["llm_pct"] > high["llm_pct"]  # a lower threshold on H / (1 + H) escalates more
    rows = parse_markdown_table(path.read_text(), "## Entropy router across thresholds")
    assert [float(r["LLM%"]) for r in rows] == pytest.approx([c["llm_pct"] for c in sweep], abs=0.05)
    match = matched_reliability(results, baseline="entropy")  # here the fitted entropy threshold is the match
    assert match is not None and match["baseline"] == "entropy" and match["baseline_sr"] >= match["method_sr"] - 2
    assert f"the cheapest entropy point escalates {match['baseline_llm_pct']:.1f}%" in path.read_text()


def test_every_cell_is_rendered_as_r2v_eval_renders_cells(reported):
    """One cell table in both reports: the run report's "Every cell" rows are results.json's cells, one per
    (agent, perturbation), sweep points included, with SR and LLM% as the schema holds them."""
    tmp, results, path = reported
    text = path.read_text()
    rows = parse_markdown_table(text, "## Every cell")
    assert [(r["agent"], r["perturbation"]) for r in rows] == [(c["agent"], c["perturbation"]) for c in results["cells"]]
    assert [float(r["SR (%)"]) for r in rows] == pytest.approx([c["sr"] for c in results["cells"]], abs=0.05)
    assert [float(r["LLM%"]) for r in rows] == pytest.approx([c["llm_pct"] for c in results["cells"]], abs=0.05)
    assert "\n".join(cells_section(results["cells"], results["config"]["bootstrap"])) in text
