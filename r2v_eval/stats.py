"""Statistics of episode outcomes shared by every evaluation (the R2V pipeline's Table 1 and ``r2v eval``).

Percentile bootstrap CIs over whole episodes (SR, and LLM% as a ratio of resampled sums), paired differences on
the same episodes, and the Pareto front of (cost, SR) points. Pure numpy over shard rows: no model, no env.

Example:
    >>> import numpy as np
    >>> ci = bootstrap_episodes(np.array([1, 0, 1, 1]), np.array([2, 4, 2, 2]), np.array([0, 4, 0, 1]),
    ...                         n_boot=200, seed=0)
    >>> ci["sr"], ci["llm_pct"]
    (75.0, 50.0)
    >>> ci["sr_ci"][0] <= ci["sr"] <= ci["sr_ci"][1]
    True
    >>> with_ci(55.128, [44.87, 66.67]), with_ci(1.3, [0.0, 3.8], signed=True), fmt_ci(None), fmt_num(None)
    ('55.1 [44.9, 66.7]', '+1.3 [+0.0, +3.8]', '-', '-')
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np



def bootstrap_episodes(success: np.ndarray, steps: np.ndarray, teacher_steps: np.ndarray, n_boot: int = 1000,
                       seed: int = 0) -> dict[str, Any]:
    """SR and LLM% (in percent) with 95% percentile bootstrap CIs, resampling whole episodes."""
    success, steps, teacher = (np.asarray(a, dtype=np.float64) for a in (success, steps, teacher_steps))
    n = len(success)
    if n == 0:
        raise ValueError("no episodes to summarise")
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, n, size=(n_boot, n))
    sr_b = success[idx].mean(axis=1) * 100
    llm_b = _llm_pct(teacher[idx], steps[idx])
    llm = 100 * teacher.sum() / steps.sum() if steps.sum() else 0.0
    return {"episodes": n, "steps": int(steps.sum()), "teacher_steps": int(teacher.sum()),
            "sr": float(success.mean() * 100), "sr_ci": _ci95(sr_b), "llm_pct": float(llm), "llm_pct_ci": _ci95(llm_b)}


def episode_metrics(rows: Sequence[Mapping[str, Any]], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The one SR / LLM% path of every evaluation (Table 1's methods and ``r2v eval``'s cells): SR and LLM% with
    95% bootstrap CIs and the summed ``cost`` of episode rows (``success``, ``steps``, ``teacher_calls``, ``cost``).

    The bootstrap resamples positions, so a caller keeps one row order for a rerun to give the same bytes.

    Example:
        >>> m = episode_metrics([{"success": 1, "steps": 4, "teacher_calls": 1, "cost": 2.0},
        ...                      {"success": 0, "steps": 6, "teacher_calls": 0, "cost": 1.0}], n_boot=50)
        >>> m["sr"], m["llm_pct"], m["cost"]
        (50.0, 10.0, 3.0)
    """
    out = bootstrap_episodes(np.array([r["success"] for r in rows]), np.array([r["steps"] for r in rows]),
                             np.array([r["teacher_calls"] for r in rows]), n_boot, seed)
    out["cost"] = float(sum(r["cost"] for r in rows))
    return out


