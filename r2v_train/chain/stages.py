"""The R2V training chain (Algorithm 1, Table 10): every stage in order over one run directory, resumable.

Public API (stable; ``r2v pipeline``, evaluation and reports build on it)::

    from r2v_train.chain.stages import ChainConfig, run_chain
    outputs = run_chain(ChainConfig(...), "runs/r2v")   # {stage: {"dir", "outputs", "wall_s", "skipped"}}

The run-directory layout is :mod:`r2v_train.run_dir`'s (``stage_paths(run_dir)``).

Stages are numbered in the order they run, here and everywhere (1 split, 2 teacher, 3 replay, 4 bc, 5 preferences,
6 dpo, 7 router_data, 8 router; Algorithm 1 lists the split third, but the teacher needs its train tasks). Each
stage directory holds
``stage.json`` once the stage finished: its config, its outputs, its wall time and a key. The key hashes the
stage's config, the env config and the run ids of the stages it reads, so a stage is skipped when its outputs
are complete and current; a stage whose config changed, whose ``stage.json`` is missing (outputs removed or a
killed run) or whose upstream stage reran runs again, and so does every stage after it. A killed stage resumes
from its partial outputs (runner shards, Trainer checkpoints, preference chunks, router epochs) as long as its
key is unchanged; with a new key its directory is cleared first. Every file is written to a temporary name and
renamed into place.

Command line (``r2v_train.cli``): ``r2v train --run-dir runs/r2v [--preset tiny] [--only bc dpo]
[--config.bc.max-steps 50]``; presets live in :mod:`r2v_train.config`.

Example:
    >>> [s for s in STAGES]
    ['split', 'teacher', 'replay', 'bc', 'preferences', 'dpo', 'router_data', 'router']
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from r2v_agents.shards import load_rows
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import jsonable, write_json_atomic
from r2v_envs.provenance import git_revision, package_versions
from r2v_train.chain import collect, preferences
from r2v_train.chain.bc import BCConfig, bc_stage
from r2v_train.chain.collect import EnvConfig, ReplayConfig, RouterDataConfig, SplitConfig, TeacherConfig
from r2v_train.chain.dpo import DPOConfig, dpo_stage
from r2v_train.chain.preferences import PreferenceConfig
from r2v_train.router.bagging import fit_router
from r2v_train.router.config import RouterTrainConfig
from r2v_train.router.data import RouterData
from r2v_train.run_dir import MANIFEST, MARKER, slm_model, stage_paths
from r2v_train.runtime.cpu import CPU_KERNELS, pin_cpu_kernels, set_threads, torch_cpu_capability
from r2v_train.runtime.narrate import describe_stage, duration, eta_text, say

STAGES = ("split", "teacher", "replay", "bc", "preferences", "dpo", "router_data", "router")
UPSTREAM = {"split": (), "teacher": ("split",), "replay": ("teacher",), "bc": ("teacher", "replay"),
            "preferences": ("teacher", "replay", "bc"), "dpo": ("bc", "preferences"),
            "router_data": ("split", "dpo"), "router": ("router_data",)}
_ENV_STAGES = ("split", "teacher", "replay", "router_data")


@dataclass
class ChainConfig:
    """Every stage's config; the defaults are the paper's settings where they apply (see each dataclass)."""

    env: EnvConfig = field(default_factory=EnvConfig)
    split: SplitConfig = field(default_factory=SplitConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    replay: ReplayConfig = field(default_factory=ReplayConfig)
    bc: BCConfig = field(default_factory=BCConfig)
    preferences: PreferenceConfig = field(default_factory=PreferenceConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    router_data: RouterDataConfig = field(default_factory=RouterDataConfig)
    router: RouterTrainConfig = field(default_factory=lambda: RouterTrainConfig(progress=False))
    threads: int = 2
    """torch CPU threads of the training stages (no more than OMP_NUM_THREADS where it is set)"""
    cpu_kernels: str = "native"
    """CPU kernel paths of torch, MKL and oneDNN (r2v_train.runtime.cpu.CPU_KERNELS): ``native`` lets them pick by
    this CPU's vector ISA, so an AVX2 machine and an AVX512 one train different weights from the same config;
    ``avx2`` pins all three to AVX2, so x86-64 machines that have it compute the same floats"""
    progress: bool = True
    """progress bars of the runner stages (teacher, replay, router_data) on stderr; False for logs"""

    def __post_init__(self) -> None:
        if self.cpu_kernels not in CPU_KERNELS:
            raise UnknownChoiceError("cpu_kernels", self.cpu_kernels, CPU_KERNELS)


def stage_fns() -> dict[str, Callable[[ChainConfig, str], dict[str, Any]]]:
    def split(c, d):
        s = collect.split_stage(c.env, c.split, os.path.join(d, "split"))
        return {"split": stage_paths(d)["split"], "train_tasks": len(s["used"]["train"]),
                "valid_tasks": len(s["used"]["valid"])}

    def teacher(c, d):
        tasks = collect.load_split(os.path.join(d, "split"))["used"]["train"]
        s = collect.teacher_stage(c.env, c.teacher, tasks, os.path.join(d, "teacher"), progress=c.progress)
        return {"dir": s.out_dir, "episodes": s.episodes + s.skipped, "success_rate": _success(s.out_dir)}

    def replay(c, d):
        s = collect.replay_stage(c.env, c.replay, os.path.join(d, "teacher"), os.path.join(d, "replay"),
                                 progress=c.progress)
        return {"dir": s.out_dir, "episodes": s.episodes + s.skipped, "success_rate": _success(s.out_dir)}

    def bc(c, d):
        return bc_stage(c.bc, collect.traj_dirs(d), os.path.join(d, "bc"), c.env.env_id)

    def prefs(c, d):
        return preferences.preferences_stage(c.preferences, stage_paths(d)["bc_model"], collect.traj_dirs(d),
                                             os.path.join(d, "preferences"), c.env.env_id)

    def dpo(c, d):
        p = stage_paths(d)
        return dpo_stage(c.dpo, p["bc_model"], p["pairs"], os.path.join(d, "dpo"))

    def router_data(c, d):
        split_ = collect.load_split(os.path.join(d, "split"))
        # the run's SLM (slm_model): the DPO model here, the RL-tuned one when `r2v rl` reruns this stage
        out = collect.router_data_stage(c.env, c.router_data, slm_model(d), split_,
                                        os.path.join(d, "router_data"), progress=c.progress)
        return {part: {"dir": s["out_dir"], "success_rate": _success(s["out_dir"])} for part, s in out.items()}

    def router(c, d):
        p = stage_paths(d)
        train, valid = RouterData.from_run(p["router_data_train"]), RouterData.from_run(p["router_data_valid"])
        r = fit_router(train, valid, c.router, run_dir=os.path.join(d, "router"))
        v = r.metrics["valid"]
        return {"router": p["router"], "threshold": r.threshold, "train_rows": len(train), "valid_rows": len(valid),
                "valid_ece": v["ece"], "valid_brier": v["brier"], "escalation_rate": v["escalation_rate"]}

    return {"split": split, "teacher": teacher, "replay": replay, "bc": bc, "preferences": prefs, "dpo": dpo,
            "router_data": router_data, "router": router}


def _success(run_dir: str) -> float:
    eps = load_rows(run_dir, "episodes", ["success"])
    return sum(e["success"] for e in eps) / len(eps) if eps else float("nan")


def stage_key(config: ChainConfig, stage: str, upstream_ids: Sequence[str]) -> str:
    """Hash of what a stage's outputs depend on: its config, the env (for env stages), upstream run ids."""
    cfg = getattr(config, stage)
    # a config with an identity() (the router, BC) leaves out what does not change its outputs and the fields
    # added later at their old behaviour, so finished runs keep their keys
    identity = cfg.identity() if hasattr(cfg, "identity") else asdict(cfg)
    parts = {"stage": stage, "config": jsonable(identity), "upstream": list(upstream_ids)}
    if stage in _ENV_STAGES:
        parts["env"] = jsonable(asdict(config.env))
    if config.cpu_kernels != "native":  # other kernels, other floats; native keeps the keys of earlier runs
        parts["cpu_kernels"] = config.cpu_kernels
    return hashlib.blake2b(json.dumps(parts, sort_keys=True).encode(), digest_size=12).hexdigest()


