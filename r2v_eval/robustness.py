"""Robustness metrics of an evaluation grid, computed from the runner's shards alone.

Per (benchmark, perturbation) cell:

* SR over the episodes that ran, with a 95% percentile bootstrap CI over episodes; episodes that could not be run
  (``error`` set: ``infra:<kind>`` for the agent's infrastructure, anything else an env/sandbox fault) are
  excluded and counted in their own columns, never scored as losses;
* the robustness drop vs the clean (``none``) cell: clean SR minus this cell's SR on the same (task, z)
  episodes, with a paired bootstrap CI (the episodes share tasks and seeds, so pairing removes the task spread);
* pass^k over seeds (tau-bench): for a task run on n seeds with c successes, C(c, k) / C(n, k), averaged over
  tasks: the chance that k independent perturbation draws all succeed;
* worst-seed SR: the lowest per-seed SR (the tail that a CVaR objective cares about);
* mean steps, tokens, cost and agent latency per episode, the agent's mean latency per step, and retries
  (requests retried inside the agent, and episodes rerun by the grid's retry passes);
* for model agents, the share of grounded steps whose action was not named exactly (``normalised``,
  ``similar``, ``raw`` or ``empty``, :mod:`r2v_agents.grounding`), and for every agent the share of played
  actions that are invalid (:func:`r2v_agents.grounding.is_invalid`: not among the step's admissible actions,
  or outside HumanEval+'s / TerminalBench's command syntax); steps whose admissible list a perturbation cut
  short are not judged, since a valid action may be among the hidden ones.

The bootstrap helpers are the ones the pipeline's Table 1 uses (:func:`r2v_eval.stats.episode_metrics`,
:func:`r2v_eval.stats.paired_bootstrap`).

Example:
    >>> pass_hat_k([3, 1, 0], 3, 1), pass_hat_k([3, 1, 0], 3, 2), pass_hat_k([3, 1, 0], 3, 3)
    (0.4444444444444444, 0.3333333333333333, 0.3333333333333333)
"""

from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from r2v_agents.grounding import GROUNDING_KINDS, is_invalid
from r2v_agents.shards import load_rows
from r2v_eval.cells import cell_episodes, failed_request_retries, outcomes, paired, scored, sr_metrics
from r2v_eval.results import cell_entry, env_slug

CLEAN = "none"
NON_EXACT = frozenset(GROUNDING_KINDS) - {"exact"}
"""Grounding kinds where the model did not name an action exactly (``likelihood`` choices name one by design)."""


def _step_meta(episodes: Mapping[str, Mapping[str, Any]]) -> dict[str, dict[str, float]]:
    """Per episode, summed over its logged steps: tokens, latency and request retries (from step ``meta``),
    steps with a latency, grounded steps and those not grounded exactly, and judgeable / invalid actions."""
    keys = ("tokens", "latency_s", "latency_steps", "retries", "has_tokens", "has_latency", "grounded",
            "non_exact", "judged", "invalid")
    out: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(keys, 0.0))
    cols = ["episode_id", "benchmark", "action", "admissible_actions", "grounding", "perturbations", "meta"]
    for d in sorted({e["dir"] for e in episodes.values()}):
        for row in load_rows(d, "steps", columns=cols):
            if episodes.get(row["episode_id"], {}).get("dir") != d:
                continue  # a step of an attempt that was superseded by a retry
            meta = json.loads(row["meta"] or "{}")
            acc = out[row["episode_id"]]
            if "prompt_tokens" in meta or "completion_tokens" in meta:
                acc["tokens"] += meta.get("prompt_tokens", 0) + meta.get("completion_tokens", 0)
                acc["has_tokens"] = 1.0
            if "latency_s" in meta:
                acc["latency_s"] += float(meta["latency_s"])
                acc["latency_steps"] += 1
                acc["has_latency"] = 1.0
            acc["retries"] += sum((meta.get("retries") or {}).values())
            if row.get("grounding") in GROUNDING_KINDS:  # a reply went through the chain (not a likelihood pick)
                acc["grounded"] += 1
                acc["non_exact"] += row["grounding"] in NON_EXACT
            # a list a perturbation cut short cannot judge membership: the action may be valid but hidden
            hidden = any(ev.get("channel") == "admissible_actions" for ev in json.loads(row["perturbations"] or "[]"))
            bad = None if hidden and row["admissible_actions"] is not None else \
                is_invalid(row["action"] or "", row["admissible_actions"], row["benchmark"] or "")
            if bad is not None:
                acc["judged"] += 1
                acc["invalid"] += bad
    for e in episodes.values():  # the retries of the request that finally failed are in the error text
        if retried := failed_request_retries(e["error"]):
            out[e["episode_id"]]["retries"] += retried
    return out


