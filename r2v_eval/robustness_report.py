"""The robustness report of ``r2v eval``: ``results.json``, ``report.md`` and ``sr_by_perturbation.png``.

Every number comes from :func:`r2v_eval.robustness.summarise` over the runner's shards; the report only
renders it. :func:`show_episode` prints one logged episode as the agent saw it, perturbation events marked.

Example:
    >>> fmt_ci([41.234, 60.0])
    '[41.2, 60.0]'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r2v_agents.shards import load_rows
from r2v_envs.fileio import write_json_atomic
from r2v_eval.cells import cell_episodes
from r2v_eval.robustness import CLEAN, cells_of, compare, summarise
from r2v_eval.stats import fmt_ci, fmt_num, md_table

RESULTS_FILE = "results.json"
REPORT_FILE = "report.md"
PLOT_FILE = "sr_by_perturbation.png"


def write_report(out_dir: str | os.PathLike, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Compute the results of an evaluation directory and write the JSON, the markdown report and the plot."""
    out = Path(out_dir)
    results = summarise(out, n_boot, seed)
    write_json_atomic(out / RESULTS_FILE, results)
    plot = plot_sr(results, out / PLOT_FILE)
    (out / REPORT_FILE).write_text(render(results, plot))
    return results


def render(results: Mapping[str, Any], plot: str | None = None) -> str:
    """The markdown report of a ``results.json``."""
    agent, grid = results.get("agent") or {}, results.get("grid") or {}
    lines = [f"# Robustness of `{agent.get('name', '?')}`", ""]
    if grid:
        lines += [f"Envs: {', '.join(grid['env_ids'])}; split `{grid['split']}`"
                  + (f" (first {grid['tasks']} tasks)" if grid.get("tasks") else "")
                  + f"; seeds {list(grid['seeds'])}; perturbations {', '.join(grid['perturbations'])}.", ""]
    lines += ["## SR by benchmark and perturbation", ""] + cells_section(results["cells"], results["bootstrap"])
    if plot:
        lines += [f"![SR by perturbation]({os.path.basename(plot)})", ""]
    lines += ["Trajectories: each cell's `run_dir` holds the runner's Parquet shards "
              "(`datasets.load_dataset(\"parquet\", data_files=\"<run_dir>/steps-*.parquet\")`); "
              "`r2v eval show <out> --episode <task@z>` prints one episode as the agent saw it; `r2v view <out>` writes "
              "a page to browse every episode step by step (`view.html`).", ""]
    return "\n".join(lines)


