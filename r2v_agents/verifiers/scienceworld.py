"""ScienceWorld process verifier: the text-game verifier of Appendix C with ScienceWorld's verbs and messages.

ScienceWorld's action templates: open/close X, go to X, pick up X, put down X, move X to Y, pour X in Y, dunk X in
Y, mix X, use X on Y, activate/deactivate X, connect X to Y, disconnect X, focus on X, look around, look at X,
look in X, read X, eat X, flush X, inventory, task, wait, wait1 (and teleport to X under the ``teleportAction``
simplification). Its parser answers unknown text with "No known action matches that input." and many refusals
with "I'm not sure ..." or "It's not clear how to ...".

The verbs that change the experiment (use, pick up, move, pour, activate, connect) rank above navigation, which
ranks above looking and waiting. ``focus on`` gets a middling prior and no goal-word bonus: every task asks to focus
on one thing, and a wrong focus ends the episode (score -100), but the goal rarely names the thing in the words the
action uses ("find a(n) animal" -> "focus on baby wolf"; "boil water" -> "focus on substance in metal pot"), so
goal alignment cannot tell the right focus from a wrong one. ScienceWorld moves by room name, so oscillation is
caught by the A-B-A rule alone.

Example:
    >>> from r2v_agents.context import Context
    >>> v = ScienceWorldVerifier()
    >>> ctx = Context.start("Your task is to boil water.", "You move to the kitchen.", {})
    >>> v.split_action("pick up thermometer"), v.split_action("go to kitchen")
    (('pick up', ['thermometer']), ('go to', ['kitchen']))
    >>> [round(s, 3) for s in v.score_batch(ctx, ["move water to stove", "go to hallway", "inventory"])]
    [0.825, 0.637, 0.625]
"""

from __future__ import annotations

from r2v_agents.verifiers.textworld import GameVerifierConfig, TextGameVerifier

SCIENCEWORLD = GameVerifierConfig(
    verb_priors={"use": 0.85, "pick up": 0.8, "move": 0.8, "pour": 0.8, "activate": 0.8, "connect": 0.75,
                 "mix": 0.75, "dunk": 0.6, "deactivate": 0.6, "open": 0.65, "go to": 0.55, "go": 0.55,
                 "teleport to": 0.6, "focus on": 0.5, "disconnect": 0.4, "put down": 0.4, "read": 0.4,
                 "look at": 0.35, "look in": 0.35, "examine": 0.35, "close": 0.3, "wait": 0.3, "wait1": 0.3,
                 "look around": 0.25, "look": 0.25, "inventory": 0.2, "task": 0.1, "eat": 0.1, "flush": 0.1,
                 "reset task": 0.0},
    progress_patterns=("you move to", "you move the", "you move through", "is now open", "is now activated",
                       "is now deactivated", "you pour", "you focus on", "you dunk", "you teleport to",
                       "connected", "the liquids in", "you eat"),
    failure_patterns=("no known action matches", "i'm not sure", "it's not clear how", "its not clear how",
                      "you can't", "can't be", "does not appear", "already", "there is nothing in",
                      "is disabled here"),
    reverse_moves={},  # moves are by room name ("go to kitchen"); oscillation is caught by the A-B-A rule
)


class ScienceWorldVerifier(TextGameVerifier):
    """The ScienceWorld verifier (same signals and weights as TextWorld's, ScienceWorld's vocabulary)."""

    name = "scienceworld"

    def __init__(self, config: GameVerifierConfig = SCIENCEWORLD):
        super().__init__(config)
