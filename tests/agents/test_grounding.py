"""The grounding chain on replies that chat models gave on each benchmark, the invalid-action rule, and the
banner-free TextWorld prompt."""

from __future__ import annotations

import pytest

from r2v_agents.context import Context
from r2v_agents.grounding import DEFAULT_THRESHOLD, GROUNDING_KINDS, Grounded, ground, is_invalid, normalise
from r2v_agents.prompts import PromptConfig, build_prompt, drop_banner

TW_START = ["go south", "inventory", "look"]
TW_KITCHEN = ["cook carrot with BBQ", "drop carrot", "eat carrot", "examine BBQ", "go west", "inventory", "look",
              "open screen door", "put carrot on patio table"]
ALF = ["go to cabinet 1", "go to countertop 1", "go to sinkbasin 1", "help", "inventory", "look",
       "take handtowel 1 from countertop 1"]

# (benchmark, reply, admissible, expected action, expected kind); replies as SmolLM2-135M-Instruct gave them
# (TextWorld / ALFWorld) or as chat models typically write them (code, shell).
CASES = [
    ("textworld", "go south", TW_START, "go south", "exact"),
    ("textworld", "`look`.", TW_START, "look", "exact"),
    ("textworld", "You're right! You should try going south.", TW_START, "go south", "normalised"),
    ("textworld", "Go South", TW_START, "go south", "normalised"),
    ("textworld", "I will open the screen door to get inside.", TW_KITCHEN, "open screen door", "normalised"),
    ("textworld", "Cook the carrot with the BBQ!", TW_KITCHEN, "cook carrot with BBQ", "normalised"),
    ("textworld", "Thought: the door is closed.\nAction: open screen door", TW_KITCHEN, "open screen door", "exact"),
    ("textworld", "go sooth", TW_START, "go south", "similar"),
    ("textworld", "Sure, I can help you with that.", TW_START, "Sure, I can help you with that", "raw"),
    ("textworld", "   \n ", TW_START, "", "empty"),
    ("alfworld", "go to countertop 1", ALF, "go to countertop 1", "exact"),
    ("alfworld", "You should go to the countertop 1 first.", ALF, "go to countertop 1", "normalised"),
    ("alfworld", "Take the handtowel 1 from the countertop 1", ALF, "take handtowel 1 from countertop 1",
     "normalised"),
    ("alfworld", "```\ngo to sinkbasin 1\n```", ALF, "go to sinkbasin 1", "exact"),
    ("humaneval", "submit", None, "submit", "exact"),
    ("humaneval", "write_code\n```python\nreturn x + y\n```", None, "write_code\n```python\nreturn x + y\n```",
     "exact"),
    ("humaneval", "Here is the function:\n\n```python\ndef add(x, y):\n    return x + y\n```\nIt adds them.", None,
     "write_code\n```python\ndef add(x, y):\n    return x + y\n```", "normalised"),
    ("humaneval", "Let me run the tests first.", None, "test", "normalised"),
    ("humaneval", "I am not sure what to do.", None, "I am not sure what to do.", "raw"),
    ("terminalbench", "run ls -la /app", None, "run ls -la /app", "exact"),
    ("terminalbench", "mark_task_complete", None, "mark_task_complete", "exact"),
    ("terminalbench", "Let's look at the files:\n```bash\nls -la /app\n```", None, "run ls -la /app", "normalised"),
    ("terminalbench", "First I count the words:\n$ wc -w input.txt", None, "run wc -w input.txt", "normalised"),
    ("terminalbench", "The task is done, I mark the task complete.", None, "mark_task_complete", "normalised"),
    ("terminalbench", "I don't know.", None, "I don't know", "raw"),
]


@pytest.mark.parametrize("bench,reply,admissible,action,kind", CASES)
def test_chain_grounds_real_replies(bench, reply, admissible, action, kind):
    g = ground(reply, admissible, bench)
    assert g == Grounded(action, kind)
    assert g.kind in GROUNDING_KINDS
    if kind in ("exact", "normalised", "similar"):
        assert is_invalid(g.action, admissible, bench) is False


def test_a_reply_that_matches_nothing_is_played_as_it_is_and_counted_invalid():
    reply = "The coin is probably somewhere in the north, maybe."
    g = ground(reply, TW_START, "textworld")
    assert g == Grounded("The coin is probably somewhere in the north, maybe", "raw")  # no silent best guess
    assert is_invalid(g.action, TW_START, "textworld") is True
    # below the threshold nothing is guessed, above it the closest action is taken
    assert ground("take apple", ["take coin"]).kind == "raw"
    assert ground("take coins", ["take coin"]).kind == "normalised"
    assert 0 < DEFAULT_THRESHOLD < 1


def test_longest_contained_action_wins_and_ties_go_to_the_earliest_mention():
    acts = ["go", "go south", "look"]
    assert ground("I think we should go south now", acts).action == "go south"
    assert ground("Look first, then go south", ["go south", "look"]).action == "go south"  # longest
    assert ground("Look around, or check the inventory", ["inventory", "look"]).action == "look"  # earliest
    assert normalise("the Apples!") == ("appl",)


def test_invalid_rule_per_benchmark():
    assert is_invalid("GO  SOUTH", TW_START, "textworld") is False
    assert is_invalid("go north", TW_START, "textworld") is True
    assert is_invalid("write_code", None, "humaneval") is True  # no code: the env explains what is missing
    assert is_invalid("test", None, "humaneval") is False
    assert is_invalid("ls", None, "terminalbench") is True
    assert is_invalid("anything", None, "scripted") is None  # cannot be told without a list or a syntax


def test_prompt_drops_the_textworld_banner(textworld_banner_obs):
    ctx = Context.start("Move south.", textworld_banner_obs, {"admissible_actions": TW_START})
    with_banner = build_prompt(ctx, PromptConfig())
    without = build_prompt(ctx, PromptConfig(drop_banner=True))
    assert "$$$$" in with_banner and "$$" not in without
    assert "-= Studio =-" in without and "Who's got a virtual machine" in without
    assert len(without) < len(with_banner) - 1000
    assert drop_banner("plain text\n$$ kept") == "plain text\n$$ kept"  # only a heading banner goes


@pytest.fixture
def textworld_banner_obs():
    """The first observation of a small-suite TextWorld game, as the env returns it."""
    pytest.importorskip("textworld")
    import gymnasium as gym

    import r2v_envs  # noqa: F401

    env = gym.make("R2V/TextWorld-v0", seed=0, suite="small", split="test", perturbations=None)
    try:
        obs, _ = env.reset(options={"task_id": "tw-coin_collector-easy-001"})
    finally:
        env.close()
    return obs
