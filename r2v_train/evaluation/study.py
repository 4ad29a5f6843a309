"""The router study of ``r2v pipeline``: named router settings, the counterfactual oracle, and repeats.

After the evaluation, with the yaml's ``router_variants``, ``counterfactual`` and ``repeats`` sections:

* :func:`evaluate_variants`: each named router setting (:mod:`r2v_train.router.settings`) is trained on the run's
  router data into ``<run>/router_variants/<name>/`` and evaluated routed on the main condition
  (``eval/runs/<cond>/r2v@<name>``), with paired differences against the heuristic and entropy routers on the same
  episodes. Counterfactual labels (:mod:`r2v_train.router.counterfactual`) are made first where a setting trains on them
  (``<run>/counterfactual/{train,valid}``), and with ``counterfactual.oracle`` the counterfactual oracle runs next
  to the paper's (``eval/runs/<cond>/cf_oracle``, its labels in ``<run>/counterfactual/test``).
  Everything goes to ``eval/variants.json``.
* :func:`run_repeats`: the router-data and router stages (and the evaluation of the methods that depend on them:
  entropy, heuristic, R2V) rerun ``repeats.n - 1`` more times with shifted rollout seeds, sampler seed and router
  seed, each in ``<run>/repeats/r<i>/`` sharing the run's upstream stages (symlinks; their stage keys match) and
  its SLM-only, LLM-only and oracle cells (they do not read router data). ``eval/repeats.json`` holds every
  repeat's cells and the mean, standard deviation and range of SR and LLM% per method.

Every episode runs through the rollout runner, so all of it resumes.

Example:
    >>> spread({"r2v": [{"sr": 97.0, "llm_pct": 40.0}, {"sr": 99.0, "llm_pct": 34.0}]})["r2v"]["llm_pct"]
    {'mean': 37.0, 'std': 3.0, 'min': 34.0, 'max': 40.0, 'range': 6.0}
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from r2v_agents.routed import RoutedPolicy
from r2v_agents.routers import EntropyRouter, HeuristicRouter, MLPRouter, Router
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import write_json_atomic
from r2v_eval.cells import outcomes, paired, sr_metrics
from r2v_eval.results import by_setting
from r2v_eval.results import runs as setting_runs
from r2v_train.chain.stages import STAGES, run_chain
from r2v_train.evaluation.methods import (
    Agents,
    EvalConfig,
    cheapest_within,
    evaluate,
    load_results,
    run_method,
)
from r2v_train.router.counterfactual import CounterfactualConfig, StepOracleRouter, counterfactual_labels
from r2v_train.router.data import RouterData
from r2v_train.router.settings import resolve_variants, router_rows, train_variant, variant_config
from r2v_train.run_dir import (
    MATCHED_FILE,
    REPEATS_FILE,
    VARIANTS_FILE,
    cell_dir,
    conditions_dir,
    counterfactual_dir,
    eval_dir,
    repeat_dir,
    repeat_dirs,
    stage_paths,
    variant_router_dir,
)
from r2v_train.runtime.narrate import say

ROUTER_DATA_METHODS = ("entropy", "heuristic", "r2v")
"""Methods whose cells depend on the router data (thresholds fitted on its validation rows, or the router)."""
BASELINES = ("heuristic", "entropy")


@dataclass
class CounterfactualStudyConfig(CounterfactualConfig):
    """Counterfactual labels of the pipeline (``counterfactual:`` in the yaml)."""

    oracle: bool = False
    """also run the counterfactual oracle on the test split next to the paper's oracle"""


@dataclass
class RepeatConfig:
    """``repeats:`` in the yaml: rerun router data + router (+ their evaluation) to measure the spread."""

    n: int = 1
    """runs in all (1: no repeat)"""
    seed_offset: int = 1000
    """repeat i shifts the router-data rollout seeds by i * seed_offset and the sampler and router seeds by i"""
    variants: tuple[str, ...] = ()
    """named router settings (of ``router_variants``) trained on every repeat's router data and evaluated too,
    so their spread is measured next to R2V's (cells ``r2v@<name>``; settings on counterfactual labels cannot
    repeat, their labels are made for the main run's rollouts only)"""

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"repeats.n must be >= 1; got {self.n}")
        self.variants = tuple(self.variants)


