"""A cell and the one rule of which of its episodes a success rate counts, shared by every evaluation: ``r2v eval``'s
grid, the pipeline's Table 1 (its methods, sweeps, ablations and router study), ``r2v rl``'s curve and its comparison
with the source run, DRRN's matrix and the viewer.

A *cell* is one runner directory (one agent on one env under one perturbation setting, tasks x seeds) and its retry
passes ``<cell>/retry-1``, ``retry-2``, ... (:func:`run_cell`). The rule:

1. **The last attempt counts.** An episode rerun by a retry pass takes its place in the cell's grid order.
2. **An episode that could not be run is not a loss.** A non-null ``error`` (``infra:<kind>``: the agent's
   infrastructure after its own request retries; anything else: an env or sandbox fault) leaves the episode out of
   SR and LLM% and counts it in ``not_run`` (by kind, :func:`failure_kind`). An agent that answers badly is scored:
   its episode ran.
3. **SR and LLM% are over the scored episodes in grid order** (the runner's shard order, the same for every worker
   count), with 95% percentile bootstrap CIs over episodes (:func:`r2v_eval.stats.episode_metrics`). Comparisons of
   two cells pair the episodes both scored (:func:`paired`).

Example:
    >>> failure_kind(None), failure_kind("infra:rate_limit: 3 attempts; 429"), failure_kind("KeyError: 'x'")
    (None, 'infra:rate_limit', 'env')
"""

from __future__ import annotations

import os
import re
import sys
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

from r2v_agents.runner import RunConfig, RunSummary, run
from r2v_agents.shards import load_rows
from r2v_eval.stats import episode_metrics, paired_bootstrap

_INFRA = re.compile(r"^infra:(\w+): (\d+) attempts?; ")
EPISODE_COLUMNS = ["episode_id", "benchmark", "task_id", "z", "success", "steps", "return", "teacher_calls", "cost",
                   "error"]

Outcomes = dict[str, tuple[float, int, int]]
"""``episode_id -> (success, steps, teacher steps)`` of the scored episodes of a cell, in grid order."""


def run_cell(policy: Any, name: str, config: RunConfig, retries: int = 1, backoff_s: float = 2.0) -> tuple[
        RunSummary, int]:
    """Run ``policy`` over ``config``'s grid into ``config.out_dir`` (resumable), then rerun the episodes that could
    not be run in up to ``retries`` passes (``<cell>/retry-<k>``, after a pause of ``backoff_s`` doubling per pass).
    Returns the main run's summary and how many episodes the passes reran."""

    cdir = Path(config.out_dir)
    summary, reruns = run(policy, config, policy_name=name), 0
    for k in range(1, retries + 1):
        failed = [(e["task_id"], e["z"]) for e in cell_episodes(cdir).values() if e["error"] is not None]
        if not failed:
            break
        if not (cdir / f"retry-{k}").exists():  # a resumed pass has nothing to wait for
            time.sleep(backoff_s * 2 ** (k - 1))
        if config.progress:
            print(f"  retry pass {k}: {len(failed)} episode(s) that could not be run", file=sys.stderr)
        for z in sorted({z for _, z in failed}):
            tasks = tuple(t for t, zz in failed if zz == z)
            retry = replace(config, out_dir=str(cdir / f"retry-{k}"), task_ids=tasks, seeds=(z,))
            reruns += run(policy, retry, policy_name=name).episodes
    return summary, reruns


def attempt_dirs(cell: str | os.PathLike) -> list[Path]:
    """The runner directories of a cell: the main run, then its retry passes in order."""
    cell = Path(cell)
    retries = sorted((p for p in cell.glob("retry-*") if p.is_dir()), key=lambda p: int(p.name.split("-")[1]))
    return [cell, *retries]


def cell_episodes(cell: str | os.PathLike) -> dict[str, dict[str, Any]]:
    """``episode_id -> episode row`` of a cell in grid order, the last attempt of each episode winning, with
    ``attempts`` (how many times it ran) and ``dir`` (the runner directory of the attempt that counts)."""
    out: dict[str, dict[str, Any]] = {}
    for d in attempt_dirs(cell):
        for row in load_rows(d, "episodes", columns=EPISODE_COLUMNS):
            prev = out.get(row["episode_id"])
            out[row["episode_id"]] = {**row, "attempts": (prev["attempts"] if prev else 0) + 1, "dir": str(d)}
    return out


def failure_kind(error: str | None) -> str | None:
    """``None`` for an episode that ran, else the kind of failure that stopped it (``infra:<kind>`` or ``env``)."""
    if error is None:
        return None
    m = _INFRA.match(error) or re.match(r"^infra:(\w+)", error)
    return f"infra:{m.group(1)}" if m else "env"


def failed_request_retries(error: str | None) -> int:
    """How many times the agent retried the request whose final failure stopped an episode (0 for any other)."""
    m = _INFRA.match(error or "")
    return int(m.group(2)) - 1 if m else 0


def scored(episodes: Mapping[str, Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The episodes (of :func:`cell_episodes`) that ran, in grid order: the ones SR counts."""
    return [e for e in episodes.values() if e["error"] is None]


def sr_metrics(cell: str | os.PathLike, n_boot: int = 1000, seed: int = 0,
               episodes: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """SR, LLM% and cost of a cell by the module's rule: ``episodes`` (all, after retries), ``scored``, ``not_run``
    (by kind), ``steps``, ``teacher_steps``, ``sr`` and ``llm_pct`` with 95% CIs (None when nothing ran), ``cost``.
    ``episodes`` may pass the cell's :func:`cell_episodes` when the caller has read them already."""

    eps = cell_episodes(cell) if episodes is None else episodes
    kinds = Counter(k for e in eps.values() if (k := failure_kind(e["error"])) is not None)
    ran = scored(eps)
    out: dict[str, Any] = {"episodes": len(eps), "scored": len(ran), "not_run": sum(kinds.values()),
                           "not_run_by_kind": dict(sorted(kinds.items()))}
    if not ran:
        return {**out, "steps": 0, "teacher_steps": 0, "sr": None, "sr_ci": None, "llm_pct": None,
                "llm_pct_ci": None, "cost": 0.0}
    m = episode_metrics(ran, n_boot, seed)
    return {**out, **{k: m[k] for k in ("steps", "teacher_steps", "sr", "sr_ci", "llm_pct", "llm_pct_ci", "cost")}}


def outcomes(cell: str | os.PathLike) -> Outcomes:
    """:data:`Outcomes` of a cell (paired comparisons)."""
    return {e["episode_id"]: (float(e["success"]), int(e["steps"]), int(e["teacher_calls"]))
            for e in scored(cell_episodes(cell))}


def paired(a: Outcomes, b: Outcomes, n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """SR and LLM% of ``a`` minus ``b`` over the episodes both scored, with paired 95% bootstrap CIs
    (:func:`r2v_eval.stats.paired_bootstrap`); None when they share no scored episode."""
    common = [k for k in a if k in b]
    if not common:
        return None
    return paired_bootstrap({k: a[k] for k in common}, {k: b[k] for k in common}, n_boot, seed)
