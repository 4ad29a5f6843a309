"""Text rendering of a BabyAI agent's view and of what each action did (ours; see docs/babyai.md).

The agent sees what minigrid's own partial observation holds, no more: the ``agent_view_size`` x
``agent_view_size`` square ahead of it (7 x 7 in BabyAI), with minigrid's occlusion (``gen_obs_grid``: walls and
closed doors hide what lies behind them). That view is egocentric: the agent stands in the middle of its bottom
row, facing up. Each visible object becomes one line with its position relative to the agent, ``ahead`` (rows up)
and ``to your left``/``to your right`` (columns sideways), in steps (grid cells), so the text carries exactly the
grid's information and stays line-oriented (a line dropped by a perturbation is one object lost). Walls are
summarised as the nearest wall straight ahead, to the left and to the right (listing every wall cell would drown
the objects). The cell in front of the agent gets its own line because three of the six actions (pick up, drop,
toggle) act on it.

Example:
    >>> relative(2, 1), relative(0, -3), relative(1, 0)
    ('2 steps ahead and 1 step to your right', '3 steps to your left', '1 step ahead')
    >>> phrase("door", "red", is_open=False, is_locked=True), phrase("ball", "blue")
    ('a locked red door', 'a blue ball')
"""

from __future__ import annotations

from typing import Any

# minigrid's Actions enum, in order (left=0 ... toggle=5); BabyAI's `done` (6) is never needed and not offered.
COMMANDS: tuple[str, ...] = ("turn left", "turn right", "go forward", "pick up", "drop", "toggle")
ALIASES: dict[str, str] = {"left": "turn left", "right": "turn right", "forward": "go forward",
                           "move forward": "go forward", "pickup": "pick up", "pick": "pick up",
                           "open": "toggle", "open door": "toggle"}
DIRECTIONS = ("east", "south", "west", "north")  # minigrid's agent_dir 0..3
OBJECTS = ("key", "ball", "box", "door", "goal", "lava")  # described one by one (walls are summarised)


def _steps(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''}"


def relative(ahead: int, right: int) -> str:
    """A cell's position relative to the agent: ``ahead`` cells forward, ``right`` cells sideways (< 0: left)."""
    parts = []
    if ahead:
        parts.append(f"{_steps(ahead)} ahead")
    if right:
        parts.append(f"{_steps(abs(right))} to your {'right' if right > 0 else 'left'}")
    return " and ".join(parts) or "here"


def phrase(kind: str, color: str, is_open: bool = False, is_locked: bool = False) -> str:
    """An object as a noun phrase: ``a red ball``, ``an open blue door``, ``a locked grey door``."""
    if kind == "door":
        state = "locked" if is_locked else "open" if is_open else "closed"
        return f"{'an' if state == 'open' else 'a'} {state} {color} door"
    if kind == "goal":
        return "the green goal square"
    if kind == "lava":
        return "a patch of lava"
    return f"a {color} {kind}"


def describe_obj(obj: Any) -> str:
    """A minigrid ``WorldObj`` (or None) as a noun phrase."""
    if obj is None:
        return "nothing"
    if obj.type == "wall":
        return "a wall"
    return phrase(obj.type, obj.color, getattr(obj, "is_open", False), getattr(obj, "is_locked", False))


