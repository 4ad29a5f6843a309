"""``r2v rl --run-dir RUN --out-dir RL_RUN``: GRPO from a run's SLM, then R2V on the RL-tuned SLM, resumable.

RL_RUN is a run directory of its own, laid out as :mod:`r2v_train.run_dir` says, so ``slm:RL_RUN`` and
``r2v:RL_RUN`` (``r2v eval``), ``r2v view`` and ``r2v report`` read it as they read any run::

    RL_RUN/manifest.json          the source run's chain config, the rl config, the source run's path
    RL_RUN/split/                 the source run's task split (copied)
    RL_RUN/rl/model/              the RL-tuned SLM (HF model dir + tokenizer): what slm:/r2v: load
    RL_RUN/rl/checkpoints/        TRL checkpoints (resume), one per evaluation
    RL_RUN/rl/curve.json, learning_curve.png   the learning curve (r2v_train.rl.curve)
    RL_RUN/rl/evals/step-<N>/     each evaluation while training, an `r2v eval` directory (`r2v view` shows it)
    RL_RUN/router_data/, router/  the chain's stages 7 and 8 rerun on the RL-tuned SLM
    RL_RUN/eval/results.json      Table 1's methods on the RL-tuned SLM (the source run's evaluation config)
    RL_RUN/rl/results.json        RL minus source on the same test episodes (paired), per condition and method
    RL_RUN/report.md              the report of the RL run (Table 1, per type, calibration, the RL comparison)

Stages (``rl``, ``router_data``, ``router``, ``evaluate``) write ``stage.json`` when done and are skipped on a
rerun with the same key (the rl config and the source SLM); a killed ``rl`` stage resumes from its last
checkpoint, the runner stages from their shards.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from r2v_envs.fileio import jsonable, write_json_atomic
from r2v_envs.provenance import git_revision, package_versions
from r2v_train.chain.stages import ChainConfig, read_marker, run_stage, stage_fns
from r2v_train.config import load_config
from r2v_train.evaluation.agents import agents_from_run
from r2v_train.evaluation.methods import EvalConfig, evaluate
from r2v_train.evaluation.report import write_report
from r2v_train.rl.compare import compare_runs, comparison_lines
from r2v_train.rl.config import RLConfig
from r2v_train.rl.grpo import train_grpo
from r2v_train.run_dir import MANIFEST, eval_dir, pipeline_file, slm_model, stage_paths
from r2v_train.runtime.cpu import set_threads

RL_STAGES = ("rl", "router_data", "router", "evaluate")
RESULTS = "results.json"


def source_chain(run_dir: str | os.PathLike) -> ChainConfig:
    """The chain config a run was made with (its ``manifest.json``)."""
    path = os.path.join(run_dir, MANIFEST)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{run_dir} has no {MANIFEST}: give a run directory made by `r2v pipeline` or "
                                "`r2v train`")
    with open(path) as fh:
        return load_config({"chain": json.load(fh)["config"]}).chain


def source_model(run_dir: str | os.PathLike) -> str:
    """The SLM a run ends with (:func:`r2v_train.run_dir.slm_model`), which must exist."""
    model = slm_model(run_dir)
    if not os.path.isfile(os.path.join(model, "config.json")):
        raise FileNotFoundError(f"{run_dir} holds no trained SLM (rl/model, dpo/model or bc/model)")
    return model


def source_eval_config(run_dir: str | os.PathLike, chain: ChainConfig) -> EvalConfig:
    """The evaluation the source run's Table 1 used (``pipeline.json``), else the default one on its env."""
    path = pipeline_file(run_dir)
    if path.exists():
        fields = {f.name for f in dataclasses.fields(EvalConfig)}
        saved = json.loads(path.read_text())["config"]["evaluate"]
        return EvalConfig(**{k: v for k, v in saved.items() if k in fields})
    return EvalConfig(env_id=chain.env.env_id, env_kwargs=dict(chain.env.env_kwargs), max_steps=chain.env.max_steps)


def _key(stage: str, cfg: RLConfig, model: str, upstream: str) -> str:
    # the fields set away from their defaults: a field added later at its default keeps finished runs' keys (a
    # changed key clears the stage's directory, a finished training run included)
    defaults = RLConfig()
    identity = {k: v for k, v in dataclasses.asdict(cfg).items()
                if k not in ("progress", "router", "threads") and v != getattr(defaults, k)}
    parts = {"stage": stage, "rl": jsonable(identity), "source_model": os.path.abspath(model), "upstream": upstream}
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=12).hexdigest()


