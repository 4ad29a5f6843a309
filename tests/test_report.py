"""The report: every artifact written, and its numbers match the shards they were computed from."""

import numpy as np
import pytest

from r2v_agents.shards import load_rows
from r2v_train.evaluate import METHOD_LABELS, evaluate
from r2v_train.report import parse_markdown_table, write_report
from tests.eval_fixtures import eval_config, make_agents, trained_run


@pytest.fixture(scope="module")
def reported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    router, _, valid, _ = trained_run(tmp)
    results = evaluate(make_agents(tmp, router, valid), eval_config(), tmp / "eval")
    return tmp, results, write_report(tmp, extra={"wall time": "1 s"})


def test_report_writes_every_artifact(reported):
    tmp, results, path = reported
    text = path.read_text()
    for png in ["pareto.png"] + [f"reliability-{r}.png" for r in results["calibration"]]:
        assert (tmp / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({png})" in text
    for heading in ("## Table 1", "## Per perturbation type", "## Router calibration", "- wall time: 1 s"):
        assert heading in text


def test_report_numbers_match_the_shards(reported):
    tmp, results, path = reported
    rows = {r["method"]: r for r in parse_markdown_table(path.read_text(), "## Table 1")}
    by_label = {v: k for k, v in METHOD_LABELS.items()}
    assert {by_label[m] for m in rows} == set(results["methods"])
    for label, row in rows.items():
        run_dir = tmp / "eval" / results["runs"]["composite"][by_label[label]]
        eps = load_rows(run_dir, "episodes", columns=["success"])
        steps = load_rows(run_dir, "steps", columns=["source"])
        assert float(row["SR (%)"]) == pytest.approx(100 * np.mean([e["success"] for e in eps]), abs=0.05)
        teacher = sum(s["source"] in ("teacher", "oracle") for s in steps)
        assert float(row["LLM%"]) == pytest.approx(100 * teacher / len(steps), abs=0.05)
        lo, hi = (float(x) for x in row["SR 95% CI"].strip("[]").split(","))
        assert lo <= float(row["SR (%)"]) <= hi
    cal = {r["router"]: r for r in parse_markdown_table(path.read_text(), "## Router calibration")}
    for name, c in results["calibration"].items():
        assert float(cal[name]["ECE"]) == pytest.approx(c["ece"], abs=5e-5)


def test_report_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path)
