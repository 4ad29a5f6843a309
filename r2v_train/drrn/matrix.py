"""``r2v drrn-matrix``: does training under a perturbation make an agent robust? Train x test, with paired CIs.

One DRRN is trained under each training setting (``<out>/train/<setting>``, :mod:`r2v_train.drrn.trainer`), then
each trained agent (the softmax policy it trained, :func:`r2v_agents.drrn.trained_policy`) is evaluated under every
test setting on the test split through ``r2v eval``'s grid (``<out>/eval/<setting>``: the runner's shards,
``results.json`` and ``report.md`` of :mod:`r2v_eval`), beside the
reference agents (``random``, ``verifier``, ...) on the same episodes. A cell's SR carries its bootstrap CI; its
difference from the clean-trained agent's SR on the same (task, z) episodes carries a paired CI
(:func:`r2v_eval.robustness.compare`). Every part is resumable, so rerunning the command after a kill finishes it.
Outputs: ``matrix.json``, ``matrix.md`` and the heatmap ``matrix.png``.

Example:
    >>> m = {"train": ["none", "flaky"], "test": ["none"], "cells": {"none": {"none": {"sr": 50.0, "sr_ci": [40, 60]}},
    ...      "flaky": {"none": {"sr": 60.0, "sr_ci": [50, 70], "vs_clean": 10.0, "vs_clean_ci": [2.0, 18.0]}}},
    ...      "references": {}}
    >>> print(matrix_table(m))
    | trained under \\ tested under | none |
    |---|---:|
    | none | 50.0 [40.0, 60.0] |
    | flaky | 60.0 [50.0, 70.0]<br>+10.0 [+2.0, +18.0] |
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.drrn import load_drrn, trained_policy
from r2v_eval.agents import AgentOptions, build_agent
from r2v_eval.cells import sr_metrics
from r2v_eval.grid import GridConfig, cell_dir, run_grid
from r2v_eval.results import env_slug
from r2v_eval.robustness import compare
from r2v_eval.robustness_report import write_report
from r2v_eval.stats import fmt_ci, fmt_num, md_table
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import write_json_atomic
from r2v_train.drrn.config import SETTINGS, DRRNConfig
from r2v_train.drrn.trainer import train_drrn, train_tasks

MATRIX_JSON, MATRIX_MD, MATRIX_PNG = "matrix.json", "matrix.md", "matrix.png"


@dataclass
class MatrixArgs:
    """Train DRRN under each training setting, evaluate each trained agent under each test setting on the test split
    (paired against the clean-trained agent, with CIs), beside reference agents; resumable."""

    out: str = "runs/drrn-matrix"
    """matrix directory (a rerun resumes): train/<setting>, eval/<setting>, eval/@<reference>, matrix.*"""
    train: tuple[str, ...] = SETTINGS
    """training settings (none is the clean-trained agent every row is compared with)"""
    test: tuple[str, ...] = SETTINGS
    """test settings"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """perturbation seeds z of the test episodes"""
    split: str = "test"
    """split of the test episodes"""
    tasks: int = 0
    """first N tasks of the split that match drrn.task_filter (0: all)"""
    references: tuple[str, ...] = ("random", "verifier")
    """r2v eval agents evaluated on the same episodes (random, verifier, expert, ...)"""
    bootstrap: int = 1000
    """bootstrap resamples of the CIs"""
    drrn: DRRNConfig = field(default_factory=DRRNConfig)
    """the training config of every row (its perturbations field is set per row)"""

    def __post_init__(self) -> None:
        for s in (*self.train, *self.test):
            if s not in SETTINGS:
                raise UnknownChoiceError("perturbation setting", s, SETTINGS)
        if "none" not in self.train:
            raise ValueError("the matrix compares every row with the clean-trained agent: --train must include none")


def matrix_tasks(args: MatrixArgs) -> list[str]:
    """The evaluated tasks: the split's tasks that match the training filter (the same kind of game)."""
    cfg = dataclasses.replace(args.drrn, split=args.split, max_tasks=args.tasks)
    return train_tasks(cfg)[0]


