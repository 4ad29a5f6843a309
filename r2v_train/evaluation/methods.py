"""Evaluation of Sec. 5 (Table 1): the paper's six methods and the policy alone, through the shared runner, SR and
LLM% with bootstrap CIs.

Methods (:data:`METHODS`), all on the test split under the composite perturbation and, optionally, under each
perturbation type alone:

* ``slm``: the SLM alone (best of K verified candidates);
* ``policy``: the SLM as a plain policy, its own sample per step (k = 1 at the run's temperature, no verifier): the
  distribution BC, DPO and RL train, beside the deployed SLM-only agent whose SR the verifier's pick among K
  candidates shapes (not in the paper's Table 1; skipped when :class:`Agents` has no ``policy``);
* ``entropy``: escalate when the mean token entropy is high (threshold fitted on validation, Youden's J);
* ``heuristic``: non-learned verifier rules (:class:`r2v_agents.routers.HeuristicRouter`) at comparable
  reliability, as in the paper's Table 1: its threshold is the cheapest one that escalates as large a share of the
  validation failure rows as R2V's router does (``heuristic_fit``; Youden's J without a trained router, or on
  request); ``heuristic_threshold`` fixes it;
* ``r2v``: the trained, calibrated router (``router.pt``, Algorithm 2);
* ``oracle``: HINDSIGHT upper bound: escalates every step of a (task, z) whose logged ``slm`` rollout failed,
  so ``slm`` always runs first;
* ``llm``: the teacher alone.

Each (condition, method) cell is one runner directory ``<out>/runs/<condition>/<method>`` (resumable) with its
retry passes, counted by the one rule of every evaluation (:mod:`r2v_eval.cells`: the last attempt counts, an episode
that could not be run is left out and counted in ``not_run``), so ``r2v eval`` of the same agent on the same episodes
gives the same SR. Metrics are computed from the episode shards only: SR = mean episode success, LLM% = teacher steps
/ all steps (the runner counts a step as a teacher step when its ``source`` is "teacher" or "oracle"). 95% CIs are
percentile bootstrap intervals over episodes (resampled with a fixed seed; LLM% as a ratio of resampled sums). Router
calibration (ECE, Brier, reliability bins; Table 6 columns) is measured on the validation router rows
(f_t, y_t) of SLM-only rollouts. Everything lands in ``<out>/results.json``, which the report renders.

The statistics (bootstrap CIs, paired differences, the Pareto front) are :mod:`r2v_eval.stats`, shared with
``r2v eval``.

Example:
    >>> METHODS
    ('slm', 'policy', 'entropy', 'heuristic', 'r2v', 'oracle', 'llm')
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import r2v_envs  # noqa: F401
from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import EntropyRouter, HeuristicRouter, MLPRouter, OracleRouter
from r2v_agents.runner import RunConfig
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import jsonable, write_json_atomic
from r2v_envs.resolve import env_task_ids
from r2v_eval.cells import outcomes, paired, run_cell
from r2v_eval.results import cell_entry, main_table, sweeps, upgrade
from r2v_eval.robustness import cell_metrics
from r2v_eval.stats import fmt_ci, md_table, pareto_front
from r2v_train.router import calibration
from r2v_train.router.data import RouterData
from r2v_train.run_dir import RESULTS_FILE, cell_dir

METHODS: tuple[str, ...] = ("slm", "policy", "entropy", "heuristic", "r2v", "oracle", "llm")
METHOD_LABELS = {"slm": "SLM-only", "policy": "Policy alone (k = 1)", "entropy": "Entropy router",
                 "heuristic": "Heuristic router", "r2v": "R2V", "oracle": "Oracle router (hindsight)", "llm": "LLM-only"}
PERTURBATION_TYPES: tuple[str, ...] = ("flaky", "partial", "distractor", "injection")
HEURISTIC_FITS: tuple[str, ...] = ("match_r2v", "youden")


@dataclass
class EvalConfig:
    """Which episodes to run every method on, and how to summarise them."""

    env_id: str = "R2V/TextWorld-v0"
    """registered environment id"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra ``gym.make`` arguments (e.g. suite); ``perturbations`` is set per condition"""
    split: str = "test"
    """task split evaluated"""
    max_tasks: int = 0
    """first N tasks of the split (0 = all)"""
    seeds: tuple[int, ...] = (0,)
    """perturbation seeds z; the grid is tasks x seeds"""
    perturbations: Any = "composite"
    """the main condition (Table 1)"""
    per_type: tuple[str, ...] = PERTURBATION_TYPES
    """extra conditions, one perturbation type each (empty: skip)"""
    per_type_seeds: tuple[int, ...] | None = None
    """perturbation seeds of the per-type conditions (None: ``seeds``)"""
    methods: tuple[str, ...] = METHODS
    """methods to run (``oracle`` needs ``slm``)"""
    max_steps: int | None = None
    """episode step cap; None keeps the env's"""
    workers: int = 0
    """env worker processes of the runner"""
    episode_retries: int = 1
    """passes that rerun episodes which could not be run (infrastructure or env faults), as ``r2v eval`` does"""
    retry_backoff_s: float = 2.0
    """pause before the first retry pass; doubles each pass"""
    budget_per_episode: int | None = None
    """teacher-query cap per episode for the routed methods"""
    heuristic_threshold: float | None = None
    """fixed threshold of the heuristic router; None fits it on the validation rows (``heuristic_fit``)"""
    heuristic_fit: str = "match_r2v"
    """how the heuristic's threshold is fitted on validation: ``match_r2v`` = the highest threshold whose recall
    of failure rows (y_t = 1) reaches the R2V router's, so Table 1 compares their cost at comparable reliability
    (Youden's J when no router is trained); ``youden`` = maximise TPR - FPR, as for the entropy router"""
    heuristic_sweep: tuple[float, ...] = ()
    """extra heuristic-router thresholds run on the main condition: its cost/success curve, to compare R2V with
    the heuristic at matched reliability (Figure 3)"""
    entropy_sweep: tuple[float, ...] = ()
    """extra entropy-router thresholds (on p = H / (1 + H)) run on the main condition: its cost/success curve, so
    R2V is compared with entropy routing at matched reliability too"""
    entropy_target_rate: float | None = None
    """validation escalation rate of the entropy router; None fits Youden's J on validation labels"""
    bootstrap: int = 1000
    """bootstrap resamples for the CIs"""
    bootstrap_seed: int = 0
    """seed of the bootstrap"""
    progress: bool = True
    """progress bars"""

    def __post_init__(self) -> None:
        for m in self.methods:
            if m not in METHODS:
                raise UnknownChoiceError("evaluation method", m, METHODS)
        if "oracle" in self.methods and "slm" not in self.methods:
            raise ValueError("the oracle router needs the slm method's rollouts: add 'slm' to methods")
        if self.bootstrap < 1:
            raise ValueError("bootstrap must be >= 1")
        self.seeds = tuple(int(s) for s in self.seeds)
        if self.per_type_seeds is not None:
            self.per_type_seeds = tuple(int(s) for s in self.per_type_seeds)
        self.per_type, self.methods = tuple(self.per_type), tuple(self.methods)
        self.heuristic_sweep = tuple(float(t) for t in self.heuristic_sweep)
        self.entropy_sweep = tuple(float(t) for t in self.entropy_sweep)
        if self.heuristic_fit not in HEURISTIC_FITS:
            raise UnknownChoiceError("heuristic_fit", self.heuristic_fit, HEURISTIC_FITS)

    def conditions(self) -> dict[str, Any]:
        """Condition name -> perturbation spec; the first is the main one."""
        main = self.perturbations if isinstance(self.perturbations, str) else "main"
        return {main: self.perturbations, **{t: t for t in self.per_type if t != main}}

    def seeds_for(self, condition: str) -> tuple[int, ...]:
        """The perturbation seeds evaluated under ``condition`` (the main one always uses ``seeds``)."""
        main = next(iter(self.conditions()))
        return self.seeds if condition == main or self.per_type_seeds is None else self.per_type_seeds


