"""The text-game verifier (Appendix C) on hand-built contexts; ALFWorld is a configuration of it."""

from __future__ import annotations

import pytest

from r2v_agents.context import Context
from r2v_agents.verifiers.alfworld import ALFWorldVerifier
from r2v_agents.verifiers.textworld import TEXTWORLD, GameVerifierConfig, TextWorldVerifier

V = TextWorldVerifier()
GOAL = "Take the red key from the table, then unlock the chest."


def play(goal: str, actions_obs: list[tuple[str, str]], first_obs: str = "You are in a kitchen.",
         admissible=None, reward=None) -> Context:
    ctx = Context.start(goal, first_obs, {"admissible_actions": admissible})
    for a, o in actions_obs:
        ctx = ctx.advance(a, o, reward, {"admissible_actions": admissible})
    return ctx


def test_signals_on_hand_built_context():
    ctx = play(GOAL, [("go east", "-= Kitchen =-\nYou see a table."), ("go west", "-= Hall =-")])
    sig = V.signals(ctx, "go east")
    assert sig["observation"] == 1.0                 # "-= " marks arriving in a room
    assert sig["action_prior"] == pytest.approx(0.55)
    assert sig["goal"] == 0.0                        # "east" is not a goal word
    assert sig["repetition"] == pytest.approx(0.5)   # once in the window
    assert sig["oscillation"] == 0.0                 # east, west, east: A-B-A
    assert V.score(ctx, "go east") == pytest.approx(.25 * 1 + .25 * .55 + 0 + .15 * .5 + 0)
    take = V.signals(ctx, "take red key from table")
    assert take["goal"] == 1.0 and take["repetition"] == 1.0 and take["oscillation"] == 1.0
    assert V.signals(ctx, "go north")["oscillation"] == 1.0
    assert play(GOAL, [("go west", "-= Hall =-")]).history and \
        V.signals(play(GOAL, [("go west", "-= Hall =-")]), "go east")["oscillation"] == pytest.approx(0.3)


def test_failed_action_repeated_scores_zero_repetition():
    ctx = play(GOAL, [("open chest", "You can't do that, the chest is locked.")])
    assert V.observation_quality(ctx) == 0.0
    assert V.non_repetition(ctx, "open chest") == 0.0
    assert V.non_repetition(ctx, "unlock chest with red key") == 1.0
    assert V.score(ctx, "unlock chest with red key") > V.score(ctx, "open chest")


def test_admissible_list_and_unknown_verbs():
    ctx = play(GOAL, [], admissible=["take red key from table", "look"])
    assert V.action_prior(ctx, "take red key from table") == pytest.approx(0.85)
    assert V.action_prior(ctx, "take blue key") == pytest.approx(0.85 * 0.25)
    assert V.action_prior(ctx, "xyzzy") == pytest.approx(0.1 * 0.25)


def test_reward_blend_and_range():
    base = play(GOAL, [("take red key from table", "You take the red key.")], reward=0.0)
    won = play(GOAL, [("take red key from table", "You take the red key.")], reward=1.0)
    raw = V.score(base, "unlock chest with red key")
    assert V.score(won, "unlock chest with red key") == pytest.approx(0.5 * raw + 0.5)
    for a in ["", "look", "take red key from table", "!!!", "go " * 50]:
        assert 0.0 <= V.score(won, a) <= 1.0


def test_alfworld_is_a_configuration():
    v = ALFWorldVerifier()
    ctx = play("Your task is to: heat some egg and put it in garbagecan.",
               [("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a egg 1.")])
    assert v.split_action("take egg 1 from countertop 1") == ("take", ["egg", "from", "countertop"])
    assert v.observation_quality(ctx) == 1.0
    assert v.goal_alignment(ctx, "heat egg 1 with microwave 1") == pytest.approx(1.0)  # the tool is not counted
    assert V.goal_alignment(ctx, "heat egg 1 with microwave 1") == pytest.approx(0.5)  # TextWorld counts it
    assert v.score(ctx, "take egg 1 from countertop 1") > v.score(ctx, "go to countertop 1")  # repeat
    assert v.observation_quality(play("g", [("open fridge 1", "Nothing happens.")])) == 0.0
    assert type(v).__mro__[1] is type(V).__mro__[1]  # one implementation, two vocabularies


def test_alfworld_prefers_the_goal_object_and_its_move_command():
    # ALFWorld's put is "move X to Y"; objects the goal does not name are off task.
    v = ALFWorldVerifier()
    goal = "Your task is to: put some remotecontrol on sofa."
    seen = play(goal, [("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a statue 1, "
                                             "and a remotecontrol 1.")])
    take_goal, take_other = "take remotecontrol 1 from sidetable 1", "take statue 1 from sidetable 1"
    assert v.score(seen, take_goal) > v.score(seen, "go to sofa 1") > v.score(seen, take_other)
    assert v.action_prior(seen, take_other) == pytest.approx(0.85 * 0.25)
    held = play(goal, [("take remotecontrol 1 from sidetable 1", "You pick up the remotecontrol 1 from the "
                                                                 "sidetable 1."),
                       ("go to sofa 1", "You arrive at sofa 1. On the sofa 1, you see a pillow 1.")])
    # the winning command outscores walking away and taking something else
    assert v.score(held, "move remotecontrol 1 to sofa 1") > max(
        v.score(held, a) for a in ("go to sidetable 1", "take pillow 1 from sofa 1", "look", "inventory"))
    assert v.action_prior(held, "move remotecontrol 1 to sidetable 1") == pytest.approx(0.85 * 0.25)  # not the goal's
    assert TextWorldVerifier().action_prior(seen, take_other) == pytest.approx(0.85)  # TextWorld: no goal check


def test_config_validation():
    with pytest.raises(ValueError, match="sum to 1"):
        GameVerifierConfig(verb_priors={"go": .5}, progress_patterns=(), failure_patterns=(),
                           weights={**dict(TEXTWORLD.weights), "goal": 0.5})
    with pytest.raises(ValueError, match="verb priors"):
        GameVerifierConfig(verb_priors={"go": 1.5}, progress_patterns=(), failure_patterns=())