def read_marker(run_dir: str | os.PathLike, stage: str) -> dict[str, Any] | None:
    path = os.path.join(run_dir, stage, MARKER)
    if not os.path.exists(path):
        return None
    with open(path) as fh:
        return json.load(fh)


def run_chain(config: ChainConfig, run_dir: str | os.PathLike, only: Sequence[str] | None = None,
              force: Sequence[str] = (), stop_at_missing: bool = False,
              before_stage: Callable[[str], None] | None = None) -> dict[str, dict[str, Any]]:
    """Run the stages in order over ``run_dir``; returns {stage: {"dir", "outputs", "wall_s", "skipped"}}.

    ``only`` restricts the run to those stages (their upstream stages must be complete, else RuntimeError, or
    with ``stop_at_missing`` the run stops there); ``force`` reruns stages even when complete (and, through
    the keys, everything after them). ``before_stage(stage)`` is called before a stage runs (not when it is
    skipped). Each stage gets one line on stderr: what it does and, if it ran here before, its last wall time.
    """
    unknown = [s for s in (*(only or ()), *force) if s not in STAGES]
    if unknown:
        raise UnknownChoiceError("stage", unknown[0], STAGES)
    run_dir = os.fspath(run_dir)
    os.makedirs(run_dir, exist_ok=True)
    pin_cpu_kernels(config.cpu_kernels)
    set_threads(config.threads)
    manifest = _manifest(config, run_dir)
    fns = stage_fns()
    ids: dict[str, str] = {}
    results: dict[str, dict[str, Any]] = {}
    for stage in STAGES:
        marker = read_marker(run_dir, stage)
        missing = [u for u in UPSTREAM[stage] if u not in ids]
        wanted = only is None or stage in only
        if missing and (not wanted or stop_at_missing):
            if wanted:
                break
            continue
        if missing:  # only happens with ``only``: an upstream stage was not run and is not complete
            raise RuntimeError(f"stage {stage} needs {missing} complete in {run_dir}; run them first")
        key = stage_key(config, stage, [ids[u] for u in UPSTREAM[stage]])
        current = marker is not None and marker["key"] == key and stage not in force
        if not wanted:
            if current:
                ids[stage] = marker["run_id"]
            continue
        what = describe_stage(config, stage, results.get("split", {}).get("outputs", {})) if not current else ""
        result = run_stage(run_dir, stage, key, functools.partial(fns[stage], config, run_dir), manifest,
                           label=f"{_step(stage)} {stage}", what=what, done=marker if current else None,
                           before=None if before_stage is None else functools.partial(before_stage, stage),
                           record={"config": jsonable(asdict(getattr(config, stage)))})
        ids[stage] = result.pop("run_id")
        results[stage] = result
    write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    return results


