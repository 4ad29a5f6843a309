"""Trajectory-state router features beyond Eq. 6's 15 (the ``trajectory`` feature set of the router study).

Eq. 6 describes the current step (candidate entropies, verifier scores, position); failed rollouts run to the
step cap, so step count dominated the paper features (validation AUC ~0.77 on the default run). These features
describe the state the episode is in, from what the agent has seen so far (never oracle keys):

* ``steps_without_progress``: steps since the last positive reward (the start counts as progress), / H;
* ``repeat_share``: share of the last :data:`WINDOW` actions that repeat an earlier action of that window;
* ``last_action_count``: how often the last action was played so far, / :data:`WINDOW` (capped at 1);
* ``last_obs_failure``: 1 when the current observation shows a failure (the benchmark verifier's failure
  patterns, e.g. TextWorld's "you can't", "that's not a verb");
* ``failure_share``: share of the observations so far that showed a failure;
* ``perturbation_events``: visible perturbation markers seen so far (flaky errors, HTTP failures, the stale-cache
  and truncation markers, injected directives), / (t + 1).

They are computed by :func:`trajectory_features` from a :class:`~r2v_agents.context.Context` at decision time,
and from logged step rows (:func:`context_from_steps`) for training, so both see the same numbers.

Example:
    >>> from r2v_agents.context import Context
    >>> ctx = Context.start("Take the coin.", "A room.", {}, max_steps=10)
    >>> ctx = ctx.advance("take coin", "You take the coin.", 1.0, {})
    >>> for _ in range(3):
    ...     ctx = ctx.advance("go east", "You can't go that way.", 0.0, {})
    >>> f = {k: round(v, 3) for k, v in zip(TRAJECTORY_NAMES, trajectory_features(ctx).tolist())}
    >>> f["steps_without_progress"], f["repeat_share"], f["last_obs_failure"], f["failure_share"]
    (0.3, 0.5, 1.0, 0.75)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from r2v_agents.context import Context, Turn
from r2v_agents.verifiers import verifier_for
from r2v_envs.perturbations.templates import (
    FLAKY_ERRORS,
    HTTP_FAILURES,
    INJECTION_MARKERS,
    STALE_MARKER,
    TRUNCATION_MARKER,
)

TRAJECTORY_NAMES: tuple[str, ...] = ("steps_without_progress", "repeat_share", "last_action_count",
                                     "last_obs_failure", "failure_share", "perturbation_events")
FEATURE_SETS: tuple[str, ...] = ("full", "trajectory")
"""``full``: the paper's 15 (Eq. 6); ``trajectory``: those 15 followed by :data:`TRAJECTORY_NAMES`."""
WINDOW = 5
# generic failure strings for benchmarks whose verifier has no failure vocabulary
_GENERIC_FAILURES = ("error", "failed", "not found", "you can't", "nothing happens")
_MARKERS = tuple(m.lower() for m in (STALE_MARKER, TRUNCATION_MARKER, *HTTP_FAILURES, *INJECTION_MARKERS,
                                     *(e for errs in FLAKY_ERRORS.values() for e in errs)))
_PATTERNS: dict[str, tuple[str, ...]] = {}


def failure_patterns(benchmark: str) -> tuple[str, ...]:
    """Lower-case failure substrings of ``benchmark``'s verifier (its ``config.failure_patterns``), else generic."""
    if benchmark not in _PATTERNS:
        try:
            config = getattr(verifier_for(benchmark or "textworld"), "config", None)
        except Exception:  # noqa: BLE001 - an unknown benchmark gets the generic vocabulary
            config = None
        _PATTERNS[benchmark] = tuple(getattr(config, "failure_patterns", ()) or _GENERIC_FAILURES)
    return _PATTERNS[benchmark]


def _shows(text: str, patterns: Sequence[str]) -> bool:
    low = text.lower()
    return any(p in low for p in patterns)


def trajectory_features(ctx: Context) -> np.ndarray:
    """The :data:`TRAJECTORY_NAMES` of one context, as float32."""
    horizon = float(ctx.max_steps or max(1, len(ctx.history)))
    turns = ctx.history
    last_progress = max((i + 1 for i, t in enumerate(turns) if (t.reward or 0.0) > 0), default=0)
    actions = [t.action.strip().lower() for t in turns]
    recent = actions[-WINDOW:]
    repeats = len(recent) - len(set(recent))
    counts = Counter(actions)
    patterns = failure_patterns(ctx.benchmark)
    # the context keeps each turn's resulting observation (the last one is the current observation)
    observations = [t.observation for t in turns] if turns else [ctx.observation]
    failures = [_shows(o, patterns) for o in observations]
    markers = sum(_shows(o, _MARKERS) for o in observations) + _shows(ctx.goal, _MARKERS)
    values = (
        (len(turns) - last_progress) / horizon,
        repeats / len(recent) if recent else 0.0,
        min(1.0, counts[actions[-1]] / WINDOW) if actions else 0.0,
        float(failures[-1]),
        float(np.mean(failures)),
        markers / (len(turns) + 1),
    )
    return np.asarray(values, dtype=np.float32)


def context_from_steps(rows: Sequence[Mapping[str, Any]], t: int, benchmark: str = "") -> Context:
    """The context the policy saw at step ``t`` of one logged episode (its step rows in order, as the runner
    writes them: ``goal``, ``observation``, ``action``, ``reward``, ``max_steps``).

    Turn i holds action i, the observation it produced (row i+1's observation) and its reward."""
    turns = tuple(Turn(action=rows[i]["action"], observation=rows[i + 1]["observation"], reward=rows[i]["reward"])
                  for i in range(t))
    row = rows[t]
    return Context(goal=row["goal"], observation=row["observation"], history=turns, step=t,
                   max_steps=row.get("max_steps"), benchmark=benchmark)


def logged_trajectory_features(steps: Sequence[Mapping[str, Any]], benchmark: str = "") -> dict[tuple[str, int], np.ndarray]:
    """(episode_id, t) -> :func:`trajectory_features` for every logged step row (any order, many episodes)."""
    by_episode: dict[str, list[Mapping[str, Any]]] = {}
    for r in steps:
        by_episode.setdefault(r["episode_id"], []).append(r)
    out = {}
    for episode, rows in by_episode.items():
        rows = sorted(rows, key=lambda r: r["t"])
        bench = benchmark or str(rows[0].get("benchmark", ""))
        for t in range(len(rows)):
            out[(episode, t)] = trajectory_features(context_from_steps(rows, t, bench))
    return out
