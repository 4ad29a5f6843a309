"""Shared fixtures of the evaluation/report/ablation tests: a real runner on the scripted env, with a noisy
stand-in sampler in place of a language model (the unit under test is the evaluation layer, not the SLM)."""

from __future__ import annotations

import zlib

import numpy as np

from r2v_agents.policy import Candidate
from r2v_eval.results import main_table

ACTIONS = ("go east", "go west", "look", "take coin", "take key", "take gem", "take map")


class NoisySampler:
    """K candidates per prompt drawn from a fixed action set, seeded by the prompt: reproducible, sometimes
    fatal ("go west" in room 0 loses), with token entropies that vary with the draw."""

    def __init__(self, p_good: float = 0.75):
        self.p_good = p_good

    def sample(self, prompts, k):
        out = []
        for prompt in prompts:
            rng = np.random.default_rng(zlib.crc32(prompt.encode()))
            cands = []
            last = prompt.rsplit("Observation:", 1)[-1]  # read only the latest observation, as a weak model would
            for _ in range(k):
                a = ACTIONS[int(rng.integers(len(ACTIONS)))] if rng.random() > self.p_good else \
                    ("go east" if "exit to the east" in last else
                     "take " + next((w for w in ("coin", "key", "gem", "map") if f"a {w} on" in last), "coin"))
                h = float(rng.uniform(0.05, 2.0))
                cands.append(Candidate(a, -h, token_logprobs=(-h, -h / 2), token_entropies=(h, h)))
            out.append(cands)
        return out


def make_agents(tmp, router_path=None, valid_dir=None):
    from r2v_agents.slm import SLMPolicy
    from r2v_agents.teachers import OracleTeacher
    from r2v_agents.verifiers.textworld import TextWorldVerifier
    from r2v_train.evaluation.methods import Agents

    return Agents(slm=lambda: SLMPolicy(NoisySampler(), TextWorldVerifier(), k=3), teacher=OracleTeacher,
                  router_path=router_path, valid_router_dir=valid_dir)


def slm_rollouts(out_dir, split, tasks, seeds=(0, 1)):
    """SLM-only rollouts (router rows) of the scripted env's ``split``."""
    from r2v_agents.runner import RunConfig, run
    from r2v_agents.slm import SLMPolicy
    from r2v_agents.verifiers.textworld import TextWorldVerifier

    cfg = RunConfig("R2V/Scripted-v0", str(out_dir), task_ids=tuple(tasks), seeds=tuple(seeds), split=split,
                    env_kwargs={"perturbations": "composite"}, max_steps=10, progress=False)
    run(SLMPolicy(NoisySampler(), TextWorldVerifier(), k=3), cfg, policy_name="slm")
    return str(out_dir)


SCRIPTED_TRAIN = [f"scripted-{i}" for i in range(0, 16)]
SCRIPTED_VALID = [f"scripted-{i}" for i in range(20, 28)]


def eval_config(**kw):
    from r2v_train.evaluation.methods import EvalConfig

    base = dict(env_id="R2V/Scripted-v0", seeds=(0, 1), per_type=("flaky",), max_steps=10, bootstrap=300,
                progress=False)
    return EvalConfig(**{**base, **kw})


def router_config():
    from r2v_train.router.config import RouterTrainConfig

    return RouterTrainConfig(epochs=10, batch_size=64, progress=False, hidden=(16, 8), mode="brier", kappa=4.0)


def trained_run(tmp):
    """A miniature run directory: SLM-only router data (train/valid) and a small trained router."""
    from r2v_agents.router_mlp import save_router
    from r2v_train.router.config import ROUTER_FILE
    from r2v_train.router.data import RouterData
    from r2v_train.router.train import train_router

    train = slm_rollouts(f"{tmp}/router_data/train", "train", SCRIPTED_TRAIN)
    valid = slm_rollouts(f"{tmp}/router_data/valid", "valid", SCRIPTED_VALID)
    cfg = router_config()
    res = train_router(RouterData.from_run(train), RouterData.from_run(valid), cfg, run_dir=f"{tmp}/router")
    assert res.threshold is not None and ROUTER_FILE and save_router
    return f"{tmp}/router/{ROUTER_FILE}", train, valid, cfg


