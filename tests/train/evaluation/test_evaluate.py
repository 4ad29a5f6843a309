"""Evaluation: the six methods through the real runner on the scripted env, and the statistics."""

import json

import numpy as np
import pytest

from r2v_agents.shards import load_rows
from r2v_envs.errors import UnknownChoiceError
from r2v_eval.results import by_setting, main_table
from r2v_eval.stats import bootstrap_episodes, pareto_front
from r2v_train.evaluation.methods import EvalConfig, evaluate
from r2v_train.run_dir import RESULTS_FILE
from tests.support.eval_runs import copy_trained_run, eval_config, make_agents

SEED = 0


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory, trained_run_template):
    tmp = tmp_path_factory.mktemp("eval")
    router, _, valid, _ = copy_trained_run(trained_run_template, tmp)
    results = evaluate(make_agents(tmp, router, valid), eval_config(), tmp / "eval")
    return tmp, results


def test_bootstrap_is_reproducible_and_brackets_the_estimate():
    rng = np.random.default_rng(SEED)
    s, n = rng.random(50) < 0.7, rng.integers(1, 10, 50)
    t = np.minimum(n, rng.integers(0, 5, 50))
    a, b = bootstrap_episodes(s, n, t, 500, SEED), bootstrap_episodes(s, n, t, 500, SEED)
    assert a == b
    assert a["sr"] == pytest.approx(100 * s.mean()) and a["llm_pct"] == pytest.approx(100 * t.sum() / n.sum())
    for k in ("sr", "llm_pct"):
        lo, hi = a[f"{k}_ci"]
        assert lo <= a[k] <= hi and hi - lo > 0
    with pytest.raises(ValueError):
        bootstrap_episodes(np.array([]), np.array([]), np.array([]))


def test_config_rejects_bad_methods():
    with pytest.raises(UnknownChoiceError):
        EvalConfig(methods=("slm", "gpt"))
    with pytest.raises(ValueError, match="oracle"):
        EvalConfig(methods=("oracle",))


def test_pareto_front_keeps_non_dominated_points():
    assert pareto_front({"a": (10, 50), "b": (20, 40), "c": (5, 50)}) == ["c"]


def test_every_method_and_condition_is_run_and_matches_its_shards(evaluated):
    tmp, results = evaluated
    assert json.loads((tmp / "eval" / RESULTS_FILE).read_text()) == results
    assert [(c["perturbation"], c["agent"]) for c in results["cells"]] == [
        (cond, m) for cond in ("composite", "flaky") for m in ("slm", "entropy", "heuristic", "r2v", "oracle", "llm")]
    for cond, cells in by_setting(results).items():
        for method, cell in cells.items():
            assert cell["env"] == "R2V_Scripted-v0" and cell["run_dir"] == f"runs/{cond}/{method}"
            run_dir = tmp / "eval" / cell["run_dir"]
            steps = load_rows(run_dir, "steps", columns=["episode_id", "source"])
            eps = load_rows(run_dir, "episodes", columns=["success"])
            teacher = sum(s["source"] in ("teacher", "oracle") for s in steps)
            assert cell["episodes"] == len(eps) == 12
            assert cell["sr"] == pytest.approx(100 * np.mean([e["success"] for e in eps]))
            assert cell["llm_pct"] == pytest.approx(100 * teacher / len(steps))
    main = main_table(results)
    assert main["slm"]["llm_pct"] == 0 and main["llm"]["llm_pct"] == 100
    assert main["slm"]["sr"] < main["llm"]["sr"] == 100
    paired = results["paired"]  # R2V minus each method on the same episodes
    assert set(paired) == set(main) - {"r2v"}
    for m, d in paired.items():
        assert d["episodes"] == 12 and d["sr_diff_ci"][0] <= d["sr_diff"] <= d["sr_diff_ci"][1]
        assert d["sr_diff"] == pytest.approx(main["r2v"]["sr"] - main[m]["sr"])
        assert d["llm_pct_diff"] == pytest.approx(main["r2v"]["llm_pct"] - main[m]["llm_pct"])
    assert paired["slm"]["llm_pct_diff_ci"][0] > 0 > paired["llm"]["llm_pct_diff_ci"][1]