@dataclass
class Agents:
    """How to build the parts of every method (factories: each run gets fresh policies).

    ``slm`` returns an :class:`r2v_agents.slm.SLMPolicy`; ``teacher`` a teacher (policy with ``query_batch``);
    ``router_path`` is the trained R2V router; ``valid_router_dir`` a runner directory with validation router
    rows (SLM-only rollouts) for calibrating the entropy router and for ECE/Brier."""

    slm: Callable[[], Any]
    teacher: Callable[[], Any]
    policy: Callable[[], Any] | None = None
    """the SLM as a plain policy (one sample per step, no verifier); None skips the ``policy`` method"""
    router_path: str | None = None
    valid_router_dir: str | None = None


# ------------------------------------------------------------------------------------------------ metrics
def calibration_metrics(p: np.ndarray, y: np.ndarray) -> dict[str, Any]:
    """ECE, Brier and the reliability bins of failure probabilities ``p`` against labels ``y``."""

    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)
    return {"n": int(len(p)), "ece": calibration.expected_calibration_error(p, y),
            "brier": calibration.brier_score(p, y), "reliability": calibration.reliability_bins(p, y).to_dict()}


# ------------------------------------------------------------------------------------------------ routers
def build_routers(agents: Agents, cfg: EvalConfig) -> dict[str, Any]:
    """The deployable routers: entropy and heuristic (thresholds fitted on validation) and, if trained, R2V.

    Both baselines turn a non-learned score into a decision with the same validation data the R2V threshold is
    selected on (``cfg.heuristic_fit``); without validation rows the heuristic keeps its rule threshold (0.5)."""

    routers: dict[str, Any] = {}
    if agents.router_path is not None and os.path.exists(agents.router_path):
        routers["r2v"] = MLPRouter.load(agents.router_path)
    heuristic = HeuristicRouter(0.5 if cfg.heuristic_threshold is None else cfg.heuristic_threshold)
    entropy = EntropyRouter()
    if agents.valid_router_dir is not None:
        valid = load_valid(agents.valid_router_dir)
        entropy.calibrate(valid.features, valid.y, cfg.entropy_target_rate)
        if cfg.heuristic_threshold is None:
            recall = None
            if cfg.heuristic_fit == "match_r2v" and "r2v" in routers and valid.y.any():
                recall = float(np.mean(routers["r2v"].escalate(valid.features)[valid.y.astype(bool)]))
            heuristic.calibrate(valid.features, valid.y, recall=recall)
    return {"heuristic": heuristic, "entropy": entropy, **routers}


