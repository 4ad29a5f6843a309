"""Game suites for R2V/TextWorld-v0: which games exist, by family, difficulty and generator seed.

A game is named by its generator parameters and seed alone, so a suite is rebuilt byte-for-byte anywhere.
Four task families from TextWorld's own generators: custom quests (``tw-make custom``), cooking (the FTWP
games), treasure hunter and coin collector, each at three difficulty levels.

Example:
    >>> suite = get_suite("default")
    >>> len(suite) >= 250, sorted({g.family for g in suite.values()})
    (True, ['coin_collector', 'cooking', 'custom', 'treasure_hunter'])
    >>> g = suite["tw-cooking-easy-000"]
    >>> g.challenge, g.settings["recipe"], g.seed
    ('tw-cooking', 1, 0)
    >>> set(get_suite("small")) <= set(suite)   # the small suite is a subset: they share the cache
    True
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

from r2v_envs.errors import UnknownChoiceError

LEVELS = ("easy", "medium", "hard")
GAMES_PER_LEVEL = {"default": 22, "small": 2}


@dataclass(frozen=True)
class GameSpec:
    """Everything that determines a generated game."""

    family: str
    level: str
    index: int
    challenge: str  # "custom" or a textworld.challenges name
    settings: dict[str, Any] = field(hash=False)
    seed: int = 0

    @property
    def task_id(self) -> str:
        return f"tw-{self.family}-{self.level}-{self.index:03d}"

    def key(self) -> str:
        """A digest of the generator parameters: the cache file name, so changed parameters never collide."""
        blob = json.dumps({"challenge": self.challenge, "settings": self.settings, "seed": self.seed},
                          sort_keys=True)
        return hashlib.sha1(blob.encode()).hexdigest()[:12]

    def to_json(self) -> str:
        return json.dumps({"family": self.family, "level": self.level, "index": self.index,
                           "challenge": self.challenge, "settings": self.settings, "seed": self.seed},
                          sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> GameSpec:
        return cls(**json.loads(text))


def _custom(level: str, i: int) -> dict[str, Any]:
    rooms, objects, quest = {"easy": (3, 4, 2), "medium": (5, 8, 4), "hard": (7, 12, 6)}[level]
    return {"nb_rooms": rooms + i % 2, "nb_objects": objects + i % 3, "quest_length": quest + i % 2}


def _cooking(level: str, i: int) -> dict[str, Any]:
    base = {"easy": dict(recipe=1, take=1, go=1, open=False, cook=False, cut=False),
            "medium": dict(recipe=2, take=1, go=6, open=True, cook=i % 2 == 0, cut=i % 2 == 1),
            "hard": dict(recipe=3, take=2, go=9, open=True, cook=True, cut=True)}[level]
    return {**base, "drop": False, "recipe_seed": i, "split": "train"}


def _treasure_hunter(level: str, i: int) -> dict[str, Any]:
    # TextWorld's levels 1-10 / 11-20 / 21-30 have 5 / 10 / 20 rooms. Levels 26-30 (quests of 12-20 steps
    # in 20 rooms) take minutes each to generate and often fail, so "hard" stops at 25 (quests of 3-10).
    return {"level": {"easy": 1 + i % 10, "medium": 11 + i % 10, "hard": 21 + i % 5}[level]}


def _coin_collector(level: str, i: int) -> dict[str, Any]:
    # level = 100 * (distractor rooms per quest room) + quest length; quest lengths 1-5 / 3-7 / 5-9
    return {"level": {"easy": 1 + i % 5, "medium": 103 + i % 5, "hard": 205 + i % 5}[level]}


FAMILIES = {
    "custom": ("custom", _custom),
    "cooking": ("tw-cooking", _cooking),
    "treasure_hunter": ("tw-treasure_hunter", _treasure_hunter),
    "coin_collector": ("tw-coin_collector", _coin_collector),
}


def get_suite(name: str = "default") -> dict[str, GameSpec]:
    """The games of a named suite, keyed by task id (in a stable order)."""
    if name not in GAMES_PER_LEVEL:
        raise UnknownChoiceError("TextWorld suite", name, GAMES_PER_LEVEL)
    games = {}
    for family, (challenge, settings_fn) in FAMILIES.items():
        for level in LEVELS:
            for i in range(GAMES_PER_LEVEL[name]):
                spec = GameSpec(family, level, i, challenge, settings_fn(level, i), seed=i)
                games[spec.task_id] = spec
    return games