def test_paired_bootstrap_needs_the_same_episodes_and_paired_takes_those_both_scored():
    from r2v_eval.cells import paired
    from r2v_eval.stats import paired_bootstrap

    a = {"e1": (1.0, 3, 1), "e2": (0.0, 5, 0)}
    same = paired_bootstrap(a, a, n_boot=100)
    assert same["sr_diff"] == same["llm_pct_diff"] == 0 and same["llm_pct_diff_ci"] == [0.0, 0.0]
    with pytest.raises(ValueError, match="same episodes"):
        paired_bootstrap(a, {"e1": (1.0, 3, 1)})
    # an episode one cell could not run (left out of its outcomes) is left out of the pair
    d = paired(a, {"e1": (0.0, 3, 0), "e3": (1.0, 2, 0)}, n_boot=100)
    assert d["episodes"] == 1 and d["sr_diff"] == 100.0
    assert paired(a, {"e3": (1.0, 2, 0)}) is None


def test_oracle_escalates_exactly_the_failed_slm_rollouts(evaluated):
    tmp, results = evaluated
    runs = main_table(results)
    failed = {(e["task_id"], e["z"]) for e in load_rows(tmp / "eval" / runs["slm"]["run_dir"], "episodes")
              if not e["success"]}
    assert failed
    for s in load_rows(tmp / "eval" / runs["oracle"]["run_dir"], "steps", columns=["task_id", "z", "source"]):
        assert (s["source"] == "oracle") == ((s["task_id"], s["z"]) in failed)
    assert runs["oracle"]["sr"] == 100


def test_router_calibration_on_validation(evaluated):
    _, results = evaluated
    cal = results["calibration"]
    assert set(cal) == {"entropy", "heuristic", "r2v"}
    for c in cal.values():
        assert 0 <= c["ece"] <= 1 and 0 <= c["brier"] <= 1 and sum(c["reliability"]["count"]) == c["n"] > 0


def test_rerun_resumes_without_new_episodes(evaluated, monkeypatch):
    tmp, results = evaluated
    import r2v_eval.cells as cells  # the module that calls the runner for every cell

    seen = []
    real = cells.run

    def counted(*a, **k):
        summary = real(*a, **k)
        seen.append(summary.episodes)
        return summary

    monkeypatch.setattr(cells, "run", counted)
    again = evaluate(make_agents(tmp, str(tmp / "router" / "router.pt"), str(tmp / "router_data" / "valid")),
                     eval_config(), tmp / "eval")
    assert seen and not any(seen)
    assert again["cells"] == results["cells"]


def test_baseline_thresholds_come_from_validation_unless_fixed(evaluated):
    """The heuristic is set to R2V's recall of validation failure rows (comparable reliability), or to Youden's J
    on request or without a trained router, like the entropy router; a fixed heuristic_threshold is kept."""
    from r2v_agents.routers import HeuristicRouter, calibrate_threshold
    from r2v_train.evaluation.methods import build_routers, load_valid

    tmp, results = evaluated
    agents = make_agents(tmp, str(tmp / "router" / "router.pt"), str(tmp / "router_data" / "valid"))
    valid = load_valid(agents.valid_router_dir)
    y, scores = valid.y.astype(bool), HeuristicRouter().predict(valid.features)
    routers = build_routers(agents, eval_config())
    r2v_recall = routers["r2v"].escalate(valid.features)[y].mean()
    matched = routers["heuristic"].threshold
    assert (scores[y] >= matched).mean() >= r2v_recall > 0
    assert (scores[y] >= scores[scores > matched].min()).mean() < r2v_recall  # no cheaper cut reaches it
    cal = results["calibration"]
    assert cal["heuristic"]["threshold"] == matched
    assert cal["heuristic"]["failure_recall"] >= cal["r2v"]["failure_recall"] == pytest.approx(r2v_recall)

    youden = calibrate_threshold(scores, valid.y)
    assert build_routers(agents, eval_config(heuristic_fit="youden"))["heuristic"].threshold == youden
    no_router = make_agents(tmp, str(tmp / "missing-router.pt"), agents.valid_router_dir)
    assert build_routers(no_router, eval_config())["heuristic"].threshold == youden
    assert np.isfinite(youden) and youden != matched  # the test data tells the two rules apart
    assert build_routers(agents, eval_config(heuristic_threshold=0.7))["heuristic"].threshold == 0.7
    assert build_routers(make_agents(tmp), eval_config())["heuristic"].threshold == 0.5  # no validation rows
    with pytest.raises(UnknownChoiceError):
        eval_config(heuristic_fit="median")
