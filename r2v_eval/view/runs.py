"""What a run directory holds, read into the viewer's index: its kind, summary table, plots, manifest and episodes.

Three layouts are recognised (:func:`detect`):

* ``eval``: an ``r2v eval`` directory (``manifest.json`` with a grid, ``results.json`` with ``cells``, one runner
  directory per (benchmark, perturbation) cell under ``runs/<env>/<setting>`` with its ``retry-<k>`` passes);
* ``pipeline``: an ``r2v pipeline`` run (``eval/results.json`` with ``conditions`` x ``methods``, runner
  directories under ``eval/runs/<condition>/<method>``, ``report.md`` and its PNGs at the top), or its ``eval/``
  directory alone;
* ``runner``: a bare runner directory (``run.json`` and the shards).

Every number in the summary comes from the run's own ``results.json`` (computed from its shards by
:mod:`r2v_eval.robustness` or the pipeline's evaluation); the episode list comes from the episode shards, the last
attempt of an episode winning (:func:`r2v_eval.cells.cell_episodes`).

Example:
    >>> fmt_num(41.234), fmt_ci([41.234, 60.0]), fmt_num(None)
    ('41.2', '[41.2, 60.0]', '-')
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from r2v_agents.runner import RUN_FILE
from r2v_agents.shards import shard_files
from r2v_eval.cells import cell_episodes, failure_kind
from r2v_eval.robustness import cells_of
from r2v_eval.stats import fmt_ci, fmt_num

EPISODE_COLUMNS = ("cell", "episode_id", "benchmark", "task_id", "z", "success", "steps", "teacher_calls", "cost",
                   "not_run", "error", "attempts")
"""The columns of the viewer's episode list (one array per episode, in this order)."""
MAX_PLOT_BYTES = 2_000_000


class NotARunError(ValueError):
    """The directory is none of the layouts the viewer reads."""


@dataclass(frozen=True)
class Cell:
    """One runner directory of a run: its condition (perturbation setting) and method (agent)."""

    env: str
    condition: str
    method: str
    dir: Path


