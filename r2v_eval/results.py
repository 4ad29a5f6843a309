"""The one ``results.json`` schema of every evaluation: a list of cells keyed by (env, perturbation, agent).

``r2v eval`` writes one agent over envs x perturbation settings (:func:`r2v_eval.robustness.summarise`); the
pipeline's evaluation (Table 1, its per-type conditions and threshold sweeps) and ``r2v rl``'s write many agents
(methods) over one env (:func:`r2v_train.evaluation.methods.evaluate`). Both write ``cells``, each a record of
:func:`cell_entry`: where it ran (``env`` slug, ``perturbation``, ``agent``, ``run_dir`` relative to the results
file) and its metrics by the one counting rule (:func:`r2v_eval.robustness.cell_metrics` over
:mod:`r2v_eval.cells`). A threshold-sweep cell also carries ``sweep`` (the swept router) and ``threshold``.

The tables are views over the cells: :func:`by_setting` (Table 1 and the per-type table: ``{setting: {agent:
cell}}``), :func:`main_table` (Table 1's cells), :func:`sweeps` (a router's cost/success curve). A results file
written before the cells (``conditions`` x methods with a ``runs`` map and ``sweeps``) is read through
:func:`upgrade`, so older run directories still open in the viewer, resume and compare.

Example:
    >>> res = {"main_condition": "c", "cells": [
    ...     {"env": "E", "perturbation": "c", "agent": "slm", "run_dir": "runs/c/slm", "sr": 50.0},
    ...     {"env": "E", "perturbation": "c", "agent": "heuristic@0.2", "sweep": "heuristic", "threshold": 0.2,
    ...      "run_dir": "runs/c/heuristic@0.2", "sr": 60.0}]}
    >>> main_table(res)["slm"]["sr"], [c["threshold"] for c in sweeps(res)["heuristic"]]
    (50.0, [0.2])
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any


def env_slug(env_id: str) -> str:
    """An env id as a directory name (``R2V/TextWorld-v0`` -> ``R2V_TextWorld-v0``)."""
    return env_id.replace("/", "_").replace(":", "_")


def cell_entry(out_dir: str | os.PathLike, cell: str | os.PathLike, env: str, perturbation: str, agent: str,
               metrics: Mapping[str, Any], **extra: Any) -> dict[str, Any]:
    """One cell of ``results.json``: its keys (``env`` as a slug), ``run_dir`` relative to ``out_dir``, any
    ``extra`` fields (a sweep's ``sweep`` and ``threshold``), then ``metrics``."""
    return {"env": env_slug(env), "perturbation": perturbation, "agent": agent, **extra,
            "run_dir": os.path.relpath(cell, out_dir), **metrics}


def cells(results: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cells of a results file of either age (:func:`upgrade`)."""
    return upgrade(results)["cells"]


def by_setting(results: Mapping[str, Any], sweeps_too: bool = False) -> dict[str, dict[str, dict[str, Any]]]:
    """``{perturbation: {agent: cell}}``, both levels sorted by name as the key-sorted file lists them; sweep
    cells are left out unless ``sweeps_too``."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for c in cells(results):
        if sweeps_too or "sweep" not in c:
            out.setdefault(c["perturbation"], {})[c["agent"]] = c
    return {s: dict(sorted(a.items())) for s, a in sorted(out.items())}


def settings(results: Mapping[str, Any]) -> list[str]:
    """The perturbation settings of a results file, the main one (``main_condition``, if any) first."""
    names = list(by_setting(results, sweeps_too=True))
    main = results.get("main_condition")
    return ([main] if main in names else []) + [s for s in names if s != main]


def main_table(results: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """``{agent: cell}`` of the main condition (Table 1), sweeps left out."""
    return by_setting(results).get(results["main_condition"], {})


def sweeps(results: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """``{router: [cell, ...]}`` of the threshold sweeps, each sorted by threshold."""
    out: dict[str, list[dict[str, Any]]] = {}
    for c in cells(results):
        if "sweep" in c:
            out.setdefault(c["sweep"], []).append(c)
    return {k: sorted(v, key=lambda c: c["threshold"]) for k, v in sorted(out.items())}


def runs(results: Mapping[str, Any], setting: str) -> dict[str, str]:
    """``{agent: run_dir}`` (relative to the results file) of a setting's cells, sweeps left out; KeyError for a
    setting the file does not hold."""
    return {a: c["run_dir"] for a, c in by_setting(results)[setting].items()}


def upgrade(results: Mapping[str, Any]) -> Mapping[str, Any]:
    """A results file in the cells schema: itself, or one written before it with its ``conditions``, ``runs`` and
    ``sweeps`` turned into cells (the env slug from its config)."""
    if "cells" in results or "conditions" not in results:
        return results
    env = env_slug((results.get("config") or {}).get("env_id", ""))
    runs = results.get("runs") or {}
    out = [{"env": env, "perturbation": s, "agent": a, "run_dir": runs.get(s, {}).get(a, f"runs/{s}/{a}"), **m}
           for s, agents in results["conditions"].items() for a, m in agents.items()]
    for router, rows in (results.get("sweeps") or {}).items():
        out += [{"env": env, "perturbation": results["main_condition"], "agent": f"{router}@{r['threshold']:g}",
                 "sweep": router, "run_dir": r["run"], **{k: v for k, v in r.items() if k != "run"}} for r in rows]
    rest = {k: v for k, v in results.items() if k not in ("conditions", "runs", "sweeps")}
    return {**rest, "cells": out}
