"""R2V/HumanEval-v0: the 164 HumanEval+ tasks as a multi-step ``write_code`` / ``test`` / ``submit`` env.

Sec. 5.1 and Appendix D of the paper. At reset the agent sees the task prompt (signature + docstring, also
``info["goal"]``) and the action syntax (:mod:`r2v_envs.humaneval.actions`). ``test`` shows the test runner's
output on the task's *public examples*: the first ``n_public`` inputs of the original HumanEval tests, with
the expected values, within ``test_budget_s`` seconds of wall time (EvalPlus' per-input limits still apply;
the observation says when the budget cut a run short). ``submit`` judges the code with EvalPlus' own evaluation code on the full HumanEval+
suite (base + plus inputs, compared with the canonical solution's outputs under EvalPlus' tolerance rules)
and ends the episode: reward 1 and ``won`` if it passes, else 0. ``submit`` has a whole-task wall-time budget
of 4 s + 4 x the canonical solution's total ground-truth time (capped at EvalPlus' own 126 s;
``judge_server.submit_budget``): every program that finishes within it gets EvalPlus' verdict, one that does
not gets ``timeout`` (``info["verdict"]["budget_hit"]``), so a looping program costs seconds, not a minute.
``info["step_wall_s"]`` is the wall time of a step that ran code (``test``, ``submit``). Other steps and resets leave it
out: they are pure functions of the seed and the action, and Gymnasium's ``check_env`` asks identical infos of them.

Model code only ever runs in the sandboxed judge (:mod:`r2v_envs.sandbox`); ``info["sandbox"]`` names the
isolation level in use. Channels: the reset prompt is ``"observation"`` (prompt injection reaches the
docstring through the ``goal``/``observation`` channels); runner output and verdicts are ``"tool_output"``;
acknowledgements and syntax feedback are ``"observation"``. ``info["admissible_actions"]`` holds the three
action templates (code left as a placeholder). ``info["expert_action"]`` follows the canonical solution:
write it, test it, submit it.

Example:
    >>> import os, gymnasium as gym, r2v_envs
    >>> if not os.environ.get("HUMANEVAL_OVERRIDE_PATH"):
    ...     import pytest; pytest.skip("needs HUMANEVAL_OVERRIDE_PATH")
    >>> env = gym.make("R2V/HumanEval-v0", seed=0, perturbations=None, task_id="HumanEval/53")
    >>> obs, info = env.reset()
    >>> info["goal"] in obs, info["channel"]
    (True, 'observation')
    >>> obs, reward, terminated, truncated, info = env.step("write_code\\n```python\\nreturn x + y\\n```")
    >>> obs, *_ = env.step("test"); print(obs.splitlines()[-1])
    === 3 passed, 0 failed ===
    >>> obs, reward, terminated, truncated, info = env.step("submit")
    >>> reward, terminated, info["won"]
    (1.0, True, True)
    >>> env.close()
"""

from __future__ import annotations

import os
import time
from typing import Any

from r2v_envs.core import TextEnv, build_env
from r2v_envs.humaneval.actions import ACTION_TEMPLATES, SYNTAX_HELP, assemble_solution, parse_action
from r2v_envs.humaneval.data import ensure_task_files, load_problems
from r2v_envs.humaneval.judge import Judge, JudgeError
from r2v_envs.sandbox import Sandbox, available_isolations

DEFAULT_N_PUBLIC = 3
# The wall-time budget of one `test`. EvalPlus' per-input limit is max(1 s, 4 x the reference time), and the
# three public inputs of every HumanEval+ task take the canonical solution milliseconds, so an honest program
# needs about a second at most; without this budget, a program that loops where EvalPlus' SIGALRM cannot
# reach it (a C-level loop, or one that swallows the timeout exception) held `test` for 11 s here, twice
# the sum of the per-input limits plus EvalPlus' margins.
DEFAULT_TEST_BUDGET_S = 5.0  # + 1 s of grace to judge the examples that returned (judge_server.CHECK_GRACE_S)


