"""Goal-object renaming: extra BC rows that teach a small SLM to copy the goal's object instead of guessing it.

A tiny model trained from scratch on ALFWorld's expert steps learns *when* to take, heat or move an object long
before it learns *which*: it writes the object classes it saw most often ("take mug 1 from countertop 1" at a
countertop holding the egg the goal asks for), because the class names are predictable from frequency alone.
Renaming the goal's object class to another class, consistently through the whole row (goal, observations,
admissible actions, history and the expert's action), keeps every row a valid demonstration but makes the class
name predictable only by copying it from the context. Measured on the ALFWorld preset's D_traj (4041 rows, the
preset's tiny Qwen2, 3000 BC steps, SLM-only rollouts under composite perturbations, K=5 and the ALFWorld
verifier): on the 24 unseen validation games x 4 seeds the SLM wins 17 of 96 with one renamed copy per row
against 8 of 96 without; on the games it was trained on (a new seed) 17 of 112 against 33 of 112, because the
renamed rows no longer let it memorise which object each training game asks for.

Rows whose goal names no object (TextWorld, HumanEval+, TerminalBench) are left alone, so the option is inert
outside ALFWorld.

Example:
    >>> rows = [{"prompt": "Goal: Your task is to: put some mug on desk.\\nObservation:\\nYou see a mug 1, "
    ...          "a pen 2.\\nAction:", "completion": " take mug 1 from desk 1"},
    ...         {"prompt": "Goal: Your task is to: heat some egg and put it in garbagecan.\\nAction:",
    ...          "completion": " go to microwave 1"}]
    >>> goal_object(rows[0]["prompt"]), object_names(rows)
    ('mug', ['egg', 'mug', 'pen'])
    >>> extra = rename_goal_objects(rows, copies=1, seed=0)[2]
    >>> extra["completion"], "mug" in extra["prompt"]
    (' take egg 1 from desk 1', False)
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence

# ALFWorld's goal templates (alfworld's gdict): "put a clean X in Y", "put some X on Y", "examine the X with the
# desklamp", "look at X under the desklamp", "heat some X and put it in Y", "find two X and put them in Y", ...
GOAL_OBJECT = re.compile(r"Your task is to: (?:put|examine|look at|clean|heat|cool|find)\s+"
                         r"(?:a |an |some |two |the )?(?:clean |hot |cool )?([a-z]+)")
_SEEN_OBJECT = re.compile(r"\b(?:a|an) ([a-z]+) \d+")  # "you see a mug 1, and a pen 2"
_RECEPTACLE = re.compile(r"go to ([a-z]+) \d+")


def goal_object(prompt: str) -> str | None:
    """The object class the goal in ``prompt`` acts on, or None when the goal names none."""
    m = GOAL_OBJECT.search(prompt)
    return m.group(1) if m else None


def object_names(rows: Sequence[dict[str, str]]) -> list[str]:
    """The object classes of ``rows`` (goal objects and objects seen in observations, receptacles excluded)."""
    objects: set[str] = set()
    receptacles: set[str] = set()
    for row in rows:
        text = row["prompt"] + row["completion"]
        objects.update(_SEEN_OBJECT.findall(text))
        receptacles.update(_RECEPTACLE.findall(text))
        name = goal_object(text)
        if name:
            objects.add(name)
    return sorted(objects - receptacles)


def rename_goal_objects(rows: Sequence[dict[str, str]], copies: int = 1, seed: int = 0) -> list[dict[str, str]]:
    """``rows`` followed by ``copies`` renamed copies of every row whose goal names an object: the class is
    replaced, as a whole word, by another class of :func:`object_names` that the row does not mention."""
    if copies < 0:
        raise ValueError(f"copies must be >= 0, got {copies}")
    rng, names, out = random.Random(seed), object_names(rows), list(rows)
    for _ in range(copies):
        for row in rows:
            name = goal_object(row["prompt"])
            if name is None:
                continue
            text = row["prompt"] + "\x00" + row["completion"]
            options = [n for n in names if n != name and not re.search(rf"\b{n}\b", text)]
            if not options:
                continue
            prompt, completion = re.sub(rf"\b{name}\b", rng.choice(options), text).split("\x00")
            out.append({"prompt": prompt, "completion": completion})
    return out
