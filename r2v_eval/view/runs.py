"""What a run directory holds, read into the viewer's index: its kind, summary table, plots, manifest and episodes.

Every evaluation writes one ``results.json`` schema (:mod:`r2v_eval.results`: cells keyed by env, perturbation and
agent, each naming its runner directory), so the viewer reads every run's cells the same way. Kinds
(:func:`detect`) differ only in the summary they show:

* ``eval``: an ``r2v eval`` directory (one agent over envs x perturbations: the robustness table);
* ``pipeline``: an ``r2v pipeline`` or ``r2v rl`` run (methods x conditions of one env: Table 1, the per-type
  tables and the threshold sweeps; ``report.md`` and its PNGs at the top), or its ``eval/`` directory alone;
* ``runner``: a bare runner directory (``run.json`` and the shards).

An evaluation still running has no ``results.json`` yet: its cells are the runner directories there are
(``runs/<env>/<setting>`` or ``runs/<condition>/<method>``). Every number in the summary comes from the run's own
``results.json``; the episode list comes from the episode shards, the last attempt of an episode winning
(:func:`r2v_eval.cells.cell_episodes`).

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
from r2v_eval.results import by_setting, cells, settings, sweeps
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
    if "main_condition" in res:
        return "pipeline", d
    if "cells" in res or (d / "manifest.json").is_file() and (d / "runs").is_dir():
        return "eval", d
    if (d / RUN_FILE).is_file() or shard_files(d, "episodes"):
        return "runner", d
    raise NotARunError(f"{d} holds no r2v eval run, r2v pipeline run or runner directory (no results.json, "
                       f"manifest.json + runs/, eval/ or {RUN_FILE})")


def list_cells(kind: str, eval_dir: Path) -> list[Cell]:
    """The runner directories of a run, in report order (:func:`report_order`)."""
    if kind == "runner":
        setting = (_json(eval_dir / RUN_FILE) or {}).get("setting", {})
        return [Cell(setting.get("env_id", ""), _condition_name(setting.get("env_kwargs", {})),
                     setting.get("policy", ""), eval_dir)]
    res = _json(eval_dir / "results.json")
    if res is not None:
        return [Cell(c["env"], c["perturbation"], c.get("agent", ""), eval_dir / c["run_dir"])
                for c in report_order(res)]
    if kind == "eval":  # still running: the cells there are
        return [Cell(env, setting, "", cdir) for env, setting, cdir in cells_of(eval_dir)]
    return [Cell("", c.name, m.name, m) for c in sorted((eval_dir / "runs").glob("*")) if c.is_dir()
            for m in sorted(c.iterdir()) if m.is_dir()]


def report_order(res: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The cells of a results file as its report lists them: an ``r2v eval``'s in the file's (manifest) order; a
    pipeline's by condition (the main one first), its methods in Table 1's order, then the threshold sweeps."""
    if "main_condition" not in res:
        return cells(res)
    conds = {s: i for i, s in enumerate(settings(res))}
    methods = {m: i for i, m in enumerate(res.get("methods") or [])}
    return sorted(cells(res), key=lambda c: (1, c["sweep"], c["threshold"]) if "sweep" in c else
                  (0, conds[c["perturbation"]], methods.get(c["agent"], len(methods)), c["agent"]))


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
    for c in cells(res):
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

    tables, table = [], by_setting(res)
    for cond in settings(res):
        agents = table.get(cond, {})
        order = [m for m in res.get("methods", []) if m in agents] + [m for m in agents if m not in res["methods"]]
        main = " (Table 1)" if cond == res.get("main_condition") else ""
        tables.append({"title": f"Methods under `{cond}` perturbations{main}", "columns": head,
                       "rows": [row(m, agents[m]) for m in order], "condition": cond})
    for method, sweep in sweeps(res).items():
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
