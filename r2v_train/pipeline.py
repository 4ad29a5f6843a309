"""``r2v pipeline``: the training chain, the evaluation, the ablations asked for, the router study and the report.

Orchestration only: the config comes from :mod:`r2v_train.config`, the evaluation's agents from
:mod:`r2v_train.evaluation.agents`, every path from :mod:`r2v_train.run_dir`. Everything is resumable: the chain
skips finished stages, the runner skips finished episodes, trained ablation routers are reloaded. The run
directory gets ``pipeline.json`` (the resolved config, stage timings) next to the chain's ``manifest.json``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import jsonable, write_json_atomic
from r2v_eval.results import main_table
from r2v_eval.stats import with_ci
from r2v_train.chain.collect import make_teacher
from r2v_train.chain.stages import run_chain
from r2v_train.config import PipelineConfig
from r2v_train.evaluation import ablations
from r2v_train.evaluation.agents import agents_from_run, dpo_retrainer, shared_slm
from r2v_train.evaluation.methods import METHOD_LABELS, Agents, evaluate, methods_table
from r2v_train.evaluation.report import write_report
from r2v_train.evaluation.study import evaluate_variants, match_on_test_sr, run_repeats
from r2v_train.router.settings import SETTINGS, variant_config
from r2v_train.run_dir import baseline_eval_dir, eval_dir, pipeline_file, stage_paths
from r2v_train.runtime.narrate import say
from r2v_train.runtime.prefetch import STAGE_NEEDS, GamePrefetch, needed_games


def run_ablation(name: str, cfg: PipelineConfig, run_dir: str | os.PathLike) -> dict[str, Any]:
    p, agents = stage_paths(run_dir), agents_from_run(cfg.chain, run_dir)
    ev = dataclasses.replace(cfg.evaluate, per_type=())
    if name == "features":
        return ablations.ablate_features(agents, ev, run_dir)
    if name == "closed_source":
        return ablations.ablate_closed_source(agents, ev, run_dir, p["router_data_train"], p["router_data_valid"],
                                              cfg.chain.router)
    if name == "cvar":
        return ablations.ablate_cvar(agents, ev, run_dir, p["router_data_train"], p["router_data_valid"],
                                     router_cfg=cfg.chain.router)
    if name in ("cvar_scaled", "cvar_deviation"):  # Table 5's grid on the named setting's miss-scale budget
        setting = {"cvar_scaled": "scaled", "cvar_deviation": "deviation_scaled"}[name]
        return ablations.ablate_cvar(agents, ev, run_dir, p["router_data_train"], p["router_data_valid"],
                                     router_cfg=variant_config(cfg.chain.router, SETTINGS[setting]), name=name)
    if name == "feature_sets":
        return ablations.ablate_feature_sets(agents, ev, run_dir, p["router_data_train"], p["router_data_valid"],
                                             cfg.chain.router)
    if name == "consistency":
        return ablations.ablate_consistency(agents, ev, run_dir, dpo_retrainer(cfg.chain, run_dir))
    raise UnknownChoiceError("ablation", name, ablations.ABLATION_NAMES)


def run_pipeline(cfg: PipelineConfig, run_dir: str | os.PathLike) -> dict[str, Any]:
    """Chain -> evaluation -> ablations -> report; returns the summary also written to ``pipeline.json``."""

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    ev = cfg.evaluate
    say(f"pipeline into {run_dir}: the training chain (8 stages), the evaluation of {len(ev.methods)} methods "
        f"under {len(ev.conditions())} conditions, {len(cfg.ablations)} ablations, the report")
    games = GamePrefetch(needed_games(cfg), workers=os.cpu_count() or 2, progress=cfg.chain.progress)
    try:
        games.start()
        games_s = time.perf_counter() - t0
        chain_out = run_chain(cfg.chain, run_dir, before_stage=lambda s: games.wait(STAGE_NEEDS.get(s, ())))
        timings["chain"] = time.perf_counter() - t0  # the up-front games included, as before
        t = time.perf_counter()
        games.wait(STAGE_NEEDS["evaluate"])
        # counted apart: the suite's miniature once spent 414 of its 449 s outside the chain and the evaluation
        games_wait = time.perf_counter() - t
        t = time.perf_counter()
        say(f"evaluation: {', '.join(ev.methods)} on the {ev.split} split, seeds {tuple(ev.seeds)}, conditions "
            f"{', '.join(ev.conditions())}; one bar per method and condition")
        results = evaluate(agents_from_run(cfg.chain, run_dir), ev, eval_dir(run_dir))
        timings["evaluate"] = time.perf_counter() - t
        timings["games before evaluation"] = games_wait  # after "evaluate": a re-rendered report lists keys sorted
        baseline = None
        if cfg.baseline_slm:
            t = time.perf_counter()
            say(f"baseline: the untrained SLM {cfg.baseline_slm} alone on the {ev.split} split (main condition)")
            baseline = evaluate_baseline(cfg, run_dir)
            timings["baseline"] = time.perf_counter() - t
        for name in cfg.ablations:
            t = time.perf_counter()
            say(f"ablation {name}")
            run_ablation(name, cfg, run_dir)
            timings[f"ablation {name}"] = time.perf_counter() - t
        run_study(cfg, run_dir, timings)
    finally:
        games.close()
    timings["total"] = time.perf_counter() - t0
    timings["games_up_front"] = games_s  # in pipeline.json only: the report's Run section keeps its lines
    stage_times = [f"{s} " + ("(done before)" if o.get("skipped") else f"{o.get('wall_s', 0):.0f} s")
                   for s, o in chain_out.items()]
    extra = {"chain stages": ", ".join(stage_times),
             **{f"{k} wall time": f"{v:.0f} s" for k, v in timings.items() if k != "games_up_front"}}
    if baseline is not None:
        extra[f"SLM-only before training ({cfg.baseline_slm})"] = (
            f"SR {with_ci(baseline['sr'], baseline['sr_ci'])} over "
            f"{baseline['episodes']} episodes (trained SLM-only: SR {main_table(results)['slm']['sr']:.1f})")
    report = write_report(run_dir, extra=extra)
    summary = {"config": jsonable(dataclasses.asdict(cfg)), "timings_s": timings, "run": extra, "report": str(report),
               "main": main_table(results),
               "paired": results.get("paired") or {},
               "calibration": {k: {"ece": v["ece"], "brier": v["brier"]}
                               for k, v in (results.get("calibration") or {}).items()}}
    write_json_atomic(pipeline_file(run_dir), summary)
    return summary


def evaluate_baseline(cfg: PipelineConfig, run_dir: str | os.PathLike) -> dict[str, Any]:
    """SLM-only with the untrained ``cfg.baseline_slm`` on the evaluation's main condition, tasks and seeds (the
    trained SLM's sampler settings and verifier); its metrics, also written to ``<run>/eval_baseline``."""

    chain = cfg.chain
    agents = Agents(slm=shared_slm(cfg.baseline_slm, chain.router_data, chain.env.env_id),
                    teacher=lambda: make_teacher(chain.teacher, chain.env.env_id))
    ev = dataclasses.replace(cfg.evaluate, methods=("slm",), per_type=(), heuristic_sweep=(), entropy_sweep=())
    res = evaluate(agents, ev, baseline_eval_dir(run_dir))
    return main_table(res)["slm"]