@dataclass
class StudyConfig:
    variants: dict[str, dict[str, Any]] = field(default_factory=dict)
    counterfactual: CounterfactualStudyConfig = field(default_factory=CounterfactualStudyConfig)
    repeats: RepeatConfig = field(default_factory=RepeatConfig)
    matched_baselines: bool = True
    """also run the heuristic and entropy routers with thresholds fitted on the validation rows to each setting's
    failure recall (cells ``heuristic@<tau>``, ``entropy@<tau>``), and pair the setting with them: a comparison at
    matched reliability, which Table 1's baselines give only for the chain's router (the heuristic is fitted to
    its recall; entropy maximises Youden's J)"""

    @classmethod
    def from_yaml(cls, data: Mapping[str, Any]) -> StudyConfig:
        out = cls(variants=resolve_variants(data.get("router_variants")),
                  counterfactual=CounterfactualStudyConfig(**(data.get("counterfactual") or {})),
                  repeats=RepeatConfig(**(data.get("repeats") or {})),
                  matched_baselines=bool(data.get("matched_baselines", True)))
        missing = [v for v in out.repeats.variants if v not in out.variants]
        if missing:
            raise UnknownChoiceError("repeated router setting (list it in router_variants)", missing[0],
                                     sorted(out.variants))
        return out

    @property
    def active(self) -> bool:
        return bool(self.variants) or self.counterfactual.oracle or self.repeats.n > 1


def _paired(out: Path, run_dir: Path, runs: Mapping[str, str], cfg: EvalConfig) -> dict[str, Any]:
    a = outcomes(run_dir)
    return {m: paired(a, outcomes(out / runs[m]), cfg.bootstrap, cfg.bootstrap_seed)
            for m in ("heuristic", "entropy", "oracle", "llm") if m in runs}


def evaluate_variants(chain: Any, agents: Agents, ev: EvalConfig, study: StudyConfig, run_dir: str | os.PathLike,
                      eval_dir: str | os.PathLike) -> dict[str, Any]:
    """Train and evaluate the named router settings and the counterfactual oracle; writes ``eval/variants.json``."""
    run_dir, out = Path(run_dir), Path(eval_dir)
    p = stage_paths(run_dir)
    cond, spec = next(iter(ev.conditions().items()))
    runs = setting_runs(load_results(out), cond)
    progress = ev.progress
    cf_dirs = {part: os.fspath(counterfactual_dir(run_dir, part)) for part in ("train", "valid", "test")}
    cf_summary: dict[str, Any] = {}
    needs_cf = any(variant_config(chain.router, o).labels == "counterfactual" for o in study.variants.values())
    parts = [*(("train", "valid") if needs_cf else ()), *(("test",) if study.counterfactual.oracle else ())]
    sources = {"train": p["router_data_train"], "valid": p["router_data_valid"], "test": os.fspath(out / runs["slm"])}
    for part in parts:
        say(f"counterfactual labels on the {part} rollouts: at most {study.counterfactual.steps_per_rollout} "
            "teacher-at-t episodes per failed rollout")
        cf_summary[part] = counterfactual_labels(sources[part], cf_dirs[part], agents.slm(), agents.teacher(),
                                                 study.counterfactual, workers=ev.workers, progress=progress)
    rows: dict[str, Any] = {}
    if study.counterfactual.oracle:
        router = StepOracleRouter.from_labels(sources["test"], cf_dirs["test"])
        d = cell_dir(out, cond, "cf_oracle")
        run_method(RoutedPolicy(agents.slm(), agents.teacher(), router), "cf_oracle", ev, spec, d)
        rows["cf_oracle"] = {**sr_metrics(d, ev.bootstrap, ev.bootstrap_seed), "run": os.path.relpath(d, out),
                             "rescued_rollouts": len(router.rescue), "paired": _paired(out, d, runs, ev)}
    for name, overrides in study.variants.items():
        rows[f"r2v@{name}"] = _variant_row(chain, agents, ev, name, overrides, run_dir, out, cf_dirs,
                                           study.matched_baselines)
    summary = {"condition": cond, "rows": rows, "counterfactual": cf_summary}
    write_json_atomic(out / VARIANTS_FILE, summary)
    return summary


