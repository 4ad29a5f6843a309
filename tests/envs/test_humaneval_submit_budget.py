"""R2V/HumanEval-v0's `submit` under its whole-task budget: a program that never terminates costs seconds and
gets `timeout`; a correct program keeps EvalPlus' verdict."""

from __future__ import annotations

import os
import time

import pytest

pytestmark = pytest.mark.skipif(not os.environ.get("HUMANEVAL_OVERRIDE_PATH"), reason="needs HUMANEVAL_OVERRIDE_PATH")

TASK = "HumanEval/53"  # add(x, y)
# Loops at import and in the entry point, in C (sum over an endless iterator): EvalPlus' SIGALRM cannot stop it.
NEVER_ENDS = "import itertools\nsum(itertools.count())\n\ndef add(x, y):\n    return sum(itertools.count())"


def _env():
    import gymnasium as gym

    import r2v_envs  # noqa: F401

    return gym.make("R2V/HumanEval-v0", seed=0, perturbations=None, task_id=TASK)


def test_test_and_submit_of_a_program_that_never_terminates_take_seconds():
    env = _env()
    try:
        env.reset()
        env.step(f"write_code\n```python\n{NEVER_ENDS}\n```")
        start = time.monotonic()
        env.step("test")
        obs, reward, terminated, _, info = env.step("submit")
        elapsed = time.monotonic() - start
    finally:
        env.close()
    assert elapsed <= 15.0, elapsed
    assert terminated and reward == 0.0 and not info["won"]
    v = info["verdict"]
    assert v["budget_hit"] and v["base"]["status"] == "timeout" and v["plus"]["status"] == "timeout"
    assert "[time budget]" in obs and "timeout" in obs


def test_a_correct_program_keeps_evalplus_verdict_within_the_budget():
    env = _env()
    try:
        env.reset()
        env.step("write_code\n```python\nreturn x + y\n```")
        _, reward, _, _, info = env.step("submit")
    finally:
        env.close()
    v = info["verdict"]
    assert reward == 1.0 and info["won"] and not v["budget_hit"]
    assert v["base"]["status"] == v["plus"]["status"] == "pass"
    assert 4.0 <= v["budget_s"] < 5.0  # the floor: this task's ground truth takes milliseconds


def test_budget_grows_with_the_ground_truth_time_and_is_capped():
    from r2v_envs.humaneval.judge_server import SUBMIT_CAP_S, SUBMIT_FACTOR, SUBMIT_FLOOR_S, submit_budget

    def rec(seconds):
        return {"expected": {"base_time": [seconds / 2], "plus_time": [seconds / 2]}}

    assert submit_budget(rec(0.0)) == SUBMIT_FLOOR_S
    assert submit_budget(rec(10.0)) == pytest.approx(SUBMIT_FLOOR_S + SUBMIT_FACTOR * 10.0)
    assert submit_budget(rec(1e6)) == SUBMIT_CAP_S