def _share(meta: Sequence[Mapping[str, float]], part: str, whole: str) -> float | None:
    """``100 * sum(part) / sum(whole)`` over episodes (None when ``whole`` is 0)."""
    total = sum(m[whole] for m in meta)
    return 100 * sum(m[part] for m in meta) / total if total else None


def pass_hat_k(successes: Sequence[int], n: int, k: int) -> float:
    """tau-bench's pass^k: mean over tasks of C(c, k) / C(n, k) (``successes[i]`` = c of task i out of n)."""
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}]")
    return float(np.mean([math.comb(c, k) / math.comb(n, k) for c in successes])) if successes else float("nan")


def cell_metrics(cell: str | os.PathLike, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Every metric of one cell (module docstring): :func:`r2v_eval.cells.sr_metrics` (the one SR rule) and the
    robustness columns; SR fields are None when no episode could be run."""
    eps = cell_episodes(cell)
    meta = _step_meta(eps)
    out: dict[str, Any] = {
        **sr_metrics(cell, n_boot, seed, episodes=eps),
        "request_retries": int(sum(m["retries"] for m in meta.values())),
        "episode_reruns": int(sum(e["attempts"] - 1 for e in eps.values())),
        "benchmark": next((e["benchmark"] for e in eps.values()), None),
        "pass_k": {}, "seed_sr": {}, "worst_seed": None}
    r = scored(eps)
    if r:
        by_seed: dict[int, list[bool]] = defaultdict(list)
        by_task: dict[str, list[bool]] = defaultdict(list)
        for e in r:
            by_seed[int(e["z"])].append(bool(e["success"]))
            by_task[e["task_id"]].append(bool(e["success"]))
        out["seed_sr"] = {str(z): 100 * float(np.mean(v)) for z, v in sorted(by_seed.items())}
        z_worst = min(by_seed, key=lambda z: (np.mean(by_seed[z]), z))
        out["worst_seed"] = {"z": z_worst, "sr": 100 * float(np.mean(by_seed[z_worst]))}
        n = max(len(v) for v in by_task.values())
        full = [sum(v) for v in by_task.values() if len(v) == n]  # pass^k needs every seed of a task to have run
        out["pass_k"] = {str(k): 100 * pass_hat_k(full, n, k) for k in range(1, n + 1)} if full else {}
        out["pass_k_tasks"] = len(full)
        out["mean_steps"] = float(np.mean([e["steps"] for e in r]))
        out["mean_cost"] = float(np.mean([e["cost"] for e in r]))
        m = [meta[e["episode_id"]] for e in r if e["episode_id"] in meta]
        has_tok = [x["tokens"] for x in m if x["has_tokens"]]
        has_lat = [x["latency_s"] for x in m if x["has_latency"]]
        out["mean_tokens"] = float(np.mean(has_tok)) if has_tok else None
        out["mean_latency_s"] = float(np.mean(has_lat)) if has_lat else None
        lat_steps = sum(x["latency_steps"] for x in m)
        out["step_latency_s"] = sum(x["latency_s"] for x in m) / lat_steps if lat_steps else None
        out["non_exact_pct"] = _share(m, "non_exact", "grounded")
        out["invalid_pct"] = _share(m, "invalid", "judged")
    return out


def paired_drop(a: Mapping[str, tuple[float, int, int]], b: Mapping[str, tuple[float, int, int]],
                n_boot: int = 1000, seed: int = 0) -> dict[str, Any] | None:
    """SR of ``a`` minus SR of ``b`` (points) over the episodes both ran, with a paired bootstrap CI."""
    d = paired(a, b, n_boot, seed)
    return d and {"episodes": d["episodes"], "sr_diff": d["sr_diff"], "sr_diff_ci": d["sr_diff_ci"]}


def cells_of(out_dir: str | os.PathLike) -> list[tuple[str, str, Path]]:
    """``(env slug, setting, cell dir)`` of every cell of an evaluation directory, in manifest order."""
    out = Path(out_dir)
    order: list[tuple[str, str]] = []
    mpath = out / "manifest.json"
    if mpath.exists():
        manifest = json.loads(mpath.read_text())
        grid, envs = manifest["grid"], manifest.get("envs") or {}  # envs: a served URL -> the id its cells bear
        names = [Path(p).stem if p.endswith((".yaml", ".yml")) else p for p in grid["perturbations"]]
        order = [(env_slug(envs.get(e, e)), s) for e in grid["env_ids"] for s in names]
    found = {(p.parent.name, p.name) for p in (out / "runs").glob("*/*") if p.is_dir()}
    keys = [k for k in order if k in found] + sorted(found - set(order))
    return [(e, s, out / "runs" / e / s) for e, s in keys]


def summarise(out_dir: str | os.PathLike, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``results.json`` of an evaluation directory (:mod:`r2v_eval.results`' schema): the manifest, every cell's
    metrics and its drop vs clean."""
    out = Path(out_dir)
    manifest = json.loads((out / "manifest.json").read_text()) if (out / "manifest.json").exists() else {}
    agent = (manifest.get("agent") or {}).get("name", "")
    cells = []
    for env, setting, cdir in cells_of(out):
        m = cell_metrics(cdir, n_boot, seed)
        clean = out / "runs" / env / CLEAN
        m["drop_vs_clean"] = None
        if setting != CLEAN and clean.is_dir():
            d = paired_drop(outcomes(clean), outcomes(cdir), n_boot, seed)
            m["drop_vs_clean"] = d and {"episodes": d["episodes"], "drop": d["sr_diff"], "drop_ci": d["sr_diff_ci"]}
        cells.append(cell_entry(out, cdir, env, setting, agent, m))
    return {"agent": manifest.get("agent"), "grid": manifest.get("grid"), "bootstrap": n_boot,
            "bootstrap_seed": seed, "cells": cells}


def compare(a_dir: str | os.PathLike, b_dir: str | os.PathLike, n_boot: int = 1000, seed: int = 0
            ) -> list[dict[str, Any]]:
    """Run A minus run B per shared cell: SR points with paired CIs over the episodes both ran."""
    a_cells = {(e, s): d for e, s, d in cells_of(a_dir)}
    rows = []
    for e, s, d in cells_of(b_dir):
        if (e, s) not in a_cells:
            continue
        oa, ob = outcomes(a_cells[(e, s)]), outcomes(d)
        diff = paired_drop(oa, ob, n_boot, seed)
        sr = lambda o, keys: 100 * float(np.mean([o[k][0] for k in keys])) if keys else None  # noqa: E731
        common = sorted(set(oa) & set(ob))
        rows.append({"env": e, "perturbation": s, "episodes": len(common), "sr_a": sr(oa, common),
                     "sr_b": sr(ob, common), "diff": None if diff is None else diff["sr_diff"],
                     "diff_ci": None if diff is None else diff["sr_diff_ci"]})
    return rows