class HumanEvalEnv(TextEnv):
    """HumanEval+ as a text env (see the module doc).

    Args:
        data_path: a HumanEval+ release file; default ``$HUMANEVAL_OVERRIDE_PATH`` or EvalPlus' download.
        n_public: how many of the original HumanEval test inputs ``test`` shows (the public examples).
        isolation: sandbox level for model code (``"auto"``: the strongest this host offers).
        test_budget_s: wall-clock seconds one ``test`` may take in all (``submit`` has its own per-task budget).
    """

    benchmark = "humaneval"
    perturbation_profile = "code"
    default_perturbations = "composite"

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None, data_path: str | None = None,
                 n_public: int = DEFAULT_N_PUBLIC, isolation: str = "auto",
                 test_budget_s: float = DEFAULT_TEST_BUDGET_S):
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        if int(n_public) < 1:
            raise ValueError(f"n_public must be >= 1, got {n_public}")
        self.data_path = data_path
        self.n_public = int(n_public)
        if not float(test_budget_s) > 0:
            raise ValueError(f"test_budget_s must be > 0, got {test_budget_s}")
        self.test_budget_s = float(test_budget_s)
        self.isolation = isolation if isolation != "auto" else available_isolations()[0]
        Sandbox(self.isolation)  # fail now (typed error) on an unknown or unavailable level
        self._judge = None
        self._problem: dict[str, Any] = {}
        self._task_file = ""
        self._code: str | None = None
        self._tested: str | None = None
        self._done = False

    # ----------------------------------------------------------------------------------------- tasks
    def _task_ids(self) -> list[str]:
        return list(load_problems(self.data_path)[1])

    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        self._problem = load_problems(self.data_path)[1][task_id]
        self._task_file = ensure_task_files([task_id], self.data_path)[task_id]
        self._code = self._tested = None
        self._done = False
        prompt = self._problem["prompt"]
        obs = (f"Task {task_id}: complete the Python function `{self._problem['entry_point']}` below.\n\n"
               f"{prompt}\n{SYNTAX_HELP}")
        return obs, self._info(goal=prompt, channel="observation")

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        start = time.monotonic()
        obs, reward, terminated, info = self._act(action)
        if info.get("channel") == "tool_output":  # the step ran code in the judge: its time is the agent's cost
            info["step_wall_s"] = _since(start)
        return obs, reward, terminated, info

    def _act(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._done:
            return "The episode is over: reset to start a new task.", 0.0, True, self._info()
        act = parse_action(action)
        if act.command is None:
            return f"Unrecognised action.\n{SYNTAX_HELP}", 0.0, False, self._info()
        if act.command == "write_code" and act.code is None:
            return f"write_code needs code, e.g. in a fenced block.\n{SYNTAX_HELP}", 0.0, False, self._info()
        if act.code is not None:
            self._code = act.code
        if act.command == "write_code":
            n = len(act.code.splitlines())
            obs = f"Saved {n} line{'s' * (n != 1)} of code. Next: `test` to run the public examples, or `submit`."
            return obs, 0.0, False, self._info()
        if self._code is None:
            return f"No code saved yet: use write_code first.\n{SYNTAX_HELP}", 0.0, False, self._info()
        if act.command == "test":
            self._tested = self._code
            return self._run_public_tests(), 0.0, False, self._info(channel="tool_output")
        return self._submit()

    # ---------------------------------------------------------------------------------------- judging
    def _solution(self) -> str:
        return assemble_solution(self._problem["prompt"], self._problem["entry_point"], self._code or "")

    def _request(self, mode: str, **extra: Any) -> dict[str, Any]:
        if self._judge is None:
            self._judge = Judge(os.path.dirname(self._task_file), isolation=self.isolation)
        return self._judge.request(mode, self._task_file, self._solution(), **extra)

    def _run_public_tests(self) -> str:
        try:
            resp = self._request("smoke", n_public=self.n_public, budget_s=self.test_budget_s)
        except JudgeError as exc:
            return f"[runner error] the test runner failed: {exc}. Try again."
        return format_test_report(self._problem["entry_point"], resp["examples"],
                                  budget_s=self.test_budget_s if resp.get("budget_hit") else None)

    def _submit(self) -> tuple[str, float, bool, dict[str, Any]]:
        self._done = True
        try:
            verdict = self._request("full")
        except JudgeError as exc:  # the candidate broke the judge itself: EvalPlus counts that as a failure
            verdict = {"error": str(exc)}
        verdict["evalplus_patches"] = list(self._judge.patches) if self._judge is not None else []
        won = verdict.get("base", {}).get("status") == "pass" and verdict.get("plus", {}).get("status") == "pass"
        info = self._info(channel="tool_output", won=won, lost=not won, score=float(won), verdict=verdict)
        return format_verdict(verdict, won), float(won), True, info

    # ------------------------------------------------------------------------------------------ info
    def _expert(self) -> str | None:
        if self._done or not self._problem:
            return None
        canonical = (self._problem["prompt"] + self._problem["canonical_solution"]).strip("\n")
        write = f"write_code\n```python\n{canonical}\n```"
        if self._code != parse_action(write).code:  # compare as the env will store it (whitespace-normalised)
            return write
        return "test" if self._tested != self._code else "submit"

    def _info(self, **extra: Any) -> dict[str, Any]:
        info = {"admissible_actions": list(ACTION_TEMPLATES), "expert_action": self._expert(),
                "sandbox": self.isolation, "entry_point": self._problem.get("entry_point")}
        info.update(extra)
        return info

    def close(self) -> None:
        if self._judge is not None:
            self._judge.close()
            self._judge = None
        super().close()


def _since(start: float) -> float:
    return round(time.monotonic() - start, 4)


def format_test_report(entry_point: str, examples: list[dict[str, Any]], budget_s: float | None = None) -> str:
    """The test runner's output for the public examples (one block per example, a summary line last);
    ``budget_s`` when the run hit the budget of ``test``."""
    lines = [f"$ run public examples for {entry_point} ({len(examples)})"]
    if examples and examples[0]["kind"] == "load":
        lines.append(f"error while loading your code: {examples[0]['got']}")
    passed = 0
    for i, ex in enumerate(examples, 1):
        passed += ex["passed"]
        lines.append(f"example {i}: {ex['call']}")
        lines.append(f"  expected: {ex['expected']}")
        got = {"ok": ex["got"], "raise": f"raised {ex['got']}", "load": "(not run: the code failed to load)"
               }.get(ex["kind"], f"({ex['got']})")
        lines.append(f"  got:      {got}")
        lines.append("  PASSED" if ex["passed"] else "  FAILED")
    if budget_s is not None:
        lines.append(f"[time budget] `test` stops after {budget_s:g} s of wall time; the examples it did not "
                     "finish count as failed (`submit` judges every input under EvalPlus' own time limits).")
    lines.append(f"=== {passed} passed, {len(examples) - passed} failed ===")
    return "\n".join(lines)


def format_verdict(verdict: dict[str, Any], won: bool) -> str:
    if "error" in verdict:
        return f"Submission rejected: the judge failed while running your code ({verdict['error']})."
    base, plus = verdict["base"], verdict["plus"]
    if won:
        return (f"Submission accepted: passed all {base['n']} base tests and {plus['n']} HumanEval+ tests.\n"
                "*** Task solved ***")
    budget = (f"[time budget] `submit` stops after {verdict['budget_s']:g} s of wall time for this task; your "
              "program did not finish within it.\n") if verdict.get("budget_hit") else ""
    return (f"Submission rejected.\nbase tests ({base['n']}): {base['status']}\n"
            f"HumanEval+ tests ({plus['n']}): {plus['status']}\n{budget}*** Task failed ***")


def make(**kwargs: Any):
    """Entry point of ``R2V/HumanEval-v0`` (see :func:`r2v_envs.core.build_env`)."""

    return build_env(HumanEvalEnv, **kwargs)
