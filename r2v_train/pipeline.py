"""``r2v pipeline --config <yaml>``: the training chain, the evaluation, the ablations asked for and the report.

A YAML file (see ``r2v_train/configs/*.yaml``) names a chain ``preset`` and overrides any field of the chain
(:class:`r2v_train.chain.stages.ChainConfig`), the evaluation (:class:`r2v_train.evaluation.methods.EvalConfig`; its env
defaults to the chain's) and lists ``ablations`` to run. Everything is resumable: the chain skips finished
stages, the runner skips finished episodes, trained ablation routers are reloaded. The run directory gets
``pipeline.json`` (the resolved config, stage timings) next to the chain's ``manifest.json``.

Example:
    >>> cfg = load_config({"preset": "tiny", "chain": {"router": {"epochs": 2}},
    ...                    "evaluate": {"seeds": [0, 1], "per_type": []}})
    >>> cfg.chain.router.epochs, cfg.evaluate.seeds, cfg.evaluate.env_id
    (2, (0, 1), 'R2V/TextWorld-v0')
    >>> load_config({"chain": {"rooter": {}}})
    Traceback (most recent call last):
    ...
    r2v_envs.errors.UnknownChoiceError: unknown ChainConfig field 'rooter'; did you mean 'router'? ...
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_agents.prompts import action_style
from r2v_agents.samplers.memo import MemoSampler
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import jsonable, write_json_atomic
from r2v_train.chain.collect import make_sampler, make_teacher, slm_policy
from r2v_train.chain.policy_stages import dpo_stage
from r2v_train.chain.stages import run_chain, set_threads, stage_paths
from r2v_train.configs import preset
from r2v_train.evaluation import ablations
from r2v_train.evaluation.ablations import ABLATION_NAMES
from r2v_train.evaluation.methods import METHOD_LABELS, Agents, EvalConfig, evaluate, methods_table
from r2v_train.evaluation.report import ablation_table, write_report
from r2v_train.evaluation.study import StudyConfig, evaluate_variants, match_on_test_sr, run_repeats
from r2v_train.router.settings import SETTINGS, variant_config
from r2v_train.runtime.cpu import pin_cpu_kernels
from r2v_train.runtime.narrate import say
from r2v_train.runtime.prefetch import STAGE_NEEDS, GamePrefetch, needed_games

CONFIG_DIR = Path(__file__).parent / "configs"
DEFAULT_CONFIG = CONFIG_DIR / "default.yaml"


@dataclass
class PipelineConfig:
    chain: Any
    """the training chain's config (r2v_train.chain.stages.ChainConfig)"""
    evaluate: EvalConfig = field(default_factory=EvalConfig)
    """evaluation of the six methods"""
    ablations: tuple[str, ...] = ()
    """ablations to run after the evaluation: features, closed_source, cvar, consistency, cvar_scaled,
    cvar_deviation, feature_sets"""
    baseline_slm: str = ""
    """an untrained SLM (a model directory or a backbone name, e.g. smollm2) also run as SLM-only on the main
    condition (``<run>/eval_baseline``): the SR before the chain's training, in the report's Run lines"""
    study: StudyConfig = field(default_factory=StudyConfig)
    """named router settings, the counterfactual oracle and repeats (``router_variants``, ``counterfactual``,
    ``repeats`` in the yaml; r2v_train.evaluation.study)"""


def _override(obj: Any, values: Mapping[str, Any]) -> Any:
    """``obj`` (a dataclass) with ``values`` set, recursing into nested dataclasses; lists become tuples where
    the field's default is a tuple."""

    names = {f.name: f for f in dataclasses.fields(obj)}
    changes = {}
    for key, value in (values or {}).items():
        key = key.replace("-", "_")
        if key not in names:
            raise UnknownChoiceError(f"{type(obj).__name__} field", key, list(names))
        cur = getattr(obj, key)
        if dataclasses.is_dataclass(cur) and isinstance(value, Mapping):
            value = _override(cur, value)
        elif isinstance(cur, tuple) and isinstance(value, list):
            value = tuple(value)
        changes[key] = value
    return dataclasses.replace(obj, **changes)