def matched_baselines(router: Router, valid: RouterData, baseline_valid: RouterData) -> tuple[float, dict[str, Router]]:
    """``router``'s failure recall on its validation rows (``valid``: its features, Eq. 7 labels) and the heuristic
    and entropy routers with the highest thresholds that reach that recall on the same rollouts (``baseline_valid``:
    Eq. 6's 15 features, which the baselines read), so that every router escalates the same share of failing steps.

    Example:
        >>> from r2v_agents.features import N_FEATURES
        >>> rng = np.random.default_rng(0)
        >>> f = rng.random((40, N_FEATURES)); y = (rng.random(40) < 0.5).astype(np.int8)
        >>> data = RouterData(features=f, y=y, seed=np.arange(40) // 4)
        >>> r = HeuristicRouter(0.6)
        >>> recall, base = matched_baselines(r, data, data)
        >>> hit = lambda router: router.escalate(data.features)[y == 1]  # noqa: E731
        >>> recall == float(np.mean(hit(r))), bool((hit(base["heuristic"]) == hit(r)).all())
        (True, True)
        >>> float(np.mean(hit(base["entropy"]))) >= recall
        True
    """
    y = valid.y.astype(bool)
    recall = float(np.mean(router.escalate(valid.features)[y])) if y.any() else float("nan")
    out: dict[str, Router] = {"heuristic": HeuristicRouter(), "entropy": EntropyRouter()}
    if y.any():
        for r in out.values():
            r.calibrate(baseline_valid.features, baseline_valid.y, recall=recall)
    return recall, out


def _matched_rows(router: Router, cfg: Any, valid_dir: str, a: Agents, ev: EvalConfig, d: Path, out: Path
                  ) -> dict[str, Any]:
    """Run the baselines matched to ``router``'s validation recall and pair the setting's run ``d`` with them."""
    base = RouterData.from_run(valid_dir)
    own = router_rows(valid_dir, dataclasses.replace(cfg, labels="episode")) if cfg.features != "full" else base
    recall, routers = matched_baselines(router, own, base)
    cond, spec = next(iter(ev.conditions().items()))
    rows: dict[str, Any] = {"recall": recall}
    for m, r in routers.items():
        cell = f"{m}@{r.threshold:.8g}"  # the same router as a sweep point at that threshold: one cell
        dm = cell_dir(out, cond, cell)
        run_method(RoutedPolicy(a.slm(), a.teacher(), r, budget_per_episode=ev.budget_per_episode), cell, ev, spec,
                   dm)
        rows[m] = {**sr_metrics(dm, ev.bootstrap, ev.bootstrap_seed), "threshold": r.threshold,
                   "run": os.path.relpath(dm, out),
                   "paired": paired(outcomes(d), outcomes(dm), ev.bootstrap, ev.bootstrap_seed)}
    return rows