def load_valid(path: str | os.PathLike):
    """Validation router rows (a runner directory, or a .parquet file) as ``RouterData``."""

    return RouterData.read_parquet(path) if str(path).endswith(".parquet") else RouterData.from_run(path)


def router_calibration(routers: Mapping[str, Any], valid_router_dir: str | os.PathLike) -> dict[str, Any]:
    """ECE / Brier / reliability of each router's p on the validation rows (oracle: hindsight, not measured)."""
    valid = load_valid(valid_router_dir)
    out = {}
    for name, router in routers.items():
        if getattr(router, "hindsight", False):
            continue
        p, y = router.predict(valid.features), valid.y.astype(bool)
        out[name] = {**calibration_metrics(p, valid.y), "threshold": float(router.threshold),
                     "escalation_rate": float(np.mean(p >= router.threshold)),
                     "failure_recall": float(np.mean(p[y] >= router.threshold)) if y.any() else float("nan")}
    return out


def make_policy(method: str, agents: Agents, routers: Mapping[str, Any], slm_run_dir: str | None,
                cfg: EvalConfig, ablation: str = "all") -> Any:
    """A fresh policy for ``method``."""

    if method == "slm":
        return agents.slm()
    if method == "policy":
        if agents.policy is None:
            raise ValueError("the policy method needs Agents.policy (the SLM as a plain policy)")
        return agents.policy()
    if method == "llm":
        return agents.teacher()
    if method == "oracle":
        if slm_run_dir is None:
            raise ValueError("the oracle router needs the slm rollouts of the same tasks and seeds")
        router = OracleRouter.from_run(slm_run_dir)
    elif method not in routers:
        raise UnknownChoiceError("router (is router.pt trained?)", method, list(routers))
    else:
        router = routers[method]
    return RoutedPolicy(agents.slm(), agents.teacher(), router, budget_per_episode=cfg.budget_per_episode,
                        ablation=ablation)


def run_method(policy: Any, name: str, cfg: EvalConfig, spec: Any, out_dir: str | os.PathLike,
               seeds: Sequence[int] | None = None) -> str:
    """Run ``policy`` over the evaluation grid (tasks x ``seeds``, default ``cfg.seeds``) under perturbation
    ``spec`` into ``out_dir`` (resumable)."""

    seeds = tuple(cfg.seeds if seeds is None else seeds)
    cfg_run = RunConfig(cfg.env_id, os.fspath(out_dir), task_ids=task_ids(cfg), seeds=seeds, split=cfg.split,
                        env_kwargs={**cfg.env_kwargs, "perturbations": spec}, max_steps=cfg.max_steps,
                        workers=cfg.workers, progress=cfg.progress)
    run_cell(policy, name, cfg_run, cfg.episode_retries, cfg.retry_backoff_s)
    return os.fspath(out_dir)


