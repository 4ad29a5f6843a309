"""Process verifier for text games (Appendix C): five local signals, parametrised by the game's vocabulary.

V(x, a) = .25 observation quality + .25 action-type prior + .25 goal alignment + .15 non-repetition
+ .10 non-oscillation, blended 50/50 with a visible reward. A :class:`GameVerifierConfig` holds the
benchmark-specific parts (verb priors, progress and failure patterns, directions), so TextWorld
(:data:`TEXTWORLD`) and ALFWorld (:data:`r2v_agents.verifiers.alfworld.ALFWORLD`) are configurations of
one :class:`TextGameVerifier`.

* Observation quality: the most recent observation shows progress (``you take``, ``you put``, ...) -> 1,
  a failure string (``that's not a verb``, ``you can't``, ...) -> 0, neither -> 0.5.
* Action-type prior: the score of the action's verb (longest matching verb phrase); actions outside a known
  admissible list are scaled by ``inadmissible_factor`` (the list is agent-visible, so no leakage), and an
  object verb (``object_verbs``) whose object or destination the goal does not name by ``off_goal_factor``.
* Goal alignment: share of the action's argument words that are key words of the goal (stopwords and
  digits dropped); an action without arguments gets ``no_argument_alignment``. For an object verb the
  ``from``/``with`` clause (where the object lies, the tool used on it) is not counted: the goal names the
  object and its destination, not its source.
* Non-repetition: 1 - 0.5 x (times the action occurs in the last ``repeat_window`` actions); 0 when it
  repeats an action whose result was a failure.
* Non-oscillation: 0 for A-B-A patterns, ``reverse_move_score`` for undoing the last move, else 1.
* Reward blend: with a non-zero last reward r, V = .5 V + .5 clamp(r) (a zero reward in a sparse-reward game
  carries no evidence about the step, so it does not count as visible).

Example:
    >>> from r2v_agents.context import Context
    >>> v = TextWorldVerifier()
    >>> ctx = Context.start("Take the coin from the table.", "You see a table with a coin on it.", {})
    >>> [round(s, 3) for s in v.score_batch(ctx, ["take coin from table", "look", "dance"])]
    [0.838, 0.5, 0.475]
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from r2v_agents.context import Context
from r2v_agents.verifiers.base import Verifier, clamp

WEIGHTS = {"observation": 0.25, "action_prior": 0.25, "goal": 0.25, "repetition": 0.15, "oscillation": 0.10}
STOPWORDS = frozenset(
    "a an the to of in on into onto from with and then it its your you is are at for by this that there "
    "some any find first next after before finally make sure be can will should up out off back try get "
    "let's lets need needs want wants here".split())
_WORD = re.compile(r"[a-z]+")
SOURCE_WORDS = frozenset({"from", "with"})  # an object verb's source or tool clause starts here


@dataclass(frozen=True)
class GameVerifierConfig:
    """The benchmark-specific vocabulary of :class:`TextGameVerifier`."""

    verb_priors: Mapping[str, float]
    """Verb phrase -> prior score in [0, 1] (task-progress verbs above navigation above idle actions)."""
    progress_patterns: tuple[str, ...]
    """Lower-case substrings of an observation that show progress."""
    failure_patterns: tuple[str, ...]
    """Lower-case substrings of an observation that show a failed or useless action."""
    unknown_verb_prior: float = 0.1
    inadmissible_factor: float = 0.25
    no_argument_alignment: float = 0.3
    repeat_window: int = 5
    reverse_moves: Mapping[str, str] = field(default_factory=lambda: {
        "north": "south", "south": "north", "east": "west", "west": "east", "up": "down", "down": "up"})
    reverse_move_score: float = 0.3
    weights: Mapping[str, float] = field(default_factory=lambda: dict(WEIGHTS))
    reward_blend: float = 0.5
    object_verbs: frozenset[str] = frozenset()
    """Verbs whose first argument is the object acted on (ALFWorld: take, move, heat, ...); see the module doc."""
    off_goal_factor: float = 1.0
    """Prior scale of an object verb whose goal alignment is below 1: the goal does not name its object or its
    destination (1: no check)."""

    def __post_init__(self):
        if abs(sum(self.weights.values()) - 1.0) > 1e-9 or set(self.weights) != set(WEIGHTS):
            raise ValueError(f"weights must have keys {sorted(WEIGHTS)} and sum to 1")
        bad = {k: v for k, v in self.verb_priors.items() if not 0.0 <= v <= 1.0}
        if bad:
            raise ValueError(f"verb priors must lie in [0, 1], got {bad}")


TEXTWORLD = GameVerifierConfig(
    verb_priors={"take": 0.85, "put": 0.85, "insert": 0.85, "unlock": 0.8, "open": 0.75, "cook": 0.75,
                 "slice": 0.75, "chop": 0.75, "dice": 0.75, "eat": 0.6, "drink": 0.6, "go": 0.55, "north": 0.55,
                 "south": 0.55, "east": 0.55, "west": 0.55, "drop": 0.35, "close": 0.35, "lock": 0.3,
                 "examine": 0.3, "look": 0.2, "inventory": 0.2, "wait": 0.05},
    progress_patterns=("you take", "you put", "you insert", "you open", "you unlock", "you go", "you eat",
                       "you pick up", "you drop", "your score has just gone up", "-= ", "you are now in",
                       "you won", "*** the end ***"),
    failure_patterns=("that's not a verb", "i didn't understand", "you can't", "that action did not help",
                      "nothing happens", "there is no", "you don't see", "you can't see any such thing",
                      "you aren't carrying", "is locked", "you need to", "doesn't seem to", "you lost"),
)


def words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


@functools.lru_cache(maxsize=1024)  # a goal is scored for every candidate of every step (twice for object verbs)
def goal_keywords(goal: str) -> frozenset[str]:
    """The goal's key words: lower-case alphabetic tokens minus stopwords and verbs of the instruction."""
    return frozenset(w for w in words(goal) if w not in STOPWORDS and len(w) > 1)