def _variant_row(chain: Any, agents: Agents, ev: EvalConfig, name: str, overrides: Mapping[str, Any], run_dir: Path,
                 out: Path, cf_dirs: Mapping[str, str] | None = None, matched: bool = False) -> dict[str, Any]:
    """Train router setting ``name`` on ``run_dir``'s router data and evaluate it routed on the main condition
    (``out/runs/<cond>/r2v@<name>``, resumable); its metrics, training figures and paired differences (with
    ``matched``, also against the baselines matched to its validation recall: :func:`matched_baselines`)."""
    p = stage_paths(run_dir)
    cond, spec = next(iter(ev.conditions().items()))
    runs = setting_runs(load_results(out), cond)
    say(f"router setting {name}: {overrides or 'the chain router config'}")
    path, metrics = train_variant(name, overrides, chain.router, p["router_data_train"], p["router_data_valid"],
                                  variant_router_dir(run_dir, name), cf_dirs)
    a = dataclasses.replace(agents, router_path=path)
    d = cell_dir(out, cond, f"r2v@{name}")
    router = MLPRouter.load(path)
    run_method(RoutedPolicy(a.slm(), a.teacher(), router, budget_per_episode=ev.budget_per_episode), f"r2v@{name}",
               ev, spec, d)
    v = metrics["valid"]
    row = {**sr_metrics(d, ev.bootstrap, ev.bootstrap_seed), "run": os.path.relpath(d, out),
           "overrides": dict(overrides), "threshold": metrics["threshold"], "lambda": metrics["lambda"],
           "valid_ece": v["ece"], "valid_brier": v["brier"], "valid_escalation": v["escalation_rate"],
           "valid_rows": v["n"], "paired": _paired(out, d, runs, ev)}
    if matched:
        say(f"router setting {name}: heuristic and entropy routers at its validation failure recall")
        row["matched"] = _matched_rows(router, variant_config(chain.router, overrides), p["router_data_valid"], a,
                                       ev, d, out)
    return row


def spread(cells: Mapping[str, Sequence[Mapping[str, float]]]) -> dict[str, Any]:
    """Mean, standard deviation (population), min, max and range of SR and LLM% per method over repeats."""
    out: dict[str, Any] = {}
    for method, reps in cells.items():
        out[method] = {}
        for k in ("sr", "llm_pct"):
            x = np.array([r[k] for r in reps], dtype=float)
            out[method][k] = {"mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()),
                              "max": float(x.max()), "range": float(x.max() - x.min())}
    return out


def _link_upstream(run_dir: Path, rep_dir: Path) -> None:
    rep_dir.mkdir(parents=True, exist_ok=True)
    for stage in STAGES[:STAGES.index("router_data")]:
        link = rep_dir / stage
        if not link.exists():
            os.symlink(os.path.relpath(run_dir / stage, rep_dir), link)


def run_repeats(chain: Any, agents_for: Any, ev: EvalConfig, study: StudyConfig, run_dir: str | os.PathLike
                ) -> dict[str, Any]:
    """Repeats 1..n-1 of the router-data and router stages and their evaluation; writes ``eval/repeats.json``.

    ``agents_for(chain, run_dir)`` builds the evaluation's agents of a run directory."""
    run_dir = Path(run_dir)
    main = load_results(eval_dir(run_dir))
    cond = main["main_condition"]
    cells = {m: [c] for m, c in by_setting(main)[cond].items()}
    main_runs = setting_runs(main, cond)
    paired: dict[str, list[Any]] = {}
    per_repeat = [{"dir": ".", "seeds": _seeds(chain)}]
    ev_main = dataclasses.replace(ev, per_type=(), heuristic_sweep=(), entropy_sweep=())

    def variants(c: Any, rep: Path) -> None:  # the repeated settings, on this repeat's router data
        for name in study.repeats.variants:
            row = _variant_row(c, agents_for(c, rep), ev_main, name, study.variants[name], rep, eval_dir(rep),
                               matched=study.matched_baselines)
            cells.setdefault(f"r2v@{name}", []).append(row)
            diffs = {**row["paired"], **{f"{m}@matched": x["paired"] for m, x in row.get("matched", {}).items()
                                         if m in BASELINES}}
            paired.setdefault(f"r2v@{name}", []).append(
                {m: {k: x[k] for k in ("sr_diff", "llm_pct_diff", "llm_pct_diff_ci")} for m, x in diffs.items()})
            for m in BASELINES:
                if m in row.get("matched", {}):
                    cells.setdefault(f"{m}@matched:{name}", []).append(row["matched"][m])

    variants(chain, run_dir)
    for i in range(1, study.repeats.n):
        off = i * study.repeats.seed_offset
        rd = dataclasses.replace(chain.router_data, train_seeds=tuple(s + off for s in chain.router_data.train_seeds),
                                 valid_seeds=tuple(s + off for s in chain.router_data.valid_seeds),
                                 sampler_seed=chain.router_data.sampler_seed + i)
        c = dataclasses.replace(chain, router_data=rd, router=dataclasses.replace(chain.router, seed=chain.router.seed + i))
        rep = repeat_dir(run_dir, i)
        say(f"repeat {i + 1}/{study.repeats.n}: router data (seeds {rd.train_seeds} / {rd.valid_seeds}, sampler "
            f"seed {rd.sampler_seed}), router (seed {c.router.seed}), evaluation of {', '.join(ROUTER_DATA_METHODS)}")
        _link_upstream(run_dir, rep)
        run_chain(c, rep)
        for m in (m for m in ev.methods if m not in ROUTER_DATA_METHODS):  # cells that do not read router data
            link = cell_dir(eval_dir(rep), cond, m)
            if not link.exists():
                link.parent.mkdir(parents=True, exist_ok=True)
                os.symlink(os.path.relpath(eval_dir(run_dir) / main_runs[m], link.parent), link)
        r = evaluate(agents_for(c, rep), ev_main, eval_dir(rep))
        for m, cell in by_setting(r)[cond].items():
            cells.setdefault(m, []).append(cell)
        variants(c, rep)
        per_repeat.append({"dir": os.path.relpath(rep, run_dir), "seeds": _seeds(c)})
    summary = {"condition": cond, "n": study.repeats.n, "repeats": per_repeat,
               "cells": {m: [{k: c[k] for k in ("sr", "llm_pct", "sr_ci", "llm_pct_ci", "episodes")} for c in v]
                         for m, v in cells.items()},
               "paired": paired, "spread": spread(cells)}
    write_json_atomic(eval_dir(run_dir) / REPEATS_FILE, summary)
    return summary