def _prepare(source: str, out: str, chain: ChainConfig, cfg: RLConfig) -> dict[str, Any]:
    os.makedirs(out, exist_ok=True)
    split_src, split_dst = os.path.join(source, "split"), os.path.join(out, "split")
    if not os.path.isdir(split_dst):
        tmp = f"{split_dst}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.copytree(split_src, tmp)
        os.replace(tmp, split_dst)
    path = os.path.join(out, MANIFEST)
    stages = json.loads(Path(path).read_text()).get("stages", {}) if os.path.exists(path) else {}
    manifest = {"config": jsonable(dataclasses.asdict(chain)), "rl": jsonable(dataclasses.asdict(cfg)),
                "source_run": os.path.abspath(source), "source_model": os.path.abspath(source_model(source)),
                "versions": package_versions(), "git_revision": git_revision(),
                "layout": {k: os.path.relpath(v, out) for k, v in stage_paths(out).items()}, "stages": stages,
                "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json_atomic(path, manifest)
    return manifest


def run_rl(cfg: RLConfig, source: str | os.PathLike, out: str | os.PathLike,
           stages: tuple[str, ...] = RL_STAGES) -> dict[str, Any]:
    """Every stage in order over ``out`` (see the module doc); returns ``rl/results.json``'s content."""
    source, out = os.fspath(source), os.fspath(out)
    if os.path.abspath(source) == os.path.abspath(out):
        raise ValueError("--out-dir must be a new directory, not the source run (its SLM and router stay as they are)")
    chain = source_chain(source)
    set_threads(cfg.threads)
    manifest = _prepare(source, out, chain, cfg)
    model = source_model(source)
    ev = source_eval_config(source, chain)
    wanted = [s for s in RL_STAGES if s in stages and (cfg.router or s in ("rl", "evaluate"))]
    if not cfg.router:  # without a router only the SLM is evaluated again
        ev = dataclasses.replace(ev, methods=("slm",), heuristic_sweep=(), entropy_sweep=())
    chain_stages = stage_fns()
    fns: dict[str, Callable[[], dict[str, Any]]] = {
        "rl": lambda: train_grpo(cfg, chain, model, os.path.join(out, "split"), os.path.join(out, "rl")),
        # the chain's own stages 7 and 8: they read the run's SLM (slm_model), here the RL-tuned one
        "router_data": functools.partial(chain_stages["router_data"], chain, out),
        "router": functools.partial(chain_stages["router"], chain, out),
        "evaluate": lambda: _evaluate(chain, ev, source, out, cfg)}
    upstream = ""
    for i, stage in enumerate(wanted):
        name = stage if stage != "evaluate" else "eval"  # Table 1's directory, as in any run
        key = _key(stage, cfg, model, upstream)
        marker = read_marker(out, name)
        current = marker is not None and marker["key"] == key
        result = run_stage(out, name, key, fns[stage], manifest, label=f"rl stage {i + 1}/{len(wanted)} {stage}",
                           what="" if current else _describe(stage, cfg, chain, ev), done=marker if current else None,
                           before=functools.partial(_refuse_to_clear_training, os.path.join(out, name), key)
                           if stage == "rl" else None)
        upstream = result["run_id"]
    path = os.path.join(out, "rl", RESULTS)
    return json.loads(Path(path).read_text()) if os.path.exists(path) else {}


def _refuse_to_clear_training(sdir: str, key: str) -> None:
    """A changed key clears a stage's directory (the chain's rule); a training run is minutes to hours of work, so
    its directory is never cleared: a run of another config (or of code that keys it otherwise) stops here."""
    started = os.path.join(sdir, ".started.json")
    if not os.path.exists(started):
        return
    old = json.loads(Path(started).read_text()).get("key")
    checkpoints = os.path.join(sdir, "checkpoints")
    trained = any(os.path.exists(os.path.join(sdir, p)) for p in ("model", "curve.json")) or (
        os.path.isdir(checkpoints) and any(n.startswith("checkpoint-") for n in os.listdir(checkpoints)))
    if old != key and trained:
        raise FileExistsError(f"{sdir} holds a training run of another rl config (key {old}, this one {key}): "
                              "give a new --out-dir, or remove that directory to train again")


def _describe(stage: str, cfg: RLConfig, chain: ChainConfig, ev: EvalConfig) -> str:
    return {"rl": f"GRPO for {cfg.max_steps} steps of {cfg.starts_per_step} starts x {cfg.group_size} episodes on "
                  f"{chain.env.env_id} ({cfg.perturbations}"
                  f"{', games ' + ' '.join(cfg.train_tasks) if cfg.train_tasks else ''}), evaluated every {cfg.eval_every} steps on "
                  f"{cfg.eval_split}",
            "router_data": "SLM-only rollouts of the RL-tuned SLM on the train and valid tasks (router rows)",
            "router": "the router on the RL-tuned SLM's rows",
            "evaluate": f"{', '.join(ev.methods)} on the {ev.split} split with the RL-tuned SLM, compared with the "
                        "source run on the same episodes"}[stage]


def _evaluate(chain: ChainConfig, ev: EvalConfig, source: str, out: str, cfg: RLConfig) -> dict[str, Any]:
    agents = agents_from_run(chain, out)
    if not cfg.router:  # no router stages ran: no router and no validation router rows to fit baselines on
        agents = dataclasses.replace(agents, router_path=None, valid_router_dir=None)
    results = evaluate(agents, ev, eval_dir(out))
    comparison = compare_runs(eval_dir(out), eval_dir(source), n_boot=ev.bootstrap, seed=ev.bootstrap_seed)
    curve = json.loads(Path(out, "rl", "curve.json").read_text()) if Path(out, "rl", "curve.json").exists() else {}
    rl_marker = read_marker(out, "rl") or {}
    summary = {"source_run": os.path.abspath(source), "rl": jsonable(dataclasses.asdict(cfg)),
               "training": rl_marker.get("outputs", {}), "curve_eval": curve.get("eval", {}),
               "test": comparison, "main_condition": results["main_condition"]}
    write_json_atomic(os.path.join(out, "rl", RESULTS), summary)
    write_report(out, extra={**comparison_lines(summary), "learning curve": "![learning curve](rl/learning_curve.png)"})
    return {"results": os.path.join(out, "rl", RESULTS)}
