"""What ScienceWorld's agent is shown as ``admissible_actions``, and how its text reaches the parser.

The engine's valid-action list (``get_valid_action_object_combinations``) is every template filled with every
visible object: 417 actions in the hallway at the start of ``boil``, 2913 in the kitchen, of which 1806 are
``connect X to Y`` and 43 ``disconnect X``. ``"filtered"`` (the default) keeps what an agent could mean:

* no ``connect``/``disconnect`` outside the electrical task types (power-component*, test-conductivity*), as the
  engine's own ``noElectricalAction`` simplification does for the action space;
* no action on the agent itself (``connect agent to air``, ``focus on agent``, ``pick up agent``);
* no ``reset task``: it would restart the engine's episode behind the env's back (the env answers it with feedback);
* sorted and de-duplicated, so the list is the same bytes in any process.

That still leaves about a thousand in a furnished room (``move X to Y`` and ``pour X in Y`` over every pair); the
list is not capped, because a cap would hide actions the task needs (the prompt builder shows the first
``max_admissible`` anyway). ``"raw"`` passes the engine's list through unchanged. Either way the list is a hint, not
a whitelist: the parser accepts aliases the list does not spell (the gold path's ``use thermometer in inventory on
substance in metal pot``), and any text gets an in-game answer.

Example:
    >>> valid = ["connect agent to air", "connect battery to wire", "open door to kitchen", "reset task",
    ...          "focus on agent", "open door to kitchen", "look around"]
    >>> present_actions(valid, "boil")
    ['look around', 'open door to kitchen']
    >>> present_actions(valid, "power-component")
    ['connect battery to wire', 'look around', 'open door to kitchen']
    >>> clean_command("  Open   DOOR to kitchen\\x00\\udcff ")
    'Open DOOR to kitchen'
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from r2v_envs.scienceworld.tasks import ELECTRICAL

ADMISSIBLE_MODES = ("filtered", "raw")
RESET_COMMANDS = frozenset({"reset task", "reset"})
# Longer input is cut: nothing the parser knows is this long, and py4j would ship megabytes to the JVM each step.
MAX_COMMAND_CHARS = 1000
_ON_AGENT = re.compile(r"\bagent\b")
_UNSENDABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")  # control chars; lone surrogates break py4j


def present_actions(valid: Iterable[str], task: str, mode: str = "filtered") -> list[str]:
    """The ``admissible_actions`` of a step from the engine's valid list (see the module doc)."""
    if mode == "raw":
        return list(valid)
    # Runs every step over thousands of actions: plain string tests first, the regex only on the few that name
    # "agent" at all: 1.5 ms for the 2726 actions of the kitchen on a loaded 2-core machine (an engine step: 200+ ms).
    drop = () if task in ELECTRICAL else ("connect ", "disconnect ")
    keep = {a for a in valid if not a.startswith(drop) and a not in RESET_COMMANDS
            and not ("agent" in a and _ON_AGENT.search(a))}
    return sorted(keep)


def clean_command(text: str) -> str:
    """Agent text as the parser gets it: control characters and lone surrogates dropped (py4j cannot encode a
    surrogate and would raise), whitespace collapsed, cut at :data:`MAX_COMMAND_CHARS`."""
    return " ".join(_UNSENDABLE.sub("", text[:MAX_COMMAND_CHARS]).split())


def same_command(a: str, b: str) -> bool:
    """Whether two commands are the same to the parser (it ignores case and spacing)."""
    return " ".join(a.lower().split()) == " ".join(b.lower().split())


__all__ = ["ADMISSIBLE_MODES", "MAX_COMMAND_CHARS", "RESET_COMMANDS", "clean_command", "present_actions",
           "same_command"]