def run_study(cfg: PipelineConfig, run_dir: str | os.PathLike, timings: dict[str, float] | None = None) -> None:
    """The router study after the evaluation (r2v_train.evaluation.study): settings, counterfactual oracle, repeats."""
    study, t = cfg.study, time.perf_counter()
    if study.variants or study.counterfactual.oracle:
        say(f"router settings {', '.join(study.variants) or '-'}"
            f"{' and the counterfactual oracle' if study.counterfactual.oracle else ''} on the main condition")
        evaluate_variants(cfg.chain, agents_from_run(cfg.chain, run_dir), cfg.evaluate, study, run_dir,
                          eval_dir(run_dir))
    if study.repeats.n > 1:
        run_repeats(cfg.chain, agents_from_run, cfg.evaluate, study, run_dir)
    if study.active:
        match_on_test_sr(run_dir, next(iter(cfg.evaluate.conditions())), n_boot=cfg.evaluate.bootstrap,
                         seed=cfg.evaluate.bootstrap_seed)
    if timings is not None and study.active:
        timings["router study"] = time.perf_counter() - t


def summary_text(summary: Mapping[str, Any]) -> str:
    """The closing summary printed by ``r2v pipeline``."""

    lines = ["", methods_table(summary["main"]), ""]
    for m in ("heuristic", "entropy"):
        d = (summary.get("paired") or {}).get(m)
        if d:
            lines.append(f"R2V minus {METHOD_LABELS[m].lower()} (paired): SR "
                         f"{with_ci(d['sr_diff'], d['sr_diff_ci'], signed=True)}, LLM% "
                         f"{with_ci(d['llm_pct_diff'], d['llm_pct_diff_ci'], signed=True)} points")
    for name, c in summary["calibration"].items():
        lines.append(f"router {name}: validation ECE {c['ece']:.4f}, Brier {c['brier']:.4f}")
    lines.append(f"total {summary['timings_s']['total']:.0f} s; report: {summary['report']}")
    return "\n".join(lines)
