"""The evaluation grid: env ids x perturbation settings x seeds x tasks of a split, through the shared runner.

Each (env id, perturbation setting) cell is one runner directory ``<out>/runs/<env>/<setting>`` holding the
tasks x seeds grid, so a cell is resumable, parallel (``workers``, Ray backend) and byte-identical across
worker counts exactly as the runner guarantees. Episodes that could not be run (an agent's infrastructure
failure after its own retries, or an env/sandbox fault: a non-null ``error``) are rerun in up to
``episode_retries`` passes into ``<cell>/retry-<k>`` after an exponential pause; the last attempt of an
episode is the one that counts (:mod:`r2v_eval.cells`, the rule Table 1 uses too). ``<out>/manifest.json`` records the
agent, the grid, package versions and the git revision.

Example:
    >>> settings = parse_settings(["none", "flaky", "composite"])
    >>> [(s.name, s.spec) for s in settings]
    [('none', None), ('flaky', 'flaky'), ('composite', 'composite')]
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.runner import RunConfig
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.fileio import write_json_atomic
from r2v_envs.perturbations.composite import parse_perturbations
from r2v_envs.provenance import git_revision, package_versions
from r2v_envs.resolve import check_url, env_task_ids, is_url, served_info
from r2v_eval.cells import run_cell
from r2v_eval.results import env_slug

PERTURBATION_SETTINGS = ("none", "flaky", "partial", "distractor", "injection", "composite")
MANIFEST = "manifest.json"


@dataclass(frozen=True)
class Setting:
    """One perturbation setting of the grid: its name in the report and the ``perturbations=`` argument."""

    name: str
    spec: Any


def parse_settings(values: Sequence[str]) -> list[Setting]:
    """``none``, a perturbation type, ``composite``, or a YAML file holding a ``perturbations=`` mapping/list."""
    out: list[Setting] = []
    for v in values:
        if v in PERTURBATION_SETTINGS:
            out.append(Setting(v, None if v == "none" else v))
        elif v.endswith((".yaml", ".yml")) and os.path.isfile(v):
            import yaml

            with open(v) as fh:
                spec = yaml.safe_load(fh)
            if isinstance(spec, Mapping) and "perturbations" in spec:
                spec = spec["perturbations"]

            parse_perturbations(spec)  # a typed error now rather than in every worker
            out.append(Setting(Path(v).stem, spec))
        else:
            raise UnknownChoiceError("perturbation setting", v, [*PERTURBATION_SETTINGS, "<file>.yaml"])
    names = [s.name for s in out]
    if len(set(names)) != len(names):
        raise ValueError(f"perturbation settings must have distinct names, got {names}")
    return out


@dataclass
class GridConfig:
    """What the agent is evaluated on."""

    env_ids: tuple[str, ...] = ("R2V/TextWorld-v0",)
    """registered environment ids, module:Id, or URLs of r2v serve servers (one benchmark each)"""
    perturbations: tuple[str, ...] = ("none", "flaky", "partial", "distractor", "injection", "composite")
    """perturbation settings: none, a type, composite, or a yaml file"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """perturbation seeds z (pass^k is over these)"""
    split: str = "test"
    """task split"""
    tasks: int = 0
    """first N tasks of the split per env (0 = all)"""
    task_ids: tuple[str, ...] = ()
    """explicit task ids (with a single env id); overrides split/tasks"""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """extra gym.make arguments: one mapping for every env, or one per env id ({"R2V/TextWorld-v0": {...}})"""
    max_steps: int | None = None
    """episode step cap; None keeps each env's"""
    workers: int = 0
    """env worker processes"""
    envs_per_worker: int = 4
    """live episodes per worker (raised to cover the agent's concurrency)"""
    backend: str = "local"
    """runner backend: local | ray"""
    ray_address: str | None = None
    """Ray cluster address (backend ray)"""
    episode_retries: int = 1
    """passes that rerun episodes which could not be run (infrastructure or env faults)"""
    retry_backoff_s: float = 2.0
    """pause before the first retry pass; doubles each pass"""
    shard_episodes: int = 64
    """episodes per shard file"""
    progress: bool = True
    """progress bars (stderr)"""

    def __post_init__(self) -> None:
        self.env_ids, self.perturbations = tuple(self.env_ids), tuple(self.perturbations)
        self.seeds, self.task_ids = tuple(int(s) for s in self.seeds), tuple(self.task_ids)
        if not self.env_ids or not self.perturbations or not self.seeds:
            raise ValueError("env_ids, perturbations and seeds must not be empty")
        if self.task_ids and len(self.env_ids) != 1:
            raise ValueError("task_ids name the tasks of one benchmark: give a single env id")
        if self.tasks < 0 or self.episode_retries < 0:
            raise ValueError("tasks and episode_retries must be >= 0")

    def kwargs_for(self, env_id: str) -> dict[str, Any]:
        if any("/" in k for k in self.env_kwargs):  # keyed by env id
            return dict(self.env_kwargs.get(env_id, {}))
        return dict(self.env_kwargs)