def copy_trained_run(template, tmp):
    """:func:`trained_run`'s result in ``tmp``, copied from a finished ``template`` directory (the session-scoped
    ``trained_run_template`` fixture of tests/conftest.py) instead of recomputed: the rollouts and the router
    are deterministic, so every module gets the same files, and each gets its own copy to write beside."""
    import shutil

    from r2v_train.router.config import ROUTER_FILE

    for part in ("router_data", "router"):
        shutil.copytree(f"{template}/{part}", f"{tmp}/{part}")
    return f"{tmp}/router/{ROUTER_FILE}", f"{tmp}/router_data/train", f"{tmp}/router_data/valid", router_config()


def assert_report_matches_shards(report_path, results, eval_dir):
    """Table 1 and the calibration table of a report agree with the evaluation's episode and step shards."""
    import pytest

    from r2v_agents.shards import load_rows
    from r2v_train.evaluation.methods import METHOD_LABELS
    from r2v_train.evaluation.report import parse_markdown_table

    text = report_path.read_text()
    rows = {r["method"]: r for r in parse_markdown_table(text, "## Table 1")}
    by_label = {v: k for k, v in METHOD_LABELS.items()}
    assert {by_label[m] for m in rows} == set(results["methods"])
    for label, row in rows.items():
        run_dir = eval_dir / main_table(results)[by_label[label]]["run_dir"]
        eps = load_rows(run_dir, "episodes", columns=["success"])
        steps = load_rows(run_dir, "steps", columns=["source"])
        assert eps and steps
        # 0.0501, not 0.05: a value halfway between two printed decimals (56.25 -> "56.2") is 0.05 off in exact
        # arithmetic, a hair more in float
        assert float(row["SR (%)"]) == pytest.approx(100 * np.mean([e["success"] for e in eps]), abs=0.0501)
        teacher = sum(s["source"] in ("teacher", "oracle") for s in steps)
        assert float(row["LLM%"]) == pytest.approx(100 * teacher / len(steps), abs=0.0501)
        lo, hi = (float(x) for x in row["SR 95% CI"].strip("[]").split(","))
        assert lo <= float(row["SR (%)"]) <= hi
    def outcome(label):  # episode_id -> (success, steps, teacher steps) from the step shards alone
        run_dir = eval_dir / main_table(results)[by_label[label]]["run_dir"]
        out = {}
        for s in load_rows(run_dir, "steps", columns=["episode_id", "source"]):
            ok, n, t = out.get(s["episode_id"], (0.0, 0, 0))
            out[s["episode_id"]] = (ok, n + 1, t + (s["source"] in ("teacher", "oracle")))
        for e in load_rows(run_dir, "episodes", columns=["episode_id", "success"]):
            out[e["episode_id"]] = (float(e["success"]), *out[e["episode_id"]][1:])
        return out

    paired = {r["R2V minus"]: r for r in parse_markdown_table(text, "R2V against each method")}
    assert {by_label[m] for m in paired} == set(results["methods"]) - {"r2v"}
    mine = outcome("R2V")
    for label, row in paired.items():
        other = outcome(label)
        assert set(other) == set(mine)
        sr = 100 * np.mean([mine[k][0] - other[k][0] for k in mine])
        llm = 100 * (sum(v[2] for v in mine.values()) / sum(v[1] for v in mine.values())
                     - sum(v[2] for v in other.values()) / sum(v[1] for v in other.values()))
        assert float(row["SR (points)"]) == pytest.approx(sr, abs=0.0501)
        assert float(row["LLM% (points)"]) == pytest.approx(llm, abs=0.0501)
        lo, hi = (float(x) for x in row["LLM% 95% CI"].strip("[]").split(","))
        assert lo <= float(row["LLM% (points)"]) <= hi
    cal = {r["router"]: r for r in parse_markdown_table(text, "## Router calibration")}
    for name, c in results["calibration"].items():
        assert float(cal[name]["ECE"]) == pytest.approx(c["ece"], abs=5e-5)