def task_ids(cfg: EvalConfig) -> tuple[str, ...] | None:
    """The evaluated tasks: the split's first ``max_tasks`` (None: the whole split)."""
    if not cfg.max_tasks:
        return None
    return tuple(env_task_ids(cfg.env_id, cfg.split, **cfg.env_kwargs)[: cfg.max_tasks])


# ------------------------------------------------------------------------------------------------ main
def evaluate(agents: Agents, cfg: EvalConfig, out_dir: str | os.PathLike) -> dict[str, Any]:
    """Run every method under every condition, then write ``<out_dir>/results.json`` (returned)."""

    out = Path(out_dir)
    routers = build_routers(agents, cfg)
    main_cond = next(iter(cfg.conditions()))
    results: dict[str, Any] = {"config": jsonable(asdict(cfg)), "methods": list(cfg.methods),
                               "main_condition": main_cond, "cells": []}
    main: dict[str, dict[str, Any]] = {}  # Table 1's cells, in the order of cfg.methods
    main_dirs: dict[str, str] = {}
    for cond, spec in cfg.conditions().items():
        dirs: dict[str, str] = {}
        for method in cfg.methods:
            if method == "r2v" and "r2v" not in routers:
                continue  # no trained router: the table shows the baselines only
            if method == "policy" and agents.policy is None:
                continue  # agents without a plain policy (a hand-built Agents): the paper's methods only
            run_dir = cell_dir(out, cond, method)
            policy = make_policy(method, agents, routers, dirs.get("slm"), cfg)
            dirs[method] = run_method(policy, method, cfg, spec, run_dir, cfg.seeds_for(cond))
            metrics = cell_metrics(run_dir, cfg.bootstrap, cfg.bootstrap_seed)
            results["cells"].append(cell_entry(out, run_dir, cfg.env_id, cond, method, metrics))
            if cond == main_cond:
                main[method], main_dirs[method] = metrics, dirs[method]
    results["methods"] = [m for m in cfg.methods if m in main_dirs]  # those evaluated (r2v needs a router, ...)
    if "r2v" in main_dirs:  # R2V against each other method on the same episodes
        r2v = outcomes(main_dirs["r2v"])
        results["paired"] = {m: paired(r2v, outcomes(d), cfg.bootstrap, cfg.bootstrap_seed)
                             for m, d in main_dirs.items() if m != "r2v"}
    for m, taus in (("heuristic", cfg.heuristic_sweep), ("entropy", cfg.entropy_sweep)):
        if taus and m in cfg.methods:
            results["cells"] += threshold_sweep(agents, routers, cfg, out, m, taus)
    if agents.valid_router_dir is not None:
        results["calibration"] = router_calibration(routers, agents.valid_router_dir)
    results["pareto"] = pareto_front({m: (c["llm_pct"], c["sr"]) for m, c in main.items() if m != "oracle"})
    write_json_atomic(out / RESULTS_FILE, results)
    return results


SWEPT_ROUTERS = {"heuristic": HeuristicRouter, "entropy": EntropyRouter}


def threshold_sweep(agents: Agents, routers: Mapping[str, Any], cfg: EvalConfig, out: Path, method: str,
                    taus: Sequence[float]) -> list[dict[str, Any]]:
    """Baseline router ``method`` (heuristic or entropy) at each threshold ``taus`` under the main condition: one
    runner directory per threshold (``runs/<condition>/<method>@<tau>``), one cell each (agent ``<method>@<tau>``,
    with ``sweep`` and ``threshold``), sorted by threshold."""

    cond, spec = next(iter(cfg.conditions().items()))
    cells = []
    for tau in sorted(set(taus)):
        swept = {**routers, method: SWEPT_ROUTERS[method](tau)}
        name = f"{method}@{tau:g}"
        run_dir = cell_dir(out, cond, name)
        run_method(make_policy(method, agents, swept, None, cfg), name, cfg, spec, run_dir)
        cells.append(cell_entry(out, run_dir, cfg.env_id, cond, name,
                                cell_metrics(run_dir, cfg.bootstrap, cfg.bootstrap_seed), sweep=method,
                                threshold=tau))
    return cells


