"""The markdown report of a run: Table 1, per-perturbation results, router calibration, ablations and plots.

Rendered only from ``<run>/eval/results.json`` (see :mod:`r2v_train.evaluation.methods`) and the ablation results in
``<run>/ablations/*.json`` (see :mod:`r2v_train.evaluation.ablations`), so every number in ``report.md`` can be traced to
the shards it was computed from. Plots (PNG, matplotlib's Agg backend, no display needed):

* ``pareto.png``: success vs teacher usage (LLM%) of every method with 95% CI bars and the Pareto frontier of
  the deployable methods (Figure 3); the hindsight oracle is drawn hollow and kept off the frontier;
* ``reliability-<router>.png``: a reliability diagram per router on the validation rows, ECE in the title.

Example:
    >>> print(calibration_table({"r2v": {"ece": 0.05, "brier": 0.1, "threshold": 0.5, "escalation_rate": 0.3,
    ...                                  "failure_recall": 0.6, "n": 10}}))
    | router | ECE | Brier | threshold | valid escalation | failure rows escalated | rows |
    |---|---:|---:|---:|---:|---:|---:|
    | r2v | 0.0500 | 0.1000 | 0.500 | 30.0% | 60.0% | 10 |
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r2v_envs.fileio import atomic_write
from r2v_eval.results import by_setting, main_table, sweeps
from r2v_eval.robustness_report import cells_section
from r2v_eval.stats import fmt_ci, md_table, with_ci
from r2v_train.evaluation.methods import METHOD_LABELS, METHODS, load_results, matched_reliability, methods_table
from r2v_train.evaluation.study import BASELINES
from r2v_train.run_dir import (
    MATCHED_FILE,
    REPEATS_FILE,
    VARIANTS_FILE,
    ablations_dir,
    eval_dir,
    pipeline_file,
    report_file,
)

ABLATION_TITLES = {
    "features": "Feature-group masking at inference, no retraining (Table 7)",
    "closed_source": "Closed-source feature variants (Table 6)",
    "cvar": "CVaR (alpha, epsilon) grid, router retrained (Table 5)",
    "cvar_scaled": "CVaR (alpha, epsilon) grid on the `miss` scale, enforced at the threshold (Table 5, setting "
                   "`scaled`)",
    "cvar_deviation": "CVaR (alpha, epsilon) grid on the `miss` scale of deviation labels, enforced at the threshold "
                      "(Table 5, setting `deviation_scaled`)",
    "feature_sets": "Feature sets: Eq. 6's 15 (`full`) vs `trajectory` (router retrained)",
    "consistency": "lambda_cons sweep, DPO retrained (Table 4)",
}


def calibration_table(cal: Mapping[str, Mapping[str, Any]]) -> str:
    head = ["router", "ECE", "Brier", "threshold", "valid escalation", "failure rows escalated", "rows"]
    rows = [[name, f"{c['ece']:.4f}", f"{c['brier']:.4f}", f"{c['threshold']:.3f}", f"{100 * c['escalation_rate']:.1f}%",
             "-" if c.get("failure_recall") is None else f"{100 * c['failure_recall']:.1f}%", c["n"]]
            for name, c in cal.items()]
    return "\n".join(md_table(head, rows))


def baseline_thresholds(results: Mapping[str, Any]) -> str:
    """How the entropy and heuristic routers' thresholds were set (the validation rows of the calibration table).

    Example:
        >>> res = {"config": {"heuristic_threshold": None, "heuristic_fit": "match_r2v", "entropy_target_rate": None},
        ...        "calibration": {"r2v": {"failure_recall": 0.9, "threshold": 0.5},
        ...                        "heuristic": {"failure_recall": 0.91, "threshold": 0.1875},
        ...                        "entropy": {"failure_recall": 0.5, "threshold": 0.4}}}
        >>> print(baseline_thresholds(res))
        Baseline thresholds, set on the validation rows: entropy router 0.400 (Youden's J); heuristic router 0.188, the cheapest one escalating at least R2V's share of the failure rows (91.0% vs 90.0%: comparable reliability).
    """
    cfg, cal = results["config"], results.get("calibration") or {}
    if not cal:
        return "Baseline thresholds: rule defaults (no validation rows)."
    parts = []
    if "entropy" in cal:
        how = ("Youden's J" if cfg.get("entropy_target_rate") is None
               else f"validation escalation rate {cfg['entropy_target_rate']:g}")
        parts.append(f"entropy router {cal['entropy']['threshold']:.3f} ({how})")
    if "heuristic" in cal:
        h, r = cal["heuristic"], cal.get("r2v")
        head = f"heuristic router {h['threshold']:.3f}"
        if cfg.get("heuristic_threshold") is not None:
            parts.append(f"{head} (fixed in the config)")
        elif cfg.get("heuristic_fit", "youden") == "match_r2v" and r is not None and "failure_recall" in h:
            parts.append(f"{head}, the cheapest one escalating at least R2V's share of the failure rows "
                         f"({100 * h['failure_recall']:.1f}% vs {100 * r['failure_recall']:.1f}%: comparable "
                         "reliability)")
        else:
            parts.append(f"{head} (Youden's J)")
    return "Baseline thresholds, set on the validation rows: " + "; ".join(parts) + "."


def paired_table(paired: Mapping[str, Mapping[str, Any]]) -> str:
    """R2V minus each method, paired over the same episodes (``results["paired"]``).

    Example:
        >>> d = {"sr_diff": 1.3, "sr_diff_ci": [0.0, 3.8], "llm_pct_diff": -7.2, "llm_pct_diff_ci": [-12.8, -2.1],
        ...      "episodes": 78}
        >>> print(paired_table({"heuristic": d}))
        | R2V minus | SR (points) | SR 95% CI | LLM% (points) | LLM% 95% CI | episodes |
        |---|---:|---:|---:|---:|---:|
        | Heuristic router | +1.3 | [+0.0, +3.8] | -7.2 | [-12.8, -2.1] | 78 |
    """
    order = [m for m in METHODS if m in paired] + [m for m in paired if m not in METHODS]
    rows = [[METHOD_LABELS.get(m, m), f"{d['sr_diff']:+.1f}", fmt_ci(d["sr_diff_ci"], signed=True),
             f"{d['llm_pct_diff']:+.1f}", fmt_ci(d["llm_pct_diff_ci"], signed=True), d["episodes"]]
            for m in order for d in [paired[m]]]
    return "\n".join(md_table(["R2V minus", "SR (points)", "SR 95% CI", "LLM% (points)", "LLM% 95% CI", "episodes"],
                              rows))


def per_type_table(conditions: Mapping[str, Mapping[str, Any]], methods: list[str]) -> str:
    """SR (LLM%) of every method (columns) under every condition (rows)."""
    cols = [m for m in METHODS if m in methods]
    rows = [[cond] + [f"{cells[m]['sr']:.1f} ({cells[m]['llm_pct']:.1f})" if m in cells else "-" for m in cols]
            for cond, cells in conditions.items()]
    return "\n".join(md_table(["condition"] + [f"{METHOD_LABELS[m]} SR (LLM%)" for m in cols], rows))


def ablation_table(rows: list[Mapping[str, Any]]) -> str:
    """Rows share their keys: ``setting`` first, then SR / LLM% and whatever else the ablation measured."""
    if not rows:
        return "(no rows)"
    keys = [k for k in rows[0] if k not in ("run_dir",)]

    def fmt(v: Any) -> str:
        if isinstance(v, float):
            return f"{v:.4f}" if abs(v) < 1 else f"{v:.1f}"
        if isinstance(v, list) and len(v) == 2 and all(isinstance(x, float) for x in v):
            return fmt_ci(v)
        return "-" if v is None else str(v)

    return "\n".join(md_table(keys, [[fmt(r.get(k)) for k in keys] for r in rows]))


# ------------------------------------------------------------------------------------------------ plots
def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_pareto(results: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Figure 3: SR vs LLM% of the main condition's methods with CI bars and the Pareto frontier."""
    plt = _pyplot()
    cells = main_table(results)
    fig, ax = plt.subplots(figsize=(5.5, 4))
    for m, c in cells.items():
        x, y = c["llm_pct"], c["sr"]
        # clamped at 0: a degenerate bootstrap CI can miss its point by float rounding (66.66...67 vs
        # 66.66...66 on a 2-task ALFWorld miniature), and matplotlib rejects negative error bars
        xerr = [[max(0.0, x - c["llm_pct_ci"][0])], [max(0.0, c["llm_pct_ci"][1] - x)]]
        yerr = [[max(0.0, y - c["sr_ci"][0])], [max(0.0, c["sr_ci"][1] - y)]]
        hollow = m == "oracle"
        ax.errorbar(x, y, xerr=xerr, yerr=yerr, fmt="o", capsize=3, mfc="none" if hollow else None,
                    label=METHOD_LABELS.get(m, m))
    for name, sweep in sweeps(results).items():
        sweep = sorted(sweep, key=lambda c: c["llm_pct"])
        ax.plot([c["llm_pct"] for c in sweep], [c["sr"] for c in sweep], "x:" if name == "heuristic" else "+:",
                color="grey" if name == "heuristic" else "tan", lw=1, label=f"{name}, other thresholds")
    front = [m for m in results.get("pareto", []) if m in cells]
    if front:
        ax.plot([cells[m]["llm_pct"] for m in front], [cells[m]["sr"] for m in front], "k--", lw=1,
                label="Pareto frontier")
    ax.set_xlabel("LLM% (steps escalated to the teacher)")
    ax.set_ylabel("success rate (%)")
    ax.set_title(f"Cost / success ({results['main_condition']})")
    ax.set_xlim(-5, 105)
    ax.set_ylim(-5, 105)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    _save(fig, path)


def plot_reliability(name: str, cal: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Reliability diagram: observed failure rate vs mean predicted p per bin, bar width ~ bin, counts below."""
    plt = _pyplot()
    rel = cal["reliability"]
    edges = rel["edges"]
    fig, (ax, axc) = plt.subplots(2, 1, figsize=(4.5, 5), sharex=True, gridspec_kw={"height_ratios": [3, 1]})
    centers = [(a + b) / 2 for a, b in zip(edges[:-1], edges[1:])]
    width = edges[1] - edges[0]
    rates = [r if r is not None else 0.0 for r in rel["rate"]]
    ax.bar(centers, rates, width=width * 0.9, alpha=0.7, label="observed failure rate")
    pts = [(mp, r) for mp, r in zip(rel["mean_p"], rel["rate"]) if mp is not None]
    if pts:
        ax.plot(*zip(*pts), "ro", ms=3, label="(mean p, rate)")
    ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect calibration")
    ax.set_ylabel("P(episode fails)")
    ax.set_title(f"{name}: ECE {cal['ece']:.3f}, Brier {cal['brier']:.3f}")
    ax.legend(fontsize=7, loc="upper left")
    axc.bar(centers, rel["count"], width=width * 0.9, color="gray")
    axc.set_xlabel("predicted failure probability p")
    axc.set_ylabel("rows")
    fig.tight_layout()
    _save(fig, path)


def _save(fig: Any, path: str | os.PathLike) -> None:
    import matplotlib.pyplot as plt

    try:
        atomic_write(path, lambda fh: fig.savefig(fh, format="png", dpi=110))
    finally:
        plt.close(fig)


# ------------------------------------------------------------------------------------------------ report
def load_ablations(run_dir: str | os.PathLike) -> dict[str, Any]:
    """``<run_dir>/ablations/<name>.json`` files written by :mod:`r2v_train.evaluation.ablations`."""
    out = {}
    d = ablations_dir(run_dir)
    for name in ABLATION_TITLES:
        p = d / f"{name}.json"
        if p.exists():
            out[name] = json.loads(p.read_text())
    return out


def write_report(run_dir: str | os.PathLike, evaluation: str | os.PathLike | None = None,
                 extra: Mapping[str, Any] | None = None) -> Path:
    """Render ``<run_dir>/report.md`` (and the PNGs next to it) from the evaluation and ablation results.

    ``extra`` adds a "Run" section (e.g. stage timings, manifest facts) as key: value lines; without it, the one
    ``r2v pipeline`` saved in ``pipeline.json`` is kept (a report re-rendered after an ablation keeps its timings)."""
    run_dir = Path(run_dir)
    if extra is None and pipeline_file(run_dir).exists():
        extra = json.loads(pipeline_file(run_dir).read_text()).get("run")
    results = load_results(evaluation or eval_dir(run_dir))
    main = results["main_condition"]
    cells = main_table(results)
    parts = ["# R2V run report", "",
             f"Environment `{results['config']['env_id']}`, split `{results['config']['split']}`, seeds "
             f"{results['config']['seeds']}; numbers from `eval/{'results.json'}` (runner shards under `eval/runs/`).",
             "SR = episode success rate; LLM% = share of steps whose action came from the teacher. "
             "95% CIs: percentile bootstrap over episodes "
             f"({results['config']['bootstrap']} resamples, seed {results['config']['bootstrap_seed']}).", ""]
    if extra:
        parts += ["## Run", ""] + [f"- {k}: {v}" for k, v in extra.items()] + [""]
    parts += [f"## Table 1: methods under `{main}` perturbations", "", methods_table(cells), "",
              "The oracle router is a hindsight upper bound (it knows which SLM rollouts fail), not a deployable "
              "method." + (" The policy alone is the SLM's own sample per step (k = 1, no verifier): what training "
                           "moves; SLM-only adds the verifier's pick among K candidates." if "policy" in cells else ""),
              baseline_thresholds(results), ""]
    if results.get("paired"):
        parts += ["R2V against each method on the same episodes (paired bootstrap; a CI that excludes 0 is a "
                  "difference at the 95% level):", "", paired_table(results["paired"]), ""]
    if len(conditions := by_setting(results)) > 1:
        seeds = results["config"].get("per_type_seeds") or results["config"]["seeds"]
        parts += ["## Per perturbation type", "", f"One perturbation type at a time; seeds {seeds}.", "",
                  per_type_table(conditions, results["methods"]), ""]
    parts += ["## Every cell", "", ("One row per (env, perturbation, agent) of `eval/results.json`, as `r2v eval`'s "
                                    "report gives them; an agent `name@t` is a threshold sweep's point."), "",
              *cells_section(results["cells"], results["config"]["bootstrap"])]
    for name, sweep in sweeps(results).items():
        parts += [f"## {name.capitalize()} router across thresholds", ""]
        parts += md_table(["threshold", "SR (%)", "SR 95% CI", "LLM%", "LLM% 95% CI", "episodes"],
                          [[f"{c['threshold']:g}", f"{c['sr']:.1f}", fmt_ci(c["sr_ci"]), f"{c['llm_pct']:.1f}",
                            fmt_ci(c["llm_pct_ci"]), c["episodes"]] for c in sweep], align="rrrrrr")
        match = matched_reliability(results, baseline=name)
        parts += ["", f"At matched reliability (SR within {match['slack']:g} points of R2V's {match['method_sr']:.1f}%), "
                      f"the cheapest {name} point escalates {match['baseline_llm_pct']:.1f}% of steps "
                      f"(threshold {match['threshold']}, SR {match['baseline_sr']:.1f}%) vs R2V's "
                      f"{match['method_llm_pct']:.1f}%." if match else
                  f"No {name} threshold tried reaches R2V's reliability (within 2 points).", ""]
        r2v = cells.get("r2v")
        if r2v:
            beaten = [f"{c['threshold']:g}" for c in sweep if r2v["sr"] >= c["sr"] and r2v["llm_pct"] <= c["llm_pct"]]
            if beaten:
                parts += [f"R2V dominates (at least the SR at no more LLM%) the {name} router at threshold(s) "
                          f"{', '.join(beaten)}.", ""]
    plot_pareto(results, run_dir / "pareto.png")
    parts += ["## Cost / success (Figure 3)", "",
              f"Pareto frontier (deployable methods): {', '.join(results.get('pareto', []))}.", "",
              "![Pareto frontier](pareto.png)", ""]
    cal = results.get("calibration") or {}
    if cal:
        parts += ["## Router calibration on validation (Table 6 columns)", "", calibration_table(cal), ""]
        for name, c in cal.items():
            plot_reliability(name, c, run_dir / f"reliability-{name}.png")
            parts += [f"![reliability {name}](reliability-{name}.png)", ""]
    for name, abl in load_ablations(run_dir).items():
        parts += [f"## Ablation: {ABLATION_TITLES[name]}", "", ablation_table(abl["rows"]), ""]
    parts += study_tables(run_dir)
    path = report_file(run_dir)
    atomic_write(path, "\n".join(parts))
    return path


def parse_markdown_table(text: str, heading: str) -> list[dict[str, str]]:
    """The first markdown table after the line starting with ``heading`` (for checking a report's numbers).

    Example:
        >>> parse_markdown_table("## T\\n\\n| a | b |\\n|---|---:|\\n| x | 1.0 |\\n", "## T")
        [{'a': 'x', 'b': '1.0'}]
    """
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(heading))
    rows = []
    for line in lines[start + 1:]:
        if line.startswith("|"):
            rows.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif rows:
            break
    header, body = rows[0], rows[2:]
    return [dict(zip(header, r)) for r in body]


def _paired_text(x: Mapping[str, Any]) -> str:
    """A paired difference as ``SR diff, LLM% diff [LLM% CI]`` (one cell of the study's tables)."""
    return f"{x['sr_diff']:+.1f}, {with_ci(x['llm_pct_diff'], x['llm_pct_diff_ci'], signed=True)}"


def study_tables(run_dir: str | os.PathLike) -> list[str]:
    """Markdown sections for ``report.md`` from ``eval/variants.json`` and ``eval/repeats.json`` (if present)."""
    ev = eval_dir(run_dir)
    parts: list[str] = []
    if (ev / VARIANTS_FILE).exists():
        v = json.loads((ev / VARIANTS_FILE).read_text())
        parts += [f"## Router settings and the counterfactual oracle (`{v['condition']}`)", "",
                  "Paired differences (this row minus the heuristic / entropy router, same episodes, 95% CI).", ""]

        def vs(r: Mapping[str, Any], m: str) -> str:
            x = r["paired"].get(m)
            return "" if x is None else _paired_text(x)
        parts += md_table(["setting", "SR (%)", "LLM%", "LLM% 95% CI", "vs heuristic: SR, LLM% [CI]",
                           "vs entropy: SR, LLM% [CI]", "valid ECE"],
                          [[name, f"{r['sr']:.1f}", f"{r['llm_pct']:.1f}", fmt_ci(r["llm_pct_ci"]), vs(r, "heuristic"),
                            vs(r, "entropy"), f"{r['valid_ece']:.3f}" if "valid_ece" in r else "-"]
                           for name, r in v["rows"].items()], align="lrrrllr")
        matched = {name: r["matched"] for name, r in v["rows"].items() if "matched" in r}
        if matched:
            parts += ["", "At matched reliability: the baselines' thresholds fitted on the validation rows to each "
                      "setting's failure recall; paired differences are the setting minus that baseline.", ""]
            parts += md_table(["setting", "valid recall", "heuristic: SR, LLM%", "minus heuristic: SR, LLM% [CI]",
                               "entropy: SR, LLM%", "minus entropy: SR, LLM% [CI]"],
                              [[name, f"{mr['recall']:.3f}", f"{h['sr']:.1f}, {h['llm_pct']:.1f}", _paired_text(h["paired"]),
                                f"{e['sr']:.1f}, {e['llm_pct']:.1f}", _paired_text(e["paired"])]
                               for name, mr in matched.items() for h, e in [(mr["heuristic"], mr["entropy"])]],
                              align="lrllll")
        for part, s in v.get("counterfactual", {}).items():
            parts.append(f"\nCounterfactual labels, {part}: {s['episodes_run']} teacher-at-t episodes for "
                         f"{s['failed_rollouts']} failed of {s['rollouts']} rollouts (budget {s['steps_per_rollout']} "
                         f"per rollout), {s['rescuing_steps']} rescuing steps, {s['rescued_rollouts']} rollouts "
                         f"rescuable, {s['wall_s']:.0f} s.")
        parts.append("")
    if (ev / MATCHED_FILE).exists():
        m = json.loads((ev / MATCHED_FILE).read_text())
        parts += [f"## At matched test reliability (`{m['condition']}`)", "",
                  f"Each R2V cell minus the cheapest heuristic / entropy cell of the study with SR at most {m['slack']:g} "
                  "points below its own (any threshold tried, any repeat: chosen on test, which favours the baselines).",
                  ""]

        def cell(e: Mapping[str, Any], b: str) -> list[str]:  # the baseline's cell, and the difference to it
            x = e.get(b)
            return ["none within reach", "-"] if x is None else \
                [f"{x['cell']}: {x['sr']:.1f}, {x['llm_pct']:.1f}", _paired_text(x["paired"])]
        parts += md_table(["setting", "repeat", "SR", "LLM%", "heuristic cell: SR, LLM%", "minus it: SR, LLM% [CI]",
                           "entropy cell: SR, LLM%", "minus it: SR, LLM% [CI]"],
                          [[name, e["repeat"] + 1, f"{e['sr']:.1f}", f"{e['llm_pct']:.1f}", *cell(e, "heuristic"),
                            *cell(e, "entropy")] for name, reps in m["rows"].items() for e in reps], align="lrrrllll")
        parts.append("")
    if (ev / REPEATS_FILE).exists():
        r = json.loads((ev / REPEATS_FILE).read_text())
        parts += [f"## Repeats of router data + router ({r['n']} runs, `{r['condition']}`)", ""]
        parts += md_table(["method", "SR mean", "SR std", "SR range", "LLM% mean", "LLM% std", "LLM% range"],
                          [[m, f"{a['mean']:.1f}", f"{a['std']:.1f}", f"{a['min']:.1f}-{a['max']:.1f}",
                            f"{b['mean']:.1f}", f"{b['std']:.1f}", f"{b['min']:.1f}-{b['max']:.1f}"]
                           for m, s in r["spread"].items() for a, b in [(s["sr"], s["llm_pct"])]])
        for m, reps in r.get("paired", {}).items():
            for base in (*BASELINES, *(f"{b}@matched" for b in BASELINES)):
                diffs = [x[base] for x in reps if base in x]
                if diffs:
                    parts.append(f"\n{m} minus {base}, paired, per repeat (SR, LLM% [95% CI]): "
                                 + "; ".join(_paired_text(x) for x in diffs))
        parts.append("")
    return parts