def eval_grid(args: MatrixArgs, tasks: list[str]) -> GridConfig:
    """The test episodes every agent of the matrix plays: the same tasks, seeds, env arguments and step cap."""
    cfg = args.drrn
    return GridConfig(env_ids=(cfg.env_id,), perturbations=args.test, seeds=args.seeds, split=args.split,
                      task_ids=tuple(tasks), env_kwargs=cfg.kwargs(), max_steps=cfg.max_steps, workers=cfg.workers,
                      progress=cfg.progress)


def train_and_evaluate(args: MatrixArgs, grid: GridConfig, setting: str) -> None:
    """One row: train under ``setting`` (or resume), then evaluate the trained policy under every test setting."""
    out, cfg = Path(args.out), args.drrn
    run_dir = out / "train" / setting
    if cfg.progress:
        print(f"== train under {setting} -> {run_dir}", file=sys.stderr)
    train_drrn(dataclasses.replace(cfg, perturbations=setting), str(run_dir))
    run_grid(trained_policy(load_drrn(run_dir / "model.pt")), "drrn", grid, out / "eval" / setting,
             {"spec": f"drrn:{run_dir}"})
    write_report(out / "eval" / setting, args.bootstrap)


def run_matrix(args: MatrixArgs) -> dict[str, Any]:
    out, cfg = Path(args.out), args.drrn
    tasks = matrix_tasks(args)
    grid = eval_grid(args, tasks)
    for setting in args.train:
        train_and_evaluate(args, grid, setting)
    for ref in args.references:
        policy, name = build_agent(ref, AgentOptions())
        kw = {**cfg.kwargs(), "expert": True} if ref == "expert" else cfg.kwargs()
        run_grid(policy, name, dataclasses.replace(grid, env_kwargs=kw), out / "eval" / f"@{ref}", {"spec": ref})
        write_report(out / "eval" / f"@{ref}", args.bootstrap)
    m = matrix_results(args, tasks)
    write_json_atomic(out / MATRIX_JSON, m)
    (out / MATRIX_MD).write_text(matrix_table(m) + "\n")
    plot_matrix(m, out / MATRIX_PNG)
    return m


def matrix_results(args: MatrixArgs, tasks: list[str]) -> dict[str, Any]:
    """SR with CI per (train, test) cell and the paired difference from the clean-trained agent; the references'
    SRs and the clean-trained agent's paired differences from them."""
    out, env = Path(args.out), args.drrn.env_id
    # SR only: cell_metrics would also read every step shard for the robustness columns the matrix leaves out
    cell = lambda d, s: sr_metrics(cell_dir(d, env, s), args.bootstrap)  # noqa: E731
    diffs = lambda a, b: {r["perturbation"]: r for r in compare(a, b, args.bootstrap)  # noqa: E731
                          if r["env"] == env_slug(env)}
    clean_dir = out / "eval" / "none"
    cells: dict[str, dict[str, Any]] = {}
    for t in args.train:
        d = diffs(out / "eval" / t, clean_dir) if t != "none" else {}
        cells[t] = {}
        for s in args.test:
            m = cell(out / "eval" / t, s)
            c = {"sr": m["sr"], "sr_ci": m["sr_ci"], "episodes": m["scored"]}
            if s in d:
                c.update(vs_clean=d[s]["diff"], vs_clean_ci=d[s]["diff_ci"])
            cells[t][s] = c
    refs = {}
    for ref in args.references:
        rdir = out / "eval" / f"@{ref}"
        per = {}
        for t in args.train:
            d = diffs(out / "eval" / t, rdir)
            per[t] = {s: {"diff": d[s]["diff"], "diff_ci": d[s]["diff_ci"]} for s in args.test if s in d}
        refs[ref] = {"sr": {s: cell(rdir, s)["sr"] for s in args.test}, "drrn_minus_ref": per}
    summaries = {t: _summary(out / "train" / t) for t in args.train}
    return {"env_id": env, "split": args.split, "tasks": tasks, "seeds": list(args.seeds), "train": list(args.train),
            "test": list(args.test), "drrn": dataclasses.asdict(args.drrn), "cells": cells, "references": refs,
            "training": summaries}