def _json(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def detect(run_dir: str | os.PathLike) -> tuple[str, Path]:
    """``(kind, eval dir)`` of a run directory (see the module docstring); raises :class:`NotARunError`."""
    d = Path(run_dir)
    if not d.is_dir():
        raise NotARunError(f"{d} is not a directory")
    if (d / "eval" / "results.json").is_file() or (d / "eval" / "runs").is_dir():
        return "pipeline", d / "eval"
    res = _json(d / "results.json") or {}
    if "conditions" in res and "methods" in res:
        return "pipeline", d
    if "cells" in res or (d / "manifest.json").is_file() and (d / "runs").is_dir():
        return "eval", d
    if (d / RUN_FILE).is_file() or shard_files(d, "episodes"):
        return "runner", d
    raise NotARunError(f"{d} holds no r2v eval run, r2v pipeline run or runner directory (no results.json, "
                       f"manifest.json + runs/, eval/ or {RUN_FILE})")


def list_cells(kind: str, eval_dir: Path) -> list[Cell]:
    """The runner directories of a run, in report order."""
    if kind == "eval":
        return [Cell(env, setting, "", cdir) for env, setting, cdir in cells_of(eval_dir)]
    if kind == "runner":
        setting = (_json(eval_dir / RUN_FILE) or {}).get("setting", {})
        return [Cell(setting.get("env_id", ""), _condition_name(setting.get("env_kwargs", {})),
                     setting.get("policy", ""), eval_dir)]
    res = _json(eval_dir / "results.json") or {}
    runs: dict[str, dict[str, str]] = res.get("runs") or {}
    if not runs:  # an evaluation still running: whatever directories exist
        runs = {c.name: {m.name: str(m.relative_to(eval_dir)) for m in sorted(c.iterdir()) if m.is_dir()}
                for c in sorted((eval_dir / "runs").glob("*")) if c.is_dir()}
    env = (res.get("config") or {}).get("env_id", "")
    order = {m: i for i, m in enumerate(res.get("methods") or [])}  # results.json's keys are sorted: Table 1's order
    conds = conditions(res) or list(runs)
    cells = [Cell(env, cond, method, eval_dir / runs[cond][method]) for cond in conds if cond in runs
             for method in sorted(runs[cond], key=lambda m: (order.get(m, len(order)), m))]
    for method, sweep in (res.get("sweeps") or {}).items():
        main = res.get("main_condition", "")
        cells += [Cell(env, main, f"{method}@{row['threshold']:g}", eval_dir / row["run"]) for row in sweep]
    return cells


def conditions(res: Mapping[str, Any]) -> list[str]:
    """A pipeline's conditions, the main one first (results.json's keys are sorted)."""
    main = res.get("main_condition")
    conds = list(res.get("conditions") or {})
    return ([main] if main in conds else []) + [c for c in conds if c != main]


def _condition_name(env_kwargs: Mapping[str, Any]) -> str:
    spec = env_kwargs.get("perturbations")
    return "none" if spec is None else spec if isinstance(spec, str) else "custom"


def episode_rows(cells: list[Cell]) -> tuple[list[list[Any]], list[tuple[int, str, str]]]:
    """The episode list (rows of :data:`EPISODE_COLUMNS`) and, per row, ``(cell index, runner dir, episode id)``
    to read its steps from."""
    rows, where = [], []
    for i, cell in enumerate(cells):
        for eid, e in cell_episodes(cell.dir).items():
            rows.append([i, eid, e["benchmark"], e["task_id"], int(e["z"]), bool(e["success"]), int(e["steps"]),
                         int(e["teacher_calls"]), round(float(e["cost"]), 6), failure_kind(e["error"]), e["error"],
                         int(e["attempts"])])
            where.append((i, e["dir"], eid))
    return rows, where


def summary(kind: str, run_dir: Path, eval_dir: Path) -> dict[str, Any]:
    """The summary tab: report tables (``{"title", "columns", "rows"}`` of display strings), plots, manifests."""
    res = _json(eval_dir / "results.json")
    tables: list[dict[str, Any]] = []
    if kind == "eval" and res:
        tables.append(_eval_table(res))
    elif kind == "pipeline" and res:
        tables += _pipeline_tables(res)
    manifests = {name: m for name, path in (("manifest", run_dir / "manifest.json"),
                                            ("pipeline", run_dir / "pipeline.json"),
                                            ("run", eval_dir / RUN_FILE))
                 if (m := _json(path)) is not None}
    report = next((p for p in (run_dir / "report.md", eval_dir / "report.md") if p.is_file()), None)
    return {"tables": tables, "plots": plots(run_dir, eval_dir), "manifests": manifests,
            "report": report.read_text() if report else None,
            "agent": ((manifests.get("manifest") or {}).get("agent") or {}).get("name")}


def _eval_table(res: Mapping[str, Any]) -> dict[str, Any]:
    """``r2v eval``'s report table (:func:`r2v_eval.robustness_report.render`'s main columns)."""
    head = ["benchmark", "perturbation", "episodes", "SR (%)", "SR 95% CI", "drop (points)", "drop 95% CI",
            "pass^k (k=1..n)", "worst seed SR", "steps", "not run", "retries"]
    rows = []
    for c in res["cells"]:
        d = c.get("drop_vs_clean")
        pk = " / ".join(fmt_num(c["pass_k"][k]) for k in sorted(c["pass_k"], key=int)) if c.get("pass_k") else "-"
        worst = "-" if not c.get("worst_seed") else f"{c['worst_seed']['sr']:.1f} (z={c['worst_seed']['z']})"
        kinds = ", ".join(f"{k} {v}" for k, v in (c.get("not_run_by_kind") or {}).items())
        rows.append([str(c.get("benchmark") or c["env"]), c["perturbation"], str(c["scored"]), fmt_num(c["sr"]),
                     fmt_ci(c["sr_ci"]), fmt_num(d["drop"]) if d else "-", fmt_ci(d["drop_ci"]) if d else "-", pk, worst,
                     fmt_num(c.get("mean_steps")), f"{c['not_run']}" + (f" ({kinds})" if kinds else ""),
                     f"{c.get('request_retries', 0)} / {c.get('episode_reruns', 0)}"])
    return {"title": "SR by benchmark and perturbation (95% bootstrap CIs)", "columns": head, "rows": rows}


def _pipeline_tables(res: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Per condition, the methods' SR and LLM% with CIs (Table 1 for the main condition), and any sweeps."""
    head = ["method", "SR (%)", "SR 95% CI", "LLM%", "LLM% 95% CI", "episodes"]

    def row(name: str, c: Mapping[str, Any]) -> list[str]:
        return [name, fmt_num(c["sr"]), fmt_ci(c["sr_ci"]), fmt_num(c["llm_pct"]), fmt_ci(c["llm_pct_ci"]), str(c["episodes"])]

    tables = []
    for cond in conditions(res):
        cells = res["conditions"][cond]
        order = [m for m in res.get("methods", []) if m in cells] + [m for m in cells if m not in res["methods"]]
        main = " (Table 1)" if cond == res.get("main_condition") else ""
        tables.append({"title": f"Methods under `{cond}` perturbations{main}", "columns": head,
                       "rows": [row(m, cells[m]) for m in order], "condition": cond})
    for method, sweep in (res.get("sweeps") or {}).items():
        tables.append({"title": f"{method} router across thresholds", "columns": ["threshold", *head[1:]],
                       "rows": [row(f"{r['threshold']:g}", r) for r in sweep]})
    return tables


def plots(*dirs: Path) -> list[dict[str, str]]:
    """The run's PNG plots as data URIs (the page opens from disk with no other file)."""
    out, seen = [], set()
    for d in dirs:
        for p in sorted(d.glob("*.png")):
            if p.name in seen or p.stat().st_size > MAX_PLOT_BYTES:
                continue
            seen.add(p.name)
            out.append({"name": p.name, "src": "data:image/png;base64," + base64.b64encode(p.read_bytes()).decode()})
    return out