def run_stage(run_dir: str, name: str, key: str, fn: Callable[[], Any], manifest: dict[str, Any], *, label: str,
              what: str, done: dict[str, Any] | None = None, before: Callable[[], None] | None = None,
              record: dict[str, Any] | None = None) -> dict[str, Any]:
    """One stage of a run directory, the way every stage runner runs one (the chain's, ``r2v rl``'s): skipped when
    ``done`` (its ``stage.json``, read by the caller and found current: same key); otherwise ``before()``, its
    directory prepared for ``key`` (:func:`prepare_stage_dir`: partial outputs of the same key kept to resume),
    ``fn()`` run, ``stage.json`` written (``record`` added: e.g. the stage's config) and the manifest's entry
    updated. One line on stderr before and after, prefixed ``label``; ``what`` says what the stage does. Returns
    ``{"dir", "outputs", "wall_s", "skipped", "run_id"}``."""
    sdir = os.path.join(run_dir, name)
    if done is not None:
        manifest["stages"][name] = {"status": "skipped", "wall_s": done["wall_s"], "run_id": done["run_id"]}
        say(f"{label}: done before ({duration(done['wall_s'])}), skipped")
        return {"dir": sdir, "outputs": done["outputs"], "wall_s": done["wall_s"], "skipped": True,
                "run_id": done["run_id"]}
    if before is not None:
        before()
    say(f"{label}: {what}{eta_text((manifest['stages'].get(name) or {}).get('wall_s'))}")
    prepare_stage_dir(sdir, key)
    t0 = time.perf_counter()
    outputs = jsonable(fn())
    wall = time.perf_counter() - t0
    say(f"{label}: finished in {duration(wall)}")
    marker = {"stage": name, "key": key, "run_id": uuid.uuid4().hex, **(record or {}), "outputs": outputs,
              "wall_s": wall, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json_atomic(os.path.join(sdir, MARKER), marker)
    manifest["stages"][name] = {"status": "ran", "wall_s": wall, "run_id": marker["run_id"]}
    write_json_atomic(os.path.join(run_dir, MANIFEST), manifest)
    return {"dir": sdir, "outputs": outputs, "wall_s": wall, "skipped": False, "run_id": marker["run_id"]}


def _step(stage: str) -> str:
    return f"stage {STAGES.index(stage) + 1}/{len(STAGES)}"


def prepare_stage_dir(sdir: str, key: str) -> None:
    """Keep partial outputs of an interrupted run with the same key (to resume); clear anything else."""
    started = os.path.join(sdir, ".started.json")
    if os.path.isdir(sdir):
        old = None
        if os.path.exists(started):
            with open(started) as fh:
                old = json.load(fh).get("key")
        if old != key:
            shutil.rmtree(sdir)
    os.makedirs(sdir, exist_ok=True)
    marker = os.path.join(sdir, MARKER)
    if os.path.exists(marker):
        os.remove(marker)  # forced rerun: not complete until it finishes again
    write_json_atomic(started, {"key": key})


def _manifest(config: ChainConfig, run_dir: str) -> dict[str, Any]:
    path = os.path.join(run_dir, MANIFEST)
    stages: dict[str, Any] = {}
    if os.path.exists(path):
        with open(path) as fh:
            stages = json.load(fh).get("stages", {})
    c = config
    manifest = {"config": jsonable(asdict(config)), "versions": package_versions(), "git_revision": git_revision(),
                "torch_cpu_capability": torch_cpu_capability(),  # the kernels this machine ran (pinned above)
                "seeds": {"split": 42, "teacher": c.teacher.seed, "replay": list(c.replay.seeds),
                          "bc": c.bc.seed, "preferences": c.preferences.seed, "dpo": c.dpo.seed,
                          "router_data_train": list(c.router_data.train_seeds),
                          "router_data_valid": list(c.router_data.valid_seeds), "router": c.router.seed},
                "layout": {k: os.path.relpath(v, run_dir) for k, v in stage_paths(run_dir).items()},
                "stages": stages, "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json_atomic(path, manifest)
    return manifest
