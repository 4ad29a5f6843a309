"""ScienceWorld's 30 task types, their variations and the official train/dev/test variation splits, as task ids.

A task id is ``"<task type>/<variation>"`` (``"boil/21"``). ScienceWorld splits each task type's variations into
three contiguous ranges (train: the first ~50%, dev: the next ~25%, test: the rest); :data:`TASK_TYPES` holds those
ranges as read from the engine (``get_max_variations`` and ``get_variations_train/dev/test`` of scienceworld 1.2.3),
so listing the 7207 tasks needs no JVM. The env checks a task type's variation count against the engine when it
loads one, so a scienceworld release that changed them fails loudly instead of mislabelling a split.

A split lists its tasks round-robin over the task types (the first variation of every type, then the second, ...):
``r2v eval --tasks 30`` on the test split is one variation of each of the 30 types, not 30 variations of ``boil``.

Example:
    >>> ids = split_ids("test")
    >>> ids[:3], len(ids)
    (['boil/21', 'change-the-state-of-matter-of/21', 'chemistry-mix/24'], 1819)
    >>> len({task_type(t) for t in ids[:30]})
    30
    >>> parse_task_id("find-animal/225")
    ('find-animal', 225)
    >>> split_of("boil/14"), split_of("boil/13")
    ('valid', 'train')
"""

from __future__ import annotations

from collections.abc import Iterable

from r2v_envs.errors import UnknownChoiceError

# task type -> (number of variations, first dev variation, first test variation): train is [0, dev), dev (r2v's
# "valid") is [dev, test), test is [test, n). Read from the engine; tests/envs/test_scienceworld.py re-reads it.
TASK_TYPES: dict[str, tuple[int, int, int]] = {
    "boil": (30, 14, 21),
    "change-the-state-of-matter-of": (30, 14, 21),
    "chemistry-mix": (32, 16, 24),
    "chemistry-mix-paint-secondary-color": (36, 18, 27),
    "chemistry-mix-paint-tertiary-color": (36, 18, 27),
    "find-animal": (300, 150, 225),
    "find-living-thing": (300, 150, 225),
    "find-non-living-thing": (300, 150, 225),
    "find-plant": (300, 150, 225),
    "freeze": (30, 14, 21),
    "grow-fruit": (126, 62, 93),
    "grow-plant": (126, 62, 93),
    "identify-life-stages-1": (14, 6, 9),
    "identify-life-stages-2": (10, 4, 6),
    "inclined-plane-determine-angle": (168, 84, 126),
    "inclined-plane-friction-named-surfaces": (1386, 692, 1038),
    "inclined-plane-friction-unnamed-surfaces": (162, 80, 120),
    "lifespan-longest-lived": (125, 62, 93),
    "lifespan-longest-lived-then-shortest-lived": (125, 62, 93),
    "lifespan-shortest-lived": (125, 62, 93),
    "measure-melting-point-known-substance": (436, 218, 327),
    "measure-melting-point-unknown-substance": (300, 150, 225),
    "melt": (30, 14, 21),
    "mendelian-genetics-known-plant": (120, 60, 90),
    "mendelian-genetics-unknown-plant": (480, 240, 360),
    "power-component": (20, 10, 15),
    "power-component-renewable-vs-nonrenewable-energy": (20, 10, 15),
    "test-conductivity": (900, 450, 675),
    "test-conductivity-of-unknown-substances": (600, 300, 450),
    "use-thermometer": (540, 270, 405),
}
# Task types whose goal needs `connect`/`disconnect` (the others never do: their admissible list leaves them out).
ELECTRICAL = frozenset(t for t in TASK_TYPES if t.startswith(("power-component", "test-conductivity")))


def check_task_types(types: Iterable[str] | None) -> tuple[str, ...]:
    """The task types asked for (default: all 30), in :data:`TASK_TYPES` order; unknown names raise."""
    if types is None:
        return tuple(TASK_TYPES)
    wanted = list(types)
    for t in wanted:
        if t not in TASK_TYPES:
            raise UnknownChoiceError("scienceworld task type", t, TASK_TYPES)
    return tuple(t for t in TASK_TYPES if t in wanted)


def variations(task: str, split: str) -> range:
    """The variation indices of ``task`` in r2v split ``split`` (``valid`` is ScienceWorld's dev)."""
    n, dev, test = TASK_TYPES[task]
    return {"train": range(dev), "valid": range(dev, test), "test": range(test, n), "all": range(n)}[split]


def split_ids(split: str, types: Iterable[str] | None = None) -> list[str]:
    """The task ids of ``split`` over ``types``: round-robin over the types for a split, sorted for ``"all"``."""
    chosen = check_task_types(types)
    if split == "all":
        return [f"{t}/{v}" for t in sorted(chosen) for v in variations(t, "all")]
    per_type = [list(variations(t, split)) for t in chosen]
    depth = max((len(v) for v in per_type), default=0)
    return [f"{t}/{vs[k]}" for k in range(depth) for t, vs in zip(chosen, per_type) if k < len(vs)]


def parse_task_id(task_id: str) -> tuple[str, int]:
    """``"boil/21"`` -> ``("boil", 21)``; anything else raises :class:`UnknownChoiceError`."""
    task, _, var = str(task_id).rpartition("/")
    if task in TASK_TYPES and var.isdigit() and int(var) < TASK_TYPES[task][0]:
        return task, int(var)
    raise UnknownChoiceError("scienceworld task", task_id, [f"{t}/<0..{n[0] - 1}>" for t, n in TASK_TYPES.items()])


def task_type(task_id: str) -> str:
    return parse_task_id(task_id)[0]


def split_of(task_id: str) -> str:
    task, var = parse_task_id(task_id)
    return next(s for s in ("train", "valid", "test") if var in variations(task, s))


__all__ = ["ELECTRICAL", "TASK_TYPES", "check_task_types", "parse_task_id", "split_ids", "split_of", "task_type",
           "variations"]