def describe_view(env: Any, image: Any) -> list[str]:
    """The agent's view as lines (heading and load, the cell in front, visible objects nearest first, the nearest
    walls). ``env`` is the unwrapped minigrid env, ``image`` the ``"image"`` of the observation minigrid just
    returned: its encoding of exactly the agent's view (cell ``[i, j]`` = object type, colour, state; unseen cells
    are type 0), read here rather than recomputing the view (minigrid's occlusion pass is most of a step's cost)."""
    from minigrid.core.constants import IDX_TO_COLOR, IDX_TO_OBJECT

    size = image.shape[0]
    mid, bottom = size // 2, size - 1  # the agent's cell in its own view

    def name(cell) -> str:
        kind = IDX_TO_OBJECT[int(cell[0])]
        if kind == "wall":
            return "a wall"
        return phrase(kind, IDX_TO_COLOR[int(cell[1])], is_open=cell[2] == 0, is_locked=cell[2] == 2)

    lines = [f"You face {DIRECTIONS[env.agent_dir]}. You carry {describe_obj(env.carrying)}."]
    front = image[mid, bottom - 1]
    lines.append(f"In front of you: {'free floor' if IDX_TO_OBJECT[int(front[0])] == 'empty' else name(front)}.")
    seen, walls = [], {"ahead": None, "left": None, "right": None}
    for j in range(size):
        for i in range(size):
            kind = IDX_TO_OBJECT[int(image[i, j, 0])]
            if (i, j) == (mid, bottom) or kind in ("unseen", "empty", "floor", "agent"):
                continue
            ahead, right = bottom - j, i - mid
            if kind == "wall":
                # only walls in line with the agent: straight ahead, or level with it on either side
                side = "ahead" if right == 0 else None if ahead else "left" if right < 0 else "right"
                dist = ahead if side == "ahead" else abs(right)
                if side and (walls[side] is None or dist < walls[side]):
                    walls[side] = dist
            elif kind in OBJECTS:
                seen.append((ahead + abs(right), ahead, right, name(image[i, j])))
    lines += [f"You see {what} {relative(ahead, right)}." for _, ahead, right, what in sorted(seen)]
    near = [f"{_steps(d)} {'ahead' if side == 'ahead' else f'to your {side}'}" for side, d in walls.items() if d]
    if near:
        lines.append(f"Walls: {', '.join(near)}.")
    return lines


def snapshot(env: Any) -> tuple:
    """What an action can change, for :func:`feedback`: position, heading, load, and the cell in front."""
    front = env.grid.get(*env.front_pos)
    state = None if front is None else (front.type, front.color, getattr(front, "is_open", None),
                                        getattr(front, "is_locked", None), id(front))
    return tuple(env.agent_pos), env.agent_dir, env.carrying, front, state


def feedback(command: str, before: tuple, after: tuple) -> str:
    """One sentence saying what ``command`` did, from the :func:`snapshot` before and after it."""
    pos0, _, carry0, front0, state0 = before
    pos1, dir1, carry1, front1, state1 = after
    if command in ("turn left", "turn right"):
        return f"You turn {command.split()[1]} and now face {DIRECTIONS[dir1]}."
    if command == "go forward":
        if pos1 != pos0:
            return "You move forward."
        return f"You can't move forward: {describe_obj(front0)} is in the way."
    if command == "pick up":
        if carry0 is None and carry1 is not None:
            return f"You pick up {describe_obj(carry1)}."
        if carry0 is not None:
            return f"You can't pick up anything: you already carry {describe_obj(carry0)}."
        return "There is nothing in front of you to pick up." if front0 is None else \
            f"You can't pick up {describe_obj(front0)}."
    if command == "drop":
        if carry0 is not None and carry1 is None:
            return f"You drop {describe_obj(carry0)} in front of you."
        if carry0 is None:
            return "You can't drop anything: you carry nothing."
        return f"You can't drop {describe_obj(carry0)} here: {describe_obj(front0)} is in front of you."
    # toggle
    if front0 is None:
        return "There is nothing in front of you to toggle."
    if front0.type == "door":
        was_open, was_locked = state0[2], state0[3]
        if was_locked and state1[3]:
            return f"The {front0.color} door is locked: you need to carry a {front0.color} key to open it."
        if was_locked:
            return f"You unlock and open the {front0.color} door."
        return f"You {'close' if was_open else 'open'} the {front0.color} door."
    if front0.type == "box" and state1 != state0:
        return f"You open the {front0.color} box: it now shows {describe_obj(front1)}."
    return f"Nothing happens when you toggle {describe_obj(front0)}."


def normalise(action: str) -> str | None:
    """An agent's text as one of :data:`COMMANDS` (case, spacing and a few aliases forgiven), else None.

    Example:
        >>> normalise("  Go   Forward "), normalise("pickup"), normalise("jump")
        ('go forward', 'pick up', None)
    """
    text = " ".join(action.lower().replace("_", " ").split()).rstrip(".")
    text = ALIASES.get(text, text)
    return text if text in COMMANDS else None


__all__ = ["COMMANDS", "DIRECTIONS", "describe_obj", "describe_view", "feedback", "normalise", "phrase", "relative",
           "snapshot"]