def _llm_pct(teacher: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """LLM% of each row of resampled episodes: teacher steps / steps over the last axis (0 for no steps)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.nan_to_num(teacher.sum(axis=-1) / steps.sum(axis=-1)) * 100


def _ci95(values: np.ndarray) -> list[float]:
    return [float(np.percentile(values, 2.5)), float(np.percentile(values, 97.5))]


def paired_bootstrap(a: Mapping[str, tuple[float, int, int]], b: Mapping[str, tuple[float, int, int]],
                     n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """SR and LLM% of method ``a`` minus method ``b`` on the same episodes (``episode_id -> (success, steps,
    teacher_steps)``), with 95% CIs from resampling episodes jointly: the methods share tasks and seeds, so
    pairing removes the episode-to-episode spread both CIs of Table 1 carry.

    Example:
        >>> a = {"e1": (1, 4, 1), "e2": (1, 4, 2), "e3": (1, 6, 3)}
        >>> b = {"e1": (1, 4, 2), "e2": (0, 4, 4), "e3": (1, 6, 5)}
        >>> d = paired_bootstrap(a, b, n_boot=200)
        >>> round(d["sr_diff"], 1), round(d["llm_pct_diff"], 1), d["llm_pct_diff_ci"][1] < 0
        (33.3, -35.7, True)
    """
    if set(a) != set(b) or not a:
        raise ValueError(f"paired comparison needs the same episodes: {len(set(a) ^ set(b))} differ"
                         if a else "no episodes to compare")
    keys = sorted(a)
    x, y = (np.array([m[k] for k in keys], dtype=np.float64) for m in (a, b))
    idx = np.random.default_rng(seed).integers(0, len(keys), size=(n_boot, len(keys)))
    sr_b = (x[idx, 0] - y[idx, 0]).mean(axis=1) * 100
    llm_b = _llm_pct(x[idx, 2], x[idx, 1]) - _llm_pct(y[idx, 2], y[idx, 1])
    return {"episodes": len(keys), "sr_diff": float((x[:, 0] - y[:, 0]).mean() * 100), "sr_diff_ci": _ci95(sr_b),
            "llm_pct_diff": float(_llm_pct(x[:, 2], x[:, 1]) - _llm_pct(y[:, 2], y[:, 1])),
            "llm_pct_diff_ci": _ci95(llm_b)}


def difference_bootstrap(a: Sequence[float], b: Sequence[float], n_boot: int = 1000, seed: int = 0,
                         percent: bool = True) -> dict[str, Any]:
    """Success rate of episodes ``a`` minus that of episodes ``b`` (in percent; ``percent=False``: the mean of any
    per-episode value, e.g. the return) when they are not the same episodes (e.g. a learner's last tenth of training
    against its first): a 95% CI from resampling each group apart.

    Example:
        >>> d = difference_bootstrap([1, 1, 1, 0] * 5, [0, 0, 1, 0] * 5, n_boot=500)
        >>> d["diff"], d["diff_ci"][0] > 0
        (50.0, True)
    """
    x, y = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    if not len(x) or not len(y):
        raise ValueError("both groups need episodes")
    rng = np.random.default_rng(seed)
    xb = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    yb = y[rng.integers(0, len(y), size=(n_boot, len(y)))].mean(axis=1)
    k = 100 if percent else 1
    return {"episodes": [len(x), len(y)], "diff": float((x.mean() - y.mean()) * k), "diff_ci": _ci95((xb - yb) * k)}


def mean_bootstrap(values: Sequence[float], n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The mean of per-episode values (a success 0/1, a return) with a 95% bootstrap CI.

    Example:
        >>> m = mean_bootstrap([0, 1, 1, 1] * 5, n_boot=500)
        >>> m["mean"], m["episodes"], 0 < m["ci"][0] < 0.75 < m["ci"][1] <= 1
        (0.75, 20, True)
    """
    x = np.asarray(values, dtype=np.float64)
    if not len(x):
        raise ValueError("no episodes")
    boot = x[np.random.default_rng(seed).integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    return {"episodes": len(x), "mean": float(x.mean()), "ci": _ci95(boot)}


def pareto_front(points: Mapping[str, tuple[float, float]]) -> list[str]:
    """Names of the non-dominated (LLM%, SR) points: no other point has lower-or-equal cost and higher-or-equal
    SR with one strict. Sorted by cost.

    Example:
        >>> pareto_front({"a": (0, 50), "b": (30, 90), "c": (40, 80), "d": (100, 95)})
        ['a', 'b', 'd']
    """
    front = [k for k, (c, s) in points.items()
             if not any((c2 <= c and s2 >= s and (c2, s2) != (c, s)) for k2, (c2, s2) in points.items() if k2 != k)]
    return sorted(front, key=lambda k: points[k])


def fmt_num(x: float | None, digits: int = 1) -> str:
    """A number of a report or table cell to ``digits`` decimals; ``-`` when there is none."""
    return "-" if x is None else f"{x:.{digits}f}"


def fmt_ci(ci: Sequence[float] | None, signed: bool = False) -> str:
    """A 95% CI as every report, table and progress line writes it: ``[lo, hi]`` to one decimal (``signed``: with
    the sign, for differences); ``-`` when there is none."""
    if not ci:
        return "-"
    f = "+.1f" if signed else ".1f"
    return f"[{ci[0]:{f}}, {ci[1]:{f}}]"


def with_ci(value: float, ci: Sequence[float] | None, signed: bool = False) -> str:
    """``value [lo, hi]`` (:func:`fmt_ci`); the value alone when there is no CI."""
    text = f"{value:{'+.1f' if signed else '.1f'}}"
    return f"{text} {fmt_ci(ci, signed)}" if ci else text


def md_table(head: Sequence[str], rows: Iterable[Sequence[Any]], align: str | None = None) -> list[str]:
    """The lines of a markdown table as every report writes one: the header, the alignment row (``align``: ``l`` or
    ``r`` per column; default the first column left and the rest right) and a line per row (cells as ``str``).

    Example:
        >>> print("\\n".join(md_table(["agent", "SR"], [["random", fmt_num(12.5)]])))
        | agent | SR |
        |---|---:|
        | random | 12.5 |
    """
    head = list(head)
    align = align or "l" + "r" * (len(head) - 1)
    if len(align) != len(head) or set(align) - {"l", "r"}:
        raise ValueError(f"align names 'l' or 'r' for each of the {len(head)} columns, got {align!r}")
    return (["| " + " | ".join(head) + " |", "|" + "".join("---|" if a == "l" else "---:|" for a in align)]
            + ["| " + " | ".join(str(c) for c in row) + " |" for row in rows])

