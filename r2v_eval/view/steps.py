"""One logged step as the viewer shows it: what the agent saw with its perturbation events marked, and the decision.

:func:`step_view` turns a step row of the runner's shards (:func:`r2v_agents.shards.schemas`) into a compact
record: the columns the page renders in place (observation, marks, action, source, candidates, router
probability and threshold, reward, ...) under short keys, and every other column, plus the decision's ``meta``
keys, under ``extra``, which the page shows as a details table, so a column added to the shards later (say, how a
reply was grounded) appears without a change here. Heavy columns are summarised (token ids become counts, a
candidate's token entropies their mean) and floats rounded, to keep a large run's page small.

Marks locate each event of a step on the text (:func:`marks`): the injected directive, the distractor line, the
flaky error, stale or truncation marker, the garbled characters. Offsets are UTF-16 code units, as the page's
JavaScript strings count them. Events that remove text (partial observability) have nothing to mark; the page
lists every event above the text either way.

Example:
    >>> text = "You are in a room.\\nYou notice a rusty key lying here."
    >>> marks(text, [{"type": "distractor", "channel": "observation", "detail": "object"}])
    [[19, 53, 'distractor', 'object']]
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

from r2v_envs.perturbations.templates import injected_text_patterns

_PATTERNS = injected_text_patterns()
TEXT_CHANNELS = ("observation", "tool_output", "terminal")
RENDERED = {"episode_id", "env_id", "benchmark", "split", "task_id", "z", "t", "max_steps", "goal", "observation",
            "history_actions", "admissible_actions", "perturbations", "action", "source", "candidates",
            "verifier_score", "features", "router_prob", "cost", "reward", "terminated", "truncated",
            "expert_action", "meta"}
"""Step columns the page renders in place (or that repeat the episode's row); every other column goes to the
step's details table."""


def utf16(text: str, i: int) -> int:
    """The UTF-16 offset of code point ``i`` of ``text``."""
    return i + sum(1 for ch in text[:i] if ord(ch) > 0xFFFF)


def marks(text: str, events: Sequence[Mapping[str, Any]], channels: Sequence[str] = TEXT_CHANNELS
          ) -> list[list[Any]]:
    """``[start, end, type, detail]`` spans of ``text`` that an event of ``events`` on one of ``channels`` put
    there, sorted and non-overlapping (the first found wins)."""
    spans: list[tuple[int, int, str, str]] = []
    for ev in events:
        if ev.get("channel") not in channels or ev.get("type") not in _PATTERNS:
            continue
        pats = _PATTERNS[ev["type"]]
        detail = str(ev.get("detail", ""))
        if ev["type"] == "injection" and detail.startswith("template "):
            try:
                pats = [pats[int(detail.split()[1])]]
            except (ValueError, IndexError):
                pass
        for p in pats:
            for m in p.finditer(text):
                if m.end() > m.start():
                    spans.append((m.start(), m.end(), ev["type"], detail))
    out: list[list[Any]] = []
    end = -1
    for s, e, kind, detail in sorted(spans, key=lambda x: (x[0], -x[1])):
        if s >= end:
            out.append([utf16(text, s), utf16(text, e), kind, detail])
            end = e
    return out


def num(x: Any, digits: int = 4) -> float | None:
    """A float rounded to ``digits`` significant digits (None for None and NaN: JSON has no NaN)."""
    if x is None:
        return None
    x = float(x)
    if math.isnan(x) or math.isinf(x):
        return None
    return float(f"{x:.{digits}g}")


def candidate_view(c: Mapping[str, Any]) -> dict[str, Any]:
    ent = c.get("token_entropies")
    return {"action": c.get("action"), "logprob": num(c.get("logprob")),
            "entropy": num(sum(ent) / len(ent)) if ent else None, "tokens": len(ent) if ent else None,
            "verifier": num(c.get("verifier_score"))}


def _plain(v: Any) -> Any:
    """A JSON-friendly, bounded value for the details table (long lists become a count)."""
    if isinstance(v, float):
        return num(v)
    if isinstance(v, (list, tuple)) and len(v) > 20:
        return f"[{len(v)} values]"
    return v


def step_view(row: Mapping[str, Any], prev_goal: str | None) -> dict[str, Any]:
    """The page's record of one step row (see the module docstring); ``goal`` only when it changed."""
    events = json.loads(row.get("perturbations") or "[]")
    meta = json.loads(row.get("meta") or "{}")
    obs = row.get("observation") or ""
    out: dict[str, Any] = {
        "t": row.get("t"), "obs": obs, "marks": marks(obs, events), "events": events,
        "action": row.get("action"), "source": row.get("source"),
        "cands": [candidate_view(c) for c in row.get("candidates") or []],
        "verifier": num(row.get("verifier_score")), "p": num(row.get("router_prob")),
        "threshold": num(meta.pop("threshold", None)), "reward": num(row.get("reward")),
        "cost": num(row.get("cost")), "end": "terminated" if row.get("terminated") else
        "truncated" if row.get("truncated") else None, "expert": row.get("expert_action"),
        "admissible": row.get("admissible_actions"),
        "features": None if row.get("features") is None else [num(x, 3) for x in row["features"]]}
    goal = row.get("goal")
    if goal != prev_goal:
        out["goal"] = goal
        out["goal_marks"] = marks(goal or "", events, ("goal",))
    extra = {k: _plain(v) for k, v in row.items() if k not in RENDERED and v is not None}
    extra.update({f"meta.{k}": _plain(v) for k, v in meta.items()})
    if extra:
        out["extra"] = extra
    return out


def episode_steps(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The page's records of one episode's step rows (sorted by ``t``)."""
    out, goal = [], None
    for r in sorted(rows, key=lambda r: r["t"]):
        out.append(step_view(r, goal))
        goal = r.get("goal")
    return out