def _summary(run_dir: Path) -> dict[str, Any] | None:
    p = run_dir / "summary.json"
    return json.loads(p.read_text()) if p.exists() else None


def matrix_table(m: dict[str, Any]) -> str:
    """The matrix as markdown: SR [CI] per cell, and under it the paired difference from the clean-trained row."""
    def text(c: dict[str, Any]) -> str:
        out = "-" if c["sr"] is None else f"{c['sr']:.1f} {fmt_ci(c['sr_ci'])}"
        if c.get("vs_clean") is not None:
            out += f"<br>{c['vs_clean']:+.1f} {fmt_ci(c['vs_clean_ci'], signed=True)}"
        return out
    rows = [[t] + [text(m["cells"][t][s]) for s in m["test"]] for t in m["train"]]
    rows += [[f"*{ref}*"] + [fmt_num(r["sr"][s]) for s in m["test"]] for ref, r in m["references"].items()]
    return "\n".join(md_table(["trained under \\ tested under", *m["test"]], rows))


def plot_matrix(m: dict[str, Any], path: str | os.PathLike) -> None:
    """Two heatmaps: SR per (train, test) cell, and the paired difference from the clean-trained agent (cells whose
    95% CI excludes 0 are starred)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    train, test = m["train"], m["test"]
    sr = np.array([[np.nan if m["cells"][t][s]["sr"] is None else m["cells"][t][s]["sr"] for s in test]
                   for t in train])
    diff = np.array([[m["cells"][t][s].get("vs_clean", np.nan) for s in test] for t in train], dtype=float)
    fig, axes = plt.subplots(1, 2, figsize=(4 + 2.2 * len(test), 1.2 + 0.55 * len(train) * 2))
    span = max(1.0, float(np.nanmax(np.abs(diff)))) if np.isfinite(diff).any() else 1.0
    for ax, data, title, cmap, lim in ((axes[0], sr, "SR (%)", "viridis", (0, 100)),
                                       (axes[1], diff, "SR minus the clean-trained agent's (paired)", "RdBu",
                                        (-span, span))):
        ax.imshow(data, cmap=cmap, vmin=lim[0], vmax=lim[1], aspect="auto")
        ax.set_xticks(range(len(test)), test, rotation=30)
        ax.set_yticks(range(len(train)), train)
        ax.set_xlabel("tested under")
        ax.set_title(title, fontsize=10)
        for i, t in enumerate(train):
            for j, s in enumerate(test):
                c = m["cells"][t][s]
                if ax is axes[0] and c["sr"] is not None:
                    text = f"{c['sr']:.0f}\n[{c['sr_ci'][0]:.0f},{c['sr_ci'][1]:.0f}]"
                elif ax is axes[1] and c.get("vs_clean") is not None:
                    lo, hi = c["vs_clean_ci"]
                    text = f"{c['vs_clean']:+.0f}{'*' if lo > 0 or hi < 0 else ''}\n[{lo:+.0f},{hi:+.0f}]"
                else:
                    continue
                ax.text(j, i, text, ha="center", va="center", fontsize=7, color="black",
                        bbox={"facecolor": "white", "alpha": 0.6, "pad": 1, "linewidth": 0})
    axes[0].set_ylabel("trained under")
    fig.suptitle(f"DRRN on {m['env_id']} ({m['split']} split, {len(m['tasks'])} tasks x {len(m['seeds'])} seeds)")
    fig.tight_layout()
    tmp = f"{os.fspath(path)}.tmp.png"
    fig.savefig(tmp, dpi=110)
    plt.close(fig)
    os.replace(tmp, path)
