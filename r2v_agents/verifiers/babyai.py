"""BabyAI process verifier: the text-game verifier of Appendix C with R2V/BabyAI-v0's six commands and messages.

The commands (``turn left``, ``turn right``, ``go forward``, ``pick up``, ``drop``, ``toggle``) take no arguments,
so goal alignment is the same for all of them and the action prior and the observation carry the signal: the
env's feedback sentence (:func:`r2v_envs.babyai.text.feedback`) says whether the last action did something ("You
move forward.", "You pick up a red ball.") or nothing ("You can't move forward: a wall is in the way.", "There is
nothing in front of you to pick up."). TextWorld's reverse-move rule is for ``go <direction>`` moves, so it is off
here; the A-B-A rule still catches ``turn left``, ``turn right``, ``turn left``.

Example:
    >>> from r2v_agents.context import Context
    >>> v = BabyAIVerifier()
    >>> ctx = Context.start("go to the red ball", "Mission: go to the red ball\\nYou face east.", {})
    >>> [round(s, 3) for s in v.score_batch(ctx, ["go forward", "turn left", "dance"])]
    [0.625, 0.575, 0.475]
"""

from __future__ import annotations

from r2v_agents.verifiers.textworld import GameVerifierConfig, TextGameVerifier

BABYAI = GameVerifierConfig(
    verb_priors={"go forward": 0.7, "pick up": 0.6, "toggle": 0.55, "turn left": 0.5, "turn right": 0.5,
                 "drop": 0.4},
    progress_patterns=("you move forward", "you pick up", "you open", "you unlock", "you drop",
                       "mission complete"),
    failure_patterns=("you can't", "nothing in front of you", "unknown command", "is locked", "nothing happens",
                      "mission failed", "out of time"),
    reverse_moves={},
)


class BabyAIVerifier(TextGameVerifier):
    """The BabyAI verifier (same signals and weights as TextWorld's, BabyAI's commands and feedback)."""

    name = "babyai"

    def __init__(self, config: GameVerifierConfig = BABYAI):
        super().__init__(config)