def cheapest_within(points: Sequence[Any], sr: float, slack: float, cell: Callable[[Any], Mapping[str, Any]] = dict
                    ) -> Any | None:
    """The point of ``points`` with the lowest LLM% whose SR is at most ``slack`` points below ``sr`` (None if no
    point gets that close); ``cell(point)`` gives a point's metrics (the point itself by default).

    Example:
        >>> cheapest_within([{"sr": 90.0, "llm_pct": 20.0}, {"sr": 98.0, "llm_pct": 60.0}], 99.0, 2.0)
        {'sr': 98.0, 'llm_pct': 60.0}
    """
    ok = [p for p in points if cell(p)["sr"] >= sr - slack - 1e-9]
    return min(ok, key=lambda p: cell(p)["llm_pct"]) if ok else None


def matched_reliability(results: Mapping[str, Any], method: str = "r2v", slack: float = 2.0,
                        baseline: str = "heuristic") -> dict[str, Any] | None:
    """The cheapest ``baseline`` operating point (fitted threshold or sweep) whose SR is within ``slack`` points of
    ``method``'s, with both LLM% values; None without a sweep or when no baseline point gets that close.

    Example:
        >>> cell = lambda agent, sr, llm, **kw: {"perturbation": "c", "agent": agent, "sr": sr, "llm_pct": llm,  # noqa: E731
        ...                                      "run_dir": f"runs/c/{agent}", **kw}
        >>> res = {"main_condition": "c", "cells": [cell("r2v", 99.0, 40.0), cell("heuristic", 90.0, 30.0),
        ...        cell("heuristic@0.2", 97.5, 70.0, sweep="heuristic", threshold=0.2),
        ...        cell("heuristic@0.1", 99.0, 85.0, sweep="heuristic", threshold=0.1)]}
        >>> matched_reliability(res)["baseline_llm_pct"], matched_reliability(res)["threshold"]
        (70.0, 0.2)
    """
    cells = main_table(results)
    sweep = sweeps(results).get(baseline)
    if not sweep or method not in cells or baseline not in cells:
        return None
    points = [{**cells[baseline], "threshold": "fitted"}, *sweep]
    best = cheapest_within(points, cells[method]["sr"], slack)
    if best is None:
        return None
    return {"method_sr": cells[method]["sr"], "method_llm_pct": cells[method]["llm_pct"], "baseline_sr": best["sr"],
            "baseline_llm_pct": best["llm_pct"], "threshold": best["threshold"], "slack": slack,
            "baseline": baseline, "run": best["run_dir"]}


def load_results(out_dir: str | os.PathLike) -> dict[str, Any]:
    """The evaluation's ``results.json`` in the cells schema (an older file upgraded, :mod:`r2v_eval.results`)."""
    with open(Path(out_dir) / RESULTS_FILE) as fh:
        return dict(upgrade(json.load(fh)))


def methods_table(cells: Mapping[str, Mapping[str, Any]], order: Sequence[str] = METHODS,
                  labels: Mapping[str, str] = METHOD_LABELS) -> str:
    """Markdown table of SR and LLM% with their 95% CIs (one row per method, in ``order``).

    Example:
        >>> cell = {"sr": 50.0, "sr_ci": [10.0, 90.0], "llm_pct": 0.0, "llm_pct_ci": [0.0, 0.0], "episodes": 2}
        >>> print(methods_table({"slm": cell}))
        | method | SR (%) | SR 95% CI | LLM% | LLM% 95% CI | episodes |
        |---|---:|---:|---:|---:|---:|
        | SLM-only | 50.0 | [10.0, 90.0] | 0.0 | [0.0, 0.0] | 2 |
    """
    rows = [[labels.get(m, m), f"{c['sr']:.1f}", fmt_ci(c["sr_ci"]), f"{c['llm_pct']:.1f}", fmt_ci(c["llm_pct_ci"]),
             c["episodes"]] for m in [m for m in order if m in cells] + [m for m in cells if m not in order]
            for c in [cells[m]]]
    return "\n".join(md_table(["method", "SR (%)", "SR 95% CI", "LLM%", "LLM% 95% CI", "episodes"], rows))
