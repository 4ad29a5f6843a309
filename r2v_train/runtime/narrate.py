"""What ``r2v pipeline`` and ``r2v train`` tell the user on stderr: one line per stage, what it does, its ETA.

The bars (runner rollouts, game generation, TRL's training bars, the router's epochs) carry the fine-grained
ETA; these lines say what is about to happen and, where this run directory has run the stage before, how long
it took then.

Example:
    >>> from r2v_train.chain.stages import ChainConfig
    >>> describe_stage(ChainConfig(), "replay", {"train_tasks": 185})
    'replays the successful teacher trajectories under 5 perturbation seeds (1, 2, 3, 4, 5), composite'
    >>> eta_text(None), eta_text(195.2)
    ('', '; ETA ~3.3 min (its last run here)')
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any


def say(message: str) -> None:
    """One line of narration on stderr (stdout stays for results), flushed at once."""
    print(f"[r2v] {message}", file=sys.stderr, flush=True)


def duration(seconds: float) -> str:
    """``42 s``, ``3.5 min`` or ``1.2 h``.

    Example:
        >>> duration(42.4), duration(210), duration(7200)
        ('42 s', '3.5 min', '2.0 h')
    """
    if seconds < 100:
        return f"{seconds:.0f} s"
    if seconds < 6000:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def eta_text(last_wall_s: float | None) -> str:
    """The ETA clause of a stage line: the stage's wall time when it last ran in this run directory."""
    return "" if not last_wall_s else f"; ETA ~{duration(last_wall_s)} (its last run here)"


def describe_stage(config: Any, stage: str, facts: Mapping[str, Any]) -> str:
    """What ``stage`` of the chain ``config`` does, in one clause; ``facts`` may hold ``train_tasks`` and
    ``valid_tasks`` (known once the split stage ran)."""
    c = config
    n_train, n_valid = facts.get("train_tasks", "the"), facts.get("valid_tasks", "the")
    if stage == "split":
        return f"the env's 70/15/15 task split (seed 42) of {c.env.env_id} {dict(c.env.env_kwargs)}"
    if stage == "teacher":
        return (f"the {c.teacher.teacher} teacher plays the {n_train} train tasks clean (1 episode each, "
                f"<= {c.env.max_steps} steps, {c.env.workers or 'no'} env workers)")
    if stage == "replay":
        return (f"replays the successful teacher trajectories under {len(c.replay.seeds)} perturbation seeds "
                f"{tuple(c.replay.seeds)}, {c.replay.perturbations}")
    if stage == "bc":
        steps = f"{c.bc.max_steps} optimizer steps" if c.bc.max_steps > 0 else "its epochs"
        return f"behaviour cloning of the SLM on the teacher + replay steps, {steps} (TRL's bar follows)"
    if stage == "preferences":
        return (f"samples K={c.preferences.k} BC candidates on up to {c.preferences.max_contexts} contexts and "
                "scores them into preference pairs")
    if stage == "dpo":
        return f"DPO + consistency from the BC model, {c.dpo.max_steps} steps (TRL's bar follows)"
    if stage == "router_data":
        r = c.router_data
        return (f"SLM-only rollouts (K={r.k}) on the {n_train} train tasks x seeds {tuple(r.train_seeds)} and the "
                f"{n_valid} valid tasks x seeds {tuple(r.valid_seeds)}, labelled for the router")
    if stage == "router":
        return f"trains the router on the rollouts' features, {c.router.epochs} epochs, {c.router.threshold_rule} threshold"
    return stage
