"""ALFWorld process verifier: the text-game verifier of Appendix C with ALFWorld's verbs and messages.

ALFWorld's command grammar: go to X, take X from Y, move X to Y (its put; older releases say put X in/on Y),
open X, close X, clean X with Y, heat X with Y, cool X with Y, use X, examine X, look, inventory. Its engine
answers a useless command with "Nothing happens." and a move with "You arrive at ...".

Every ALFWorld task names the object class it acts on ("put a clean lettuce in diningtable", "look at cd under
the desklamp"), so taking, moving or transforming an object the goal does not name, or moving it anywhere but
the goal's receptacle, is off task: the object verbs' prior is scaled by ``off_goal_factor`` then. Without it
the verb prior prefers "take statue 1" (any object in sight) to every move, and a small SLM's K candidates
steer it into carrying the wrong object.

Example:
    >>> from r2v_agents.context import Context
    >>> v = ALFWorldVerifier()
    >>> ctx = Context.start("Your task is to: put a clean apple in fridge.", "You arrive at countertop 1.", {})
    >>> v.split_action("go to fridge 1"), v.split_action("clean apple 1 with sinkbasin 1")
    (('go to', ['fridge']), ('clean', ['apple', 'with', 'sinkbasin']))
    >>> [round(s, 3) for s in v.score_batch(ctx, ["put apple 1 in fridge 1", "go to fridge 1", "inventory"])]
    [0.963, 0.887, 0.625]
"""

from __future__ import annotations

from r2v_agents.verifiers.textworld import GameVerifierConfig, TextGameVerifier

ALFWORLD = GameVerifierConfig(
    verb_priors={"take": 0.85, "move": 0.85, "put": 0.85, "clean": 0.9, "heat": 0.9, "cool": 0.9, "use": 0.8,
                 "open": 0.6, "go to": 0.55, "close": 0.3, "examine": 0.35, "look": 0.2, "inventory": 0.2},
    progress_patterns=("you pick up", "you take", "you put", "you move", "you arrive at", "you open", "you clean",
                       "you heat", "you cool", "you turn on", "you won"),
    failure_patterns=("nothing happens", "that action did not help", "you can't", "i don't understand",
                      "you lost"),
    reverse_moves={},  # ALFWorld moves by name ("go to X"), oscillation is caught by the A-B-A rule
    object_verbs=frozenset({"take", "move", "put", "clean", "heat", "cool", "use"}),
    off_goal_factor=0.25,
)


class ALFWorldVerifier(TextGameVerifier):
    """The ALFWorld verifier (same signals and weights as TextWorld's, ALFWorld's vocabulary)."""

    name = "alfworld"

    def __init__(self, config: GameVerifierConfig = ALFWORLD):
        super().__init__(config)
