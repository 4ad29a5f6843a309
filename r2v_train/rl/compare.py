"""An RL run against its source run on the same test episodes: per condition and method, SR and LLM% of each, and
their paired differences (RL minus source) with 95% bootstrap CIs (:func:`r2v_eval.cells.paired`: over the episodes
both scored).

Both evaluations run the same (task, z) episodes (``r2v rl`` reuses the source run's evaluation config), so the
differences are paired: the game-to-game spread that widens each method's own CI cancels.

Example:
    >>> summary = {"main_condition": "composite", "test": {"composite": {"slm": {
    ...     "rl": {"sr": 70.0, "sr_ci": [60.0, 80.0], "llm_pct": 0.0}, "source": {"sr": 56.4, "llm_pct": 0.0},
    ...     "paired": {"sr_diff": 13.6, "sr_diff_ci": [4.0, 23.0], "llm_pct_diff": 0.0,
    ...                "llm_pct_diff_ci": [0.0, 0.0], "episodes": 78}}}}}
    >>> comparison_lines(summary)["composite: slm"]
    'SR 70.0 [60.0, 80.0] vs 56.4: +13.6 [+4.0, +23.0] points (paired, 78 episodes); LLM% 0.0 vs 0.0: +0.0 [+0.0, +0.0]'
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any

from r2v_eval.cells import outcomes, paired
from r2v_eval.results import by_setting
from r2v_eval.stats import with_ci
from r2v_train.run_dir import cell_dir, results_file


def compare_runs(rl_eval: str | os.PathLike, source_eval: str | os.PathLike, n_boot: int = 1000,
                 seed: int = 0) -> dict[str, dict[str, Any]]:
    """``{condition: {method: {"rl": cell, "source": cell, "paired": diff}}}`` for every cell both evaluations
    have (cells of the source that the RL run did not evaluate, or the reverse, are left out)."""
    rl = by_setting(json.loads(results_file(rl_eval).read_text()))
    src_path = results_file(source_eval)
    src = by_setting(json.loads(src_path.read_text())) if src_path.exists() else {}
    out: dict[str, dict[str, Any]] = {}
    for cond, cells in rl.items():
        for method, cell in cells.items():
            base = src.get(cond, {}).get(method)
            if base is None:
                continue
            a = outcomes(cell_dir(rl_eval, cond, method))
            b = outcomes(cell_dir(source_eval, cond, method))
            d = paired(a, b, n_boot=n_boot, seed=seed)
            if d is None:
                continue
            out.setdefault(cond, {})[method] = {"rl": cell, "source": base, "paired": d}
    return out


def comparison_lines(summary: Mapping[str, Any]) -> dict[str, str]:
    """One report line per (condition, method): SR and LLM% of the RL run vs the source, paired differences."""
    lines = {}
    for cond, methods in summary["test"].items():
        for method, c in methods.items():
            rl, src, d = c["rl"], c["source"], c["paired"]
            lines[f"{cond}: {method}"] = (
                f"SR {with_ci(rl['sr'], rl['sr_ci'])} vs {src['sr']:.1f}: "
                f"{with_ci(d['sr_diff'], d['sr_diff_ci'], signed=True)} points (paired, "
                f"{d['episodes']} episodes); LLM% {rl['llm_pct']:.1f} vs {src['llm_pct']:.1f}: "
                f"{with_ci(d['llm_pct_diff'], d['llm_pct_diff_ci'], signed=True)}")
    return lines
