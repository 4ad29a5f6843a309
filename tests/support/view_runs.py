"""Runs for the viewer's tests, built by the real code paths: an ``r2v eval`` run, the evaluation of a miniature
``r2v pipeline`` run, and a bare runner directory whose observations and agent replies carry HTML."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

from r2v_agents.policy import Candidate, Decision

SCRIPT = "<script>alert(1)</script>"
IMG = '<img src=x onerror="alert(2)">'
SCRIPTED_TASKS = ("scripted-0", "scripted-1", "scripted-2")
NEEDS_HUMANEVAL = pytest.mark.skipif(not os.environ.get("HUMANEVAL_OVERRIDE_PATH"),
                                     reason="HUMANEVAL_OVERRIDE_PATH not set (see scripts/test.sh)")


class InjectHTML(gym.Wrapper):
    """Appends markup to every observation (a hostile web page or tool output, as an agent may meet)."""

    def reset(self, **kw):
        obs, info = self.env.reset(**kw)
        return f"{obs}\n{SCRIPT}", info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        return f"{obs}\n{IMG} </pre></script><!--", r, term, trunc, info


def html_agent(obs, info):
    """Plays the scripted env's expert-like moves, but its reply (and one candidate) is markup."""
    actions = info.get("admissible_actions") or ["look"]
    action = "take coin" if "take coin" in actions else "go east" if "go east" in actions else actions[0]
    return Decision(action=action, source="slm", router_prob=0.7,
                    candidates=[Candidate(action, -0.1, token_entropies=(0.2, 0.4), verifier_score=0.9),
                                Candidate(IMG, -2.5, token_entropies=(1.0, 1.5), verifier_score=0.1)],
                    meta={"raw": f"{SCRIPT} I will {action}", "threshold": 0.5})


def eval_run(out):
    """``r2v eval`` of a callable agent on the scripted env: two perturbation settings x 3 tasks x 2 seeds."""
    from r2v_eval.cli import EvalArgs, evaluate

    args = EvalArgs(agent="r2v_eval.agents:first_admissible", out=str(out), envs=("R2V/Scripted-v0",),
                    perturbations=("none", "composite"), seeds=(0, 1), task_ids=SCRIPTED_TASKS, max_steps=8,
                    bootstrap=200, progress=False)
    return evaluate(args)


def html_runner_run(out):
    """A bare runner directory of :func:`html_agent` on the scripted env under :class:`InjectHTML`."""
    from r2v_agents.runner import RunConfig, run

    cfg = RunConfig("R2V/Scripted-v0", str(out), task_ids=SCRIPTED_TASKS[:2], seeds=(0,),
                    env_kwargs={"perturbations": "injection"}, max_steps=6,
                    wrappers=("tests.support.view_runs:InjectHTML",), progress=False)
    return run(html_agent, cfg, policy_name="html-agent")


def pipeline_run(tmp, template):
    """The evaluation part of a miniature ``r2v pipeline`` run in ``tmp``: the six methods under two conditions
    (``eval/results.json``, ``eval/runs/<condition>/<method>``), a heuristic sweep, ``report.md`` and its PNGs."""
    from r2v_train.evaluation.methods import evaluate
    from r2v_train.evaluation.report import write_report
    from tests.support.eval_runs import copy_trained_run, eval_config, make_agents

    router, _, valid, _ = copy_trained_run(template, tmp)
    results = evaluate(make_agents(tmp, router, valid), eval_config(heuristic_sweep=(0.2,)), tmp / "eval")
    write_report(tmp, extra={"note": "miniature"})
    return results


VERDICT_ENVS = {"R2V/TerminalBench-v0": {"backend": "local", "perturbations": None},
                "R2V/HumanEval-v0": {"perturbations": "composite"}}


def verdict_run(out, env_id):
    """A runner directory of the env's oracle on its first task: an episode that ends in the benchmark's verdict
    (Terminal-Bench's judge outcome, HumanEval+'s EvalPlus verdict). HumanEval+ needs HUMANEVAL_OVERRIDE_PATH."""
    import r2v_envs  # noqa: F401 - registers the envs
    from r2v_agents.runner import RunConfig, run
    from r2v_agents.teachers import OracleTeacher

    env = gym.make(env_id, seed=0, **VERDICT_ENVS[env_id])
    try:
        task = env.unwrapped.task_ids("all")[0]
    finally:
        env.close()
    cfg = RunConfig(env_id, str(out), task_ids=(task,), seeds=(0,), split="all", env_kwargs=VERDICT_ENVS[env_id],
                    progress=False)
    return run(OracleTeacher(), cfg, policy_name="oracle")
