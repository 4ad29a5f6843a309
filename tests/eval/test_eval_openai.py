"""``r2v eval --agent openai`` against a local OpenAI-compatible server backed by a real (tiny, trained) model that
also serves 429s, 500s, malformed JSON and a hang: the eval completes, retries are counted, episodes that could
not be run are excluded from SR, and the report matches the shards. Also ``hf:PATH`` on the same checkpoint."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # end to end: an OpenAI-compatible server and client

pytest.importorskip("openai")
pytest.importorskip("transformers")

from r2v_agents.shards import load_rows  # noqa: E402
from r2v_eval.agents import AgentOptions  # noqa: E402
from r2v_eval.cli import EvalArgs, evaluate  # noqa: E402
from r2v_eval.cells import attempt_dirs  # noqa: E402
from r2v_train.evaluation.report import parse_markdown_table  # noqa: E402
from tests.support.openai_server import ChatServer, train_scripted_chat_model  # noqa: E402

TASKS = tuple(f"scripted-{i}" for i in range(4))  # scripted-2's goal is the gem: the server always fails it
SEEDS = (0, 1)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return train_scripted_chat_model(str(tmp_path_factory.mktemp("chat-model")))


def _args(out, **kw):
    return EvalArgs(agent=kw.pop("agent", "openai"), out=str(out), envs=("R2V/Scripted-v0",),
                    perturbations=("none", "flaky"), seeds=SEEDS, task_ids=TASKS, max_steps=8, bootstrap=200,
                    retry_backoff_s=0.0, progress=False, **kw)


def _last_attempts(cell):
    """episode_id -> episode row of the attempt that counts, read straight from the shards."""
    rows = {}
    for d in attempt_dirs(cell):
        rows.update({r["episode_id"]: r for r in load_rows(d, "episodes")})
    return rows


def test_openai_agent_with_faults_completes_counts_retries_and_excludes_infra(model_dir, tmp_path):
    out = tmp_path / "eval"
    opts = AgentOptions(model="tiny-scripted", base_url=None, timeout_s=1.0, max_retries=3, backoff_s=0.01,
                        max_tokens=6, concurrency=4, grounding="off")  # the weak model's luck is pinned as played
    with ChatServer(model_dir, hang_s=3.0, always_fail="Find the gem") as server:
        opts.base_url = server.base_url
        results = evaluate(_args(out, options=opts))
    served = server.served
    assert served["429"] and served["500"] and served["malformed"] and served["hang"] == 1, served

    cells = {c["perturbation"]: c for c in results["cells"]}
    assert set(cells) == {"none", "flaky"}
    for name, c in cells.items():
        eps = _last_attempts(out / c["run_dir"])
        assert len(eps) == len(TASKS) * len(SEEDS) == c["episodes"]
        not_run = {k for k, e in eps.items() if e["error"] is not None}
        # exactly the gem episodes could not be run: typed, counted, rerun once by the retry pass
        assert not_run == {f"scripted-2@{z}" for z in SEEDS}
        assert all(eps[k]["error"].startswith("infra:server_error: 4 attempts; ") for k in not_run)
        assert c["not_run"] == 2 and c["not_run_by_kind"] == {"infra:server_error": 2}
        assert c["episode_reruns"] == 2 and c["scored"] == 6
        # excluded from SR, not scored as losses: SR = successes / the 6 episodes that ran
        ran = [e for e in eps.values() if e["error"] is None]
        assert c["sr"] == pytest.approx(100 * np.mean([e["success"] for e in ran]))
        assert c["mean_tokens"] > 0 and c["mean_latency_s"] > 0
    assert cells["none"]["sr"] > 0, "the trained model should win some clean episodes"
    # every faulted request of an episode that ran was retried and counted in its step meta
    retried = sum(c["request_retries"] for c in cells.values())
    assert retried >= served["429"] + served["malformed"] + served["hang"]

    # the report matches the shards
    text = (out / "report.md").read_text()
    table = {r["perturbation"]: r for r in parse_markdown_table(text, "## SR by benchmark and perturbation")}
    for name, c in cells.items():
        eps = [e for e in _last_attempts(out / c["run_dir"]).values() if e["error"] is None]
        assert float(table[name]["SR (%)"]) == pytest.approx(100 * np.mean([e["success"] for e in eps]), abs=0.05)
        assert int(table[name]["episodes"]) == len(eps)
        assert table[name]["not run"].startswith("2 (infra:server_error 2)")
        lo, hi = (float(x) for x in table[name]["SR 95% CI"].strip("[]").split(","))
        assert lo <= float(table[name]["SR (%)"]) <= hi
    assert json.loads((out / "results.json").read_text())["cells"] == results["cells"]
    assert (out / "sr_by_perturbation.png").stat().st_size > 1000

    # a rerun resumes: nothing is sent to the (now stopped) server
    again = evaluate(_args(out, options=opts))
    assert again["cells"] == results["cells"]


def test_hf_agent_runs_a_local_checkpoint_through_its_chat_template(model_dir, tmp_path):
    opts = AgentOptions(max_tokens=6, grounding="off")
    results = evaluate(_args(tmp_path / "hf", agent=f"hf:{model_dir}", options=opts))
    clean = next(c for c in results["cells"] if c["perturbation"] == "none")
    assert clean["not_run"] == 0 and clean["scored"] == 8 and clean["sr"] > 0
    steps = load_rows(tmp_path / "hf" / clean["run_dir"], "steps")
    assert {s["action"] for s in steps} & {"go east", "take coin", "take key", "take gem", "take map"}
