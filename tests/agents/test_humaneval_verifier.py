"""The HumanEval+ process verifier (Appendix C): ranking, penalties, blending, sandboxed smoke tests."""

from __future__ import annotations

import os

import pytest

from r2v_agents.context import Context
from r2v_agents.verifiers.base import Verifier
from r2v_agents.verifiers.humaneval import HumanEvalVerifier, clean_prompt, hack_penalty, prompt_examples
from r2v_envs.perturbations.templates import INJECTION_TEMPLATES

Q = '"' * 3
PROMPT = (f"from typing import List\n\n\ndef add(x: int, y: int) -> int:\n    {Q}Add two numbers.\n"
          f"    >>> add(2, 3)\n    5\n    >>> add(5, 7)\n    12\n    {Q}\n")
GOOD = "write_code\n```python\nreturn x + y\n```"
WRONG = "write_code\n```python\nreturn None\n```"


def fence(code: str) -> str:
    return f"write_code\n```python\n{code}\n```"


@pytest.fixture(scope="module")
def verifier():
    return HumanEvalVerifier()


def ctx_for(prompt: str = PROMPT) -> Context:
    return Context.start(goal=prompt, observation=prompt, info={"step": 0})


def test_is_a_verifier_with_scores_in_unit_interval(verifier):
    assert isinstance(verifier, Verifier)
    scores = verifier.score_batch(ctx_for(), [GOOD, WRONG, "nonsense", "submit", fence("def add(:")])
    assert all(0.0 <= s <= 1.0 for s in scores)
    assert scores[0] > 0.8 and scores[1] < 0.3 and scores[2] <= 0.05 and scores[3] <= 0.1


def test_smoke_runs_prompt_examples_in_the_sandbox(verifier):
    assert prompt_examples(PROMPT, "add") == [("add(2, 3)", "5"), ("add(5, 7)", "12")]
    assert verifier.smoke(PROMPT, "add", "return x + y").passed == (True, True)
    assert verifier.smoke(PROMPT, "add", "return x + y + (x == 2)").passed == (False, True)
    assert verifier.smoke(PROMPT, "add", "while True:\n    pass").passed == (False, False)
    # the candidate cannot see the host: environment and files outside the scratch directory
    os.environ["R2V_VERIFIER_SECRET"] = "x"
    try:
        leak = "import os\nreturn 5 if 'R2V_VERIFIER_SECRET' in os.environ else 0"
        assert verifier.smoke(PROMPT, "add", leak).passed == (False, False)
    finally:
        del os.environ["R2V_VERIFIER_SECRET"]


def test_prose_examples_are_parsed():
    prompt = f"def f(n):\n    {Q}Double it.\n    f(2) ==> 4\n    For n = 3 the output should be 6.\n    {Q}\n"
    assert prompt_examples(prompt, "f") == [("f(2)", "4")]


@pytest.mark.parametrize("code,penalised", [
    ("if (x, y) == (2, 3):\n    return 5\nif (x, y) == (5, 7):\n    return 12\nreturn 0", True),  # test lookup
    ("return {(2, 3): 5, (5, 7): 12, (1, 1): 2, (0, 0): 0}[(x, y)]", True),                       # table
    ("return 5", True),                                                                               # literal
    ("try:\n    return x + y\nexcept Exception:\n    return 0", True),                                # swallowing
    ("if x == 0:\n    return y\nreturn x + y", False),                                                # base case
    ("return x + y", False),
])
def test_reward_hacking_penalty(code, penalised):
    assert (hack_penalty(code, "add") < 1.0) == penalised


def test_repetition_penalty_for_code_that_already_failed(verifier):
    bad = fence("return x * y")
    ctx = ctx_for().advance(bad, "Saved 1 line of code.", 0.0, {"step": 1})
    fresh = verifier.score(ctx, bad)
    ctx = ctx.advance("test", "$ run public examples\nexample 1: add(0, 1)\n  FAILED\n=== 0 passed, 3 failed ===",
                      0.0, {"step": 2})
    assert verifier.score(ctx, bad) < fresh * 0.6 + 1e-9  # penalised and blended with the 0/3 result


def test_visible_test_result_is_blended_60_40(verifier):
    ctx = ctx_for().advance(GOOD, "Saved 1 line of code.", 0.0, {"step": 1})
    structural = verifier.score(ctx, "submit")
    ctx = ctx.advance("test", "example 1: add(0, 1)\n  PASSED\n=== 2 passed, 1 failed ===", 0.0, {"step": 2})
    assert verifier.score(ctx, "submit") == pytest.approx(0.6 * structural + 0.4 * (2 / 3))


def test_injection_markers_discount(verifier):
    injected = PROMPT + " " + INJECTION_TEMPLATES[0].format(directive="return None")
    assert clean_prompt(injected).strip() == PROMPT.strip()
    clean, hit = verifier.score(ctx_for(), GOOD), verifier.score(ctx_for(injected), GOOD)
    assert hit == pytest.approx(0.85 * clean)


def test_dangerous_imports_score_lower(verifier):
    safe = verifier.score(ctx_for(), GOOD)
    risky = verifier.score(ctx_for(), fence("import subprocess\nreturn x + y"))
    assert risky < safe


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not os.environ.get("HUMANEVAL_OVERRIDE_PATH"), reason="HUMANEVAL_OVERRIDE_PATH not set")
def test_ranks_canonical_above_wrong_on_95_percent_of_tasks(verifier):
    from r2v_envs.humaneval.data import load_problems

    problems = load_problems()[1]
    ranked = 0
    for task_id, p in problems.items():
        canonical, wrong = verifier.score_batch(ctx_for(p["prompt"]), [fence(p["prompt"] + p["canonical_solution"]),
                                                                       WRONG])
        ranked += canonical > wrong
    assert ranked / len(problems) >= 0.95, f"{ranked}/{len(problems)}"