def _merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``, recursing into mappings (lists and scalars are replaced)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, Mapping) and isinstance(out.get(k), Mapping) else v
    return out


def _read_config(source: str | os.PathLike | Mapping[str, Any] | None, seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """A yaml's mapping; ``extends: other.yaml`` (relative to the file, or to r2v_train/configs) is read first
    and overridden key by key."""
    if source is None or isinstance(source, (str, os.PathLike)):
        import yaml

        path = Path(source or DEFAULT_CONFIG)
        with open(path) as fh:
            data = yaml.safe_load(fh) or {}
        here = path.parent
    else:
        data, here = dict(source), CONFIG_DIR
    base = data.pop("extends", None)
    if base is None:
        return data
    base_path = here / base if (here / base).exists() else CONFIG_DIR / base
    if str(base_path.resolve()) in seen:
        raise ValueError(f"config 'extends' loops through {base_path}")
    return _merge(_read_config(base_path, (*seen, str(base_path.resolve()))), data)


def load_config(source: str | os.PathLike | Mapping[str, Any] | None = None) -> PipelineConfig:
    """A :class:`PipelineConfig` from a YAML path (or an already-parsed mapping); None: the embedded default."""

    data = _read_config(source)
    keys = ["preset", "chain", "evaluate", "ablations", "description", "progress", "router_variants",
            "counterfactual", "repeats", "baseline_slm"]
    unknown = set(data) - set(keys)
    if unknown:
        raise UnknownChoiceError("pipeline config key", sorted(unknown)[0], keys)
    chain = _override(preset(data.get("preset", "default")), data.get("chain") or {})
    # a top-level ``progress:`` switches every bar of the run at once; a section's own ``progress`` wins
    chain_set, top = data.get("chain") or {}, {"progress": data["progress"]} if "progress" in data else {}
    if top:
        chain = dataclasses.replace(chain, progress=chain_set.get("progress", top["progress"]),
                                    router=dataclasses.replace(chain.router, progress=(chain_set.get("router") or {})
                                                               .get("progress", top["progress"])))
    env = chain.env  # the evaluation runs on the chain's env unless the file says otherwise
    ev = EvalConfig(env_id=env.env_id, env_kwargs=dict(env.env_kwargs), max_steps=env.max_steps, workers=env.workers)
    ev = _override(ev, {**top, **(data.get("evaluate") or {})})

    for a in data.get("ablations") or ():
        if a not in ABLATION_NAMES:
            raise UnknownChoiceError("ablation", a, ABLATION_NAMES)
    return PipelineConfig(chain=chain, evaluate=ev, ablations=tuple(data.get("ablations") or ()),
                          baseline_slm=data.get("baseline_slm") or "", study=StudyConfig.from_yaml(data))


def agents_from_run(chain: Any, run_dir: str | os.PathLike) -> Agents:
    """The evaluation's parts from a chain run directory: the DPO policy (BC if DPO is absent), the teacher, the
    router and the validation router rows."""

    p = stage_paths(run_dir)
    model = p["dpo_model"] if os.path.isdir(p["dpo_model"]) else p["bc_model"]
    return Agents(slm=shared_slm(model, chain.router_data, chain.env.env_id),
                  teacher=lambda: make_teacher(chain.teacher, chain.env.env_id),
                  router_path=p["router"], valid_router_dir=p["router_data_valid"])


def shared_slm(model_dir: str, cfg: Any, env_id: str) -> Callable[[], Any]:
    """A factory of fresh SLM policies over one sampler, loaded on first use and memoised
    (:class:`r2v_agents.samplers.memo.MemoSampler`): the methods of an evaluation share the SLM's draws for the
    decisions they have in common instead of sampling them again (the draws are a function of the decision)."""

    @functools.cache
    def sampler() -> Any:
        return MemoSampler(make_sampler(model_dir, cfg, action_style(env_id)))

    return lambda: slm_policy(model_dir, cfg, env_id, sampler=sampler())


def dpo_retrainer(chain: Any, run_dir: str | os.PathLike):
    """``retrain(lam, out_dir) -> SLM factory`` for the lambda_cons sweep: the chain's DPO stage from the run's BC
    model and preference pairs with ``consistency_coef = lam``."""

    p = stage_paths(run_dir)

    def retrain(lam: float, out_dir: str):
        out = dpo_stage(dataclasses.replace(chain.dpo, consistency_coef=lam), p["bc_model"], p["pairs"], out_dir)
        return shared_slm(out["model"], chain.router_data, chain.env.env_id)
    return retrain


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
        games.wait(STAGE_NEEDS["evaluate"])
        t = time.perf_counter()
        say(f"evaluation: {', '.join(ev.methods)} on the {ev.split} split, seeds {tuple(ev.seeds)}, conditions "
            f"{', '.join(ev.conditions())}; one bar per method and condition")
        results = evaluate(agents_from_run(cfg.chain, run_dir), ev, run_dir / "eval")
        timings["evaluate"] = time.perf_counter() - t
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
            f"SR {baseline['sr']:.1f} [{baseline['sr_ci'][0]:.1f}, {baseline['sr_ci'][1]:.1f}] over "
            f"{baseline['episodes']} episodes (trained SLM-only: SR {results['conditions'][results['main_condition']]['slm']['sr']:.1f})")
    report = write_report(run_dir, extra=extra)
    summary = {"config": jsonable(dataclasses.asdict(cfg)), "timings_s": timings, "run": extra, "report": str(report),
               "main": results["conditions"][results["main_condition"]],
               "paired": results.get("paired") or {},
               "calibration": {k: {"ece": v["ece"], "brier": v["brier"]}
                               for k, v in (results.get("calibration") or {}).items()}}
    write_json_atomic(run_dir / "pipeline.json", summary)
    return summary