def cell_dir(out_dir: str | os.PathLike, env_id: str, setting: str) -> Path:
    return Path(out_dir) / "runs" / env_slug(env_id) / setting


def cell_env(env: str) -> str:
    """The env name of ``env``'s cells: the id itself, or for the URL of ``r2v serve`` the id the server serves
    (``/r2v/info``), so a served env's cells are named as the same env's cells in process (and a server launched per
    perturbation setting, evaluated into one ``--out``, fills one env's row of the report)."""
    return str(served_info(env)["env_id"]) if is_url(env) else env


def check_cells(grid: GridConfig, settings: Sequence[Setting]) -> dict[str, str]:
    """Before any episode runs: each served env builds every setting asked of it (else a typed
    :class:`~r2v_envs.errors.ServedEnvMismatchError`), and no two ``env_ids`` share cells. Returns env -> cell env."""
    names = {e: cell_env(e) for e in grid.env_ids}
    for e in grid.env_ids:
        if is_url(e):
            for s in settings:  # the server's /r2v/info against each setting; no session is opened
                check_url(e, seed=0, max_episode_steps=grid.max_steps, **_cell_kwargs(grid, e, s))
    if len(set(names.values())) != len(names):
        raise ValueError(f"two --envs serve the same env, so their cells would collide: {names}; evaluate each "
                         "into its own --out")
    return names


def _cell_kwargs(grid: GridConfig, env_id: str, setting: Setting) -> dict[str, Any]:
    return {**grid.kwargs_for(env_id), "perturbations": setting.spec}


def resolve_tasks(grid: GridConfig, env_id: str) -> list[str]:
    """The tasks evaluated on ``env_id``: ``task_ids``, else the first ``tasks`` of the split."""
    if grid.task_ids:
        return list(grid.task_ids)
    ids = env_task_ids(env_id, grid.split, **grid.kwargs_for(env_id))
    return ids[:grid.tasks] if grid.tasks else ids


def _run_config(grid: GridConfig, env_id: str, setting: Setting, out: Path, tasks: Sequence[str],
                seeds: Sequence[int], concurrency: int) -> RunConfig:
    per_worker = max(grid.envs_per_worker, -(-concurrency // max(grid.workers, 1)))
    return RunConfig(env_id, str(out), task_ids=tuple(tasks), seeds=tuple(seeds), split=grid.split,
                     env_kwargs=_cell_kwargs(grid, env_id, setting),
                     max_steps=grid.max_steps, workers=grid.workers, envs_per_worker=per_worker,
                     backend=grid.backend, ray_address=grid.ray_address, shard_episodes=grid.shard_episodes,
                     progress=grid.progress)


def run_grid(policy: Any, name: str, grid: GridConfig, out_dir: str | os.PathLike,
             agent_record: Mapping[str, Any] | None = None, concurrency: int = 1) -> dict[str, Any]:
    """Run ``policy`` over every cell of ``grid`` into ``out_dir`` (resumable); returns per-cell run summaries."""

    out = Path(out_dir)
    settings = parse_settings(grid.perturbations)
    names = check_cells(grid, settings)
    out.mkdir(parents=True, exist_ok=True)
    _write_manifest(out, name, grid, agent_record or {}, names)
    summaries: dict[str, Any] = {}
    cells = [(e, s) for e in grid.env_ids for s in settings]
    tasks_of = {e: resolve_tasks(grid, e) for e in grid.env_ids}
    for i, (env_id, setting) in enumerate(cells):
        tasks = tasks_of[env_id]
        cdir = cell_dir(out, names[env_id], setting.name)
        if grid.progress:
            print(f"[{i + 1}/{len(cells)}] {env_id} / {setting.name}: {len(tasks)} tasks x {len(grid.seeds)} seeds",
                  file=sys.stderr)
        s, reruns = run_cell(policy, name, _run_config(grid, env_id, setting, cdir, tasks, grid.seeds, concurrency),
                             grid.episode_retries, grid.retry_backoff_s)
        summaries[f"{names[env_id]}/{setting.name}"] = {**asdict(s), "episode_reruns": reruns}
    return summaries


def _write_manifest(out: Path, name: str, grid: GridConfig, agent_record: Mapping[str, Any],
                    envs: Mapping[str, str]) -> None:
    """Record the agent and the grid; refuse to resume a directory that holds another agent's results."""

    path = out / MANIFEST
    old = json.loads(path.read_text()) if path.exists() else None
    if old is not None and old.get("agent", {}).get("name") != name:
        raise ValueError(f"{out} holds an evaluation of {old['agent'].get('name')!r}, not {name!r}: use a new --out")

    record = {"agent": {"name": name, **agent_record}, "grid": json.loads(json.dumps(asdict(grid), default=str)),
              "envs": dict(envs),  # each --envs entry -> the env its cells are named by (a URL: the served id)
              "versions": {"r2v": r2v_envs.__version__, **package_versions()}, "git_revision": git_revision(),
              "created": (old or {}).get("created", time.strftime("%Y-%m-%dT%H:%M:%S")),
              "updated": time.strftime("%Y-%m-%dT%H:%M:%S")}
    write_json_atomic(path, record)
