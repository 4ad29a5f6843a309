"""The report: every artifact written, and its numbers match the shards they were computed from."""

import pytest

from r2v_train.evaluate import evaluate
from r2v_train.report import write_report
from tests.eval_fixtures import assert_report_matches_shards, eval_config, make_agents, trained_run


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
    assert_report_matches_shards(path, results, tmp / "eval")


def test_report_without_results_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_report(tmp_path)