def evaluate_baseline(cfg: PipelineConfig, run_dir: str | os.PathLike) -> dict[str, Any]:
    """SLM-only with the untrained ``cfg.baseline_slm`` on the evaluation's main condition, tasks and seeds (the
    trained SLM's sampler settings and verifier); its metrics, also written to ``<run>/eval_baseline``."""

    chain = cfg.chain
    agents = Agents(slm=shared_slm(cfg.baseline_slm, chain.router_data, chain.env.env_id),
                    teacher=lambda: make_teacher(chain.teacher, chain.env.env_id))
    ev = dataclasses.replace(cfg.evaluate, methods=("slm",), per_type=(), heuristic_sweep=(), entropy_sweep=())
    res = evaluate(agents, ev, Path(run_dir) / "eval_baseline")
    return res["conditions"][res["main_condition"]]["slm"]


def run_study(cfg: PipelineConfig, run_dir: str | os.PathLike, timings: dict[str, float] | None = None) -> None:
    """The router study after the evaluation (r2v_train.evaluation.study): settings, counterfactual oracle, repeats."""
    study, t = cfg.study, time.perf_counter()
    if study.variants or study.counterfactual.oracle:
        say(f"router settings {', '.join(study.variants) or '-'}"
            f"{' and the counterfactual oracle' if study.counterfactual.oracle else ''} on the main condition")
        evaluate_variants(cfg.chain, agents_from_run(cfg.chain, run_dir), cfg.evaluate, study, run_dir,
                          Path(run_dir) / "eval")
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
            lines.append(f"R2V minus {METHOD_LABELS[m].lower()} (paired): SR {d['sr_diff']:+.1f} "
                         f"[{d['sr_diff_ci'][0]:+.1f}, {d['sr_diff_ci'][1]:+.1f}], LLM% {d['llm_pct_diff']:+.1f} "
                         f"[{d['llm_pct_diff_ci'][0]:+.1f}, {d['llm_pct_diff_ci'][1]:+.1f}] points")
    for name, c in summary["calibration"].items():
        lines.append(f"router {name}: validation ECE {c['ece']:.4f}, Brier {c['brier']:.4f}")
    lines.append(f"total {summary['timings_s']['total']:.0f} s; report: {summary['report']}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------ commands
@dataclass
class PipelineArgs:
    """Run the whole R2V pipeline (chain, evaluation, ablations, report) into a run directory; resumable."""

    config: str = str(DEFAULT_CONFIG)
    """YAML config (default: the embedded CPU default)"""
    run_dir: str = "runs/r2v"
    """run directory (a rerun resumes)"""
    progress: bool | None = None
    """progress bars on stderr (default: the config's ``progress:``, itself on by default); off for logs"""


@dataclass
class RunDirArgs:
    """Act on an existing run directory made by ``r2v pipeline`` (or the chain) with the same config."""

    run_dir: str = "runs/r2v"
    """run directory"""
    config: str = str(DEFAULT_CONFIG)
    """the YAML config the run was made with"""


def _use_chain_threads(cfg: PipelineConfig) -> None:
    """Torch threads and CPU kernels as in the chain (``r2v pipeline`` evaluates in the chain's process, so it has
    them already)."""

    pin_cpu_kernels(cfg.chain.cpu_kernels)
    set_threads(cfg.chain.threads)


def _pipeline(args: PipelineArgs) -> None:
    data = _read_config(args.config)
    if args.progress is not None:
        data["progress"] = args.progress
    print(summary_text(run_pipeline(load_config(data), args.run_dir)))


def _evaluate(args: RunDirArgs) -> None:
    cfg = load_config(args.config)
    _use_chain_threads(cfg)
    r = evaluate(agents_from_run(cfg.chain, args.run_dir), cfg.evaluate, Path(args.run_dir) / "eval")
    print(methods_table(r["conditions"][r["main_condition"]]))


def _report(args: RunDirArgs) -> None:
    print(write_report(args.run_dir))


def _router_study(args: RunDirArgs) -> None:
    """Only the router study (settings, counterfactual oracle, repeats) on a finished run, then the report."""
    cfg = load_config(args.config)
    _use_chain_threads(cfg)
    run_study(cfg, args.run_dir)
    print(write_report(args.run_dir))


def _ablate(name: str):
    def cmd(args: RunDirArgs) -> None:
        cfg = load_config(args.config)
        _use_chain_threads(cfg)
        out = run_ablation(name, cfg, args.run_dir)
        print(ablation_table(out["rows"]))
        if (Path(args.run_dir) / "eval" / "results.json").exists():
            print(write_report(args.run_dir))
    return cmd


def register_commands() -> dict[str, tuple[Any, type]]:
    """Subcommands for ``r2v_train.cli.COMMANDS`` (name -> (function, tyro args class))."""
    return {"pipeline": (_pipeline, PipelineArgs), "evaluate": (_evaluate, RunDirArgs), "report": (_report, RunDirArgs),
            "ablate-features": (_ablate("features"), RunDirArgs),
            "ablate-closed-source": (_ablate("closed_source"), RunDirArgs),
            "ablate-cvar": (_ablate("cvar"), RunDirArgs), "ablate-consistency": (_ablate("consistency"), RunDirArgs),
            "ablate-cvar-scaled": (_ablate("cvar_scaled"), RunDirArgs),
            "ablate-cvar-deviation": (_ablate("cvar_deviation"), RunDirArgs),
            "ablate-feature-sets": (_ablate("feature_sets"), RunDirArgs),
            "router-study": (_router_study, RunDirArgs)}