def match_on_test_sr(run_dir: str | os.PathLike, condition: str, slack: float = 2.0, n_boot: int = 1000,
                     seed: int = 0) -> dict[str, Any]:
    """Each R2V cell of the run and its repeats (``r2v``, ``r2v@<setting>``) against the cheapest heuristic and
    entropy cell whose test SR is within ``slack`` points of its own (or above), paired on the same episodes; writes
    ``eval/matched.json``.

    The candidates are every baseline cell the study ran (Table 1's fitted thresholds, the sweeps, the thresholds
    matched per setting, in every repeat): a router at a fixed threshold reads no router data, so each serves every
    repeat. Choosing among them on the test split favours the baselines; a setting no candidate comes within
    ``slack`` of gets None (it is more reliable than every baseline point tried)."""
    run_dir = Path(run_dir)
    reps = repeat_dirs(run_dir)
    per_rep = [[d for d in sorted((conditions_dir(eval_dir(rep)) / condition).glob("*")) if list(d.glob("episodes-*.parquet"))]
               for rep in reps]
    cells = {d: sr_metrics(d, n_boot, seed) for dirs in per_rep for d in dirs}
    pool = {b: [d for d in cells if d.name == b or d.name.startswith(b + "@")] for b in BASELINES}
    rows: dict[str, list[Any]] = {}
    for i, dirs in enumerate(per_rep):
        for d in (d for d in dirs if d.name.split("@")[0] == "r2v"):
            ours, entry = outcomes(d), {"repeat": i, "sr": cells[d]["sr"], "llm_pct": cells[d]["llm_pct"]}
            for b, cands in pool.items():
                best = cheapest_within(cands, cells[d]["sr"], slack, cell=cells.__getitem__)
                entry[b] = None if best is None else {
                    "cell": best.name, "run": os.path.relpath(best, run_dir), "sr": cells[best]["sr"],
                    "llm_pct": cells[best]["llm_pct"],
                    "paired": paired(ours, outcomes(best), n_boot, seed)}
            rows.setdefault(d.name, []).append(entry)
    out = {"condition": condition, "slack": slack, "rows": rows}
    write_json_atomic(eval_dir(run_dir) / MATCHED_FILE, out)
    return out


def _seeds(chain: Any) -> dict[str, Any]:
    rd = chain.router_data
    return {"train_seeds": list(rd.train_seeds), "valid_seeds": list(rd.valid_seeds), "sampler_seed": rd.sampler_seed,
            "router_seed": chain.router.seed}
