"""Which ``info`` keys an agent may see, and which are the oracle's.

The env contract (:mod:`r2v_envs.core`) fills ``info`` with the agent-visible keys and with privileged ones: the
oracle's next action (``expert_action``) and the outcome (``won``, ``lost``, ``score``), which an agent could use to
cheat. Policies (``r2v_agents``), ``r2v eval`` and ``r2v serve`` all hide the oracle keys through
:func:`visible_info`, so the three agree on what an agent sees.

Example:
    >>> info = {"goal": "Take the coin.", "step": 2, "expert_action": "take coin", "won": False, "score": 0.0}
    >>> visible_info(info)
    {'goal': 'Take the coin.', 'step': 2}
    >>> visible_info(info, extra=("perturbations",))   # a key the caller adds is kept when present
    {'goal': 'Take the coin.', 'step': 2}
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

# info keys a policy may see; everything else in info is bookkeeping or oracle-only.
AGENT_VISIBLE_INFO = ("goal", "admissible_actions", "step", "task_id", "benchmark", "channel")
# privileged keys: the expert's next action and the episode's outcome (hindsight).
ORACLE_INFO_KEYS = ("expert_action", "won", "lost", "score")


def visible_info(info: Mapping[str, Any], extra: Sequence[str] = ()) -> dict[str, Any]:
    """The agent-visible part of an env ``info`` (no ``expert_action``, ``won``, ``score``), plus the keys of
    ``extra`` that are present and not oracle keys."""
    keys = (*AGENT_VISIBLE_INFO, *(k for k in extra if k not in ORACLE_INFO_KEYS))
    return {k: info[k] for k in keys if k in info}