def cells_section(cells: list[Mapping[str, Any]], bootstrap: int) -> list[str]:
    """What each column means, then a row per cell (:mod:`r2v_eval.results`): the cell table of ``r2v eval``'s
    report and of a pipeline run's (which adds an agent column, its cells naming several agents).

    Example:
        >>> cell = {"env": "R2V/TextWorld-v0", "benchmark": "TextWorld", "perturbation": "clean", "agent": "slm",
        ...         "scored": 2, "sr": 50.0, "sr_ci": [0.0, 100.0], "pass_k": {}, "worst_seed": None,
        ...         "not_run": 0, "not_run_by_kind": {}, "request_retries": 0, "episode_reruns": 0}
        >>> print(cells_section([cell], 1000)[-2])
        | TextWorld | clean | 2 | 50.0 | [0.0, 100.0] | - | - | - | - | - | - | - | - | - | - | - | 0 | 0 / 0 |
    """
    by_agent = len({c.get("agent") for c in cells}) > 1
    # LLM% only where an agent asked a teacher (a routed agent): for a plain agent it would be a column of zeros
    routed = any(c.get("teacher_steps") for c in cells)
    lines = ["SR over the episodes that ran, 95% bootstrap CI over episodes "
             f"({bootstrap} resamples). Drop = clean SR minus this SR on the same (task, seed) "
             "episodes, paired 95% CI. pass^k over seeds as in tau-bench; worst seed = lowest per-seed SR. "
             "*Not run* = episodes that could not be run (agent infrastructure after retries, or env faults): "
             "excluded from SR, never scored as losses. Retries = requests retried inside the agent / episodes "
             "rerun by the grid. Non-exact = share of a model agent's steps whose action it did not name exactly "
             "(grounded as normalised, similar, raw or empty); invalid = share of played actions that are not "
             "actions of the benchmark (not admissible, or outside its command syntax); step latency = the "
             "agent's mean seconds per step." + (" LLM% = share of steps whose action came from the teacher." if routed
                                                 else ""), ""]
    head = ["benchmark", "perturbation", "episodes", "SR (%)", "SR 95% CI", "drop (points)", "drop 95% CI",
            "pass^k (k=1..n)", "worst seed SR", "steps", "tokens", "cost", "latency (s)", "step latency (s)",
            "non-exact (%)", "invalid (%)", "not run", "retries"]
    rows = []
    for c in cells:
        d = c.get("drop_vs_clean")
        pk = " / ".join(fmt_num(c["pass_k"][k]) for k in sorted(c["pass_k"], key=int)) if c["pass_k"] else "-"
        worst = "-" if not c["worst_seed"] else f"{c['worst_seed']['sr']:.1f} (z={c['worst_seed']['z']})"
        kinds = ", ".join(f"{k} {v}" for k, v in c["not_run_by_kind"].items())
        rows.append([str(c["agent"])] * by_agent + [
            str(c["benchmark"] or c["env"]), c["perturbation"], str(c["scored"]), fmt_num(c["sr"]), fmt_ci(c["sr_ci"])
        ] + [fmt_num(c.get("llm_pct"))] * routed + [
            "-" if c["perturbation"] == CLEAN or not d else fmt_num(d["drop"]), "-" if not d else fmt_ci(d["drop_ci"]),
            pk, worst, fmt_num(c.get("mean_steps")), fmt_num(c.get("mean_tokens"), 0), fmt_num(c.get("mean_cost"), 4),
            fmt_num(c.get("mean_latency_s"), 2), fmt_num(c.get("step_latency_s"), 3), fmt_num(c.get("non_exact_pct")),
            fmt_num(c.get("invalid_pct")), f"{c['not_run']}" + (f" ({kinds})" if kinds else ""),
            f"{c['request_retries']} / {c['episode_reruns']}"])
    head = ["agent"] * by_agent + head[:5] + ["LLM%"] * routed + head[5:]
    return lines + md_table(head, rows, align="l" * (2 + by_agent) + "r" * (len(head) - 2 - by_agent)) + [""]


def plot_sr(results: Mapping[str, Any], path: str | os.PathLike) -> str | None:
    """A grouped bar chart of SR by perturbation (one group per benchmark) with 95% CI error bars."""
    cells = [c for c in results["cells"] if c["sr"] is not None]
    if not cells:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    envs = list(dict.fromkeys(c["env"] for c in cells))
    settings = list(dict.fromkeys(c["perturbation"] for c in cells))
    width = 0.8 / len(settings)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.6 * len(envs) * len(settings) ** 0.5 + 2), 3.6))
    for j, s in enumerate(settings):
        xs, ys, lo, hi = [], [], [], []
        for i, e in enumerate(envs):
            c = next((c for c in cells if c["env"] == e and c["perturbation"] == s), None)
            if c is None:
                continue
            xs.append(i + (j - (len(settings) - 1) / 2) * width)
            ys.append(c["sr"])
            lo.append(c["sr"] - c["sr_ci"][0])
            hi.append(c["sr_ci"][1] - c["sr"])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=s)
    labels = [next(c["benchmark"] or e for c in cells if c["env"] == e) for e in envs]
    ax.set_xticks(range(len(envs)), labels)
    ax.set_ylabel("success rate (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{(results.get('agent') or {}).get('name', '')}: SR by perturbation (95% CI)")
    ax.legend(fontsize=8, ncol=min(3, len(settings)))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return str(path)