class TextGameVerifier(Verifier):
    """V(x, a) for text games, configured by a :class:`GameVerifierConfig`."""

    name = "text-game"

    def __init__(self, config: GameVerifierConfig):
        self.config = config
        # longest verb phrase first, so "go to" wins over "go"
        self._verbs = sorted(config.verb_priors, key=lambda v: -len(v.split()))

    def split_action(self, action: str) -> tuple[str | None, list[str]]:
        """(verb phrase or None, argument words)."""
        toks = words(action)
        for verb in self._verbs:
            n = len(verb.split())
            if toks[:n] == verb.split():
                return verb, toks[n:]
        return None, toks[1:]

    # ------------------------------------------------------------------------------------------- signals
    def observation_quality(self, ctx: Context) -> float:
        obs = ctx.observation.lower()
        if any(p in obs for p in self.config.failure_patterns):
            return 0.0
        if any(p in obs for p in self.config.progress_patterns):
            return 1.0
        return 0.5

    def action_prior(self, ctx: Context, action: str) -> float:
        verb, _ = self.split_action(action)
        prior = self.config.verb_priors[verb] if verb else self.config.unknown_verb_prior
        norm = " ".join(action.lower().split())
        if ctx.admissible_actions and norm not in {" ".join(a.lower().split()) for a in ctx.admissible_actions}:
            prior *= self.config.inadmissible_factor
        if verb in self.config.object_verbs and self.goal_alignment(ctx, action) < 1.0:
            prior *= self.config.off_goal_factor
        return prior

    def goal_alignment(self, ctx: Context, action: str) -> float:
        verb, args = self.split_action(action)
        if verb in self.config.object_verbs:
            args = args[:next((i for i, w in enumerate(args) if w in SOURCE_WORDS), len(args))]
        args = [w for w in args if w not in STOPWORDS]
        if not args:
            return self.config.no_argument_alignment
        keys = goal_keywords(ctx.goal)
        return sum(w in keys for w in args) / len(args)

    def non_repetition(self, ctx: Context, action: str) -> float:
        norm = " ".join(action.lower().split())
        recent = [" ".join(a.lower().split()) for a in ctx.actions[-self.config.repeat_window:]]
        if recent and recent[-1] == norm and self.observation_quality(ctx) == 0.0:
            return 0.0  # repeating an action that just failed
        return clamp(1.0 - 0.5 * recent.count(norm))

    def non_oscillation(self, ctx: Context, action: str) -> float:
        norm = " ".join(action.lower().split())
        acts = [" ".join(a.lower().split()) for a in ctx.actions]
        if len(acts) >= 2 and acts[-2] == norm and acts[-1] != norm:
            return 0.0
        if acts:
            last, cur = words(acts[-1]), words(norm)
            if last and cur and self.config.reverse_moves.get(last[-1]) == cur[-1] and \
                    (len(cur) == 1 or cur[0] == "go") and (len(last) == 1 or last[0] == "go"):
                return self.config.reverse_move_score
        return 1.0

    def signals(self, ctx: Context, action: str) -> dict[str, float]:
        return {"observation": self.observation_quality(ctx), "action_prior": self.action_prior(ctx, action),
                "goal": self.goal_alignment(ctx, action), "repetition": self.non_repetition(ctx, action),
                "oscillation": self.non_oscillation(ctx, action)}

    def score(self, ctx: Context, action: str) -> float:
        sig = self.signals(ctx, action)
        v = sum(self.config.weights[k] * s for k, s in sig.items())
        if ctx.last_reward:  # a visible, non-zero reward
            b = self.config.reward_blend
            v = (1 - b) * v + b * clamp(ctx.last_reward)
        return clamp(v)


class TextWorldVerifier(TextGameVerifier):
    """The TextWorld verifier of Appendix C."""

    name = "textworld"

    def __init__(self, config: GameVerifierConfig = TEXTWORLD):
        super().__init__(config)


def score_candidates(verifier: Verifier, ctx: Context, actions: Sequence[str]) -> list[float]:
    """Verifier scores clamped to [0, 1] (guards third-party verifiers)."""
    return [clamp(s) for s in verifier.score_batch(ctx, actions)]