def compare_text(a_dir: str | os.PathLike, b_dir: str | os.PathLike, n_boot: int = 1000, seed: int = 0) -> str:
    """``r2v eval compare A B``: A minus B per shared cell, paired over the episodes both ran."""
    rows = compare(a_dir, b_dir, n_boot, seed)
    if not rows:
        return f"{a_dir} and {b_dir} share no (benchmark, perturbation) cell"
    table = md_table(["env", "perturbation", "paired episodes", "SR A (%)", "SR B (%)", "A - B (points)", "95% CI"],
                     [[r["env"], r["perturbation"], r["episodes"], fmt_num(r["sr_a"]), fmt_num(r["sr_b"]),
                       fmt_num(r["diff"]), fmt_ci(r["diff_ci"])] for r in rows], align="llrrrrr")
    return "\n".join([f"A = {a_dir}", f"B = {b_dir}", ""] + table)


def find_episode(out_dir: str | os.PathLike, episode_id: str, env: str | None = None,
                 perturbation: str | None = None) -> list[tuple[str, str, dict[str, Any]]]:
    """``(env, perturbation, episode row)`` of every cell holding ``episode_id`` (optionally one cell)."""

    found = []
    for e, s, cdir in cells_of(out_dir):
        if (env and env not in (e, e.replace("_", "/"))) or (perturbation and s != perturbation):
            continue
        row = cell_episodes(cdir).get(episode_id)
        if row is not None:
            found.append((e, s, row))
    return found


def show_episode(out_dir: str | os.PathLike, episode_id: str, env: str | None = None,
                 perturbation: str | None = None, max_obs_chars: int = 2000) -> str:
    """One episode as the agent saw it: goal, each observation (perturbation events marked) and action."""

    found = find_episode(out_dir, episode_id, env, perturbation)
    if not found:
        raise KeyError(f"no episode {episode_id!r} in {out_dir} (episode ids are <task_id>@<z>)")
    blocks = []
    for e, s, row in found:
        steps = [r for r in load_rows(row["dir"], "steps") if r["episode_id"] == episode_id]
        steps.sort(key=lambda r: r["t"])
        head = (f"=== {episode_id} | {e} | perturbation {s} | "
                f"{'success' if row['success'] else 'failure'} in {row['steps']} steps, attempt {row['attempts']}")
        lines = [head + (f" | NOT RUN: {row['error']}" if row["error"] else "") + " ==="]
        if steps:
            lines.append(f"Goal: {steps[0]['goal']}")
        for r in steps:
            events = json.loads(r["perturbations"] or "[]")
            lines.append(f"--- t={r['t']}" + (f"  [PERTURBED: {'; '.join(_event(ev) for ev in events)}]" if events
                                              else ""))
            if r["t"] > 0 and steps[r["t"] - 1]["goal"] != r["goal"]:
                lines.append(f"(goal now reads: {r['goal']})")
            obs = r["observation"]
            lines.append(obs if len(obs) <= max_obs_chars else obs[:max_obs_chars] + " ...")
            if r["admissible_actions"] is not None:
                lines.append("admissible: " + " | ".join(r["admissible_actions"]))
            if r.get("reply") is not None and r["reply"].strip() != r["action"]:
                lines.append(f"reply: {r['reply'][:300]!r}")
            lines.append(f">>> {r['action']}" + (f"   [{r['grounding']}]" if r.get("grounding") else "")
                         + (f"   (reward {r['reward']:g})" if r["reward"] else ""))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


def _event(ev: Mapping[str, Any]) -> str:
    detail = ev.get("detail")
    text = detail if isinstance(detail, str) else json.dumps(detail, sort_keys=True) if detail else ""
    return f"{ev.get('type')}/{ev.get('channel')}" + (f" {text[:80]}" if text else "")
