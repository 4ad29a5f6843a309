"""The shared rollout runner: any policy, any registered env and wrapper stack, a grid of tasks x seeds.

Design. The policy lives in the main process; environments live in ``workers`` subprocesses (one thread
each, see :mod:`r2v_agents.workers`), each hosting ``envs_per_worker`` env slots (``workers=0`` steps them
in-process). The main loop waits for whichever workers have results, calls ``policy.act_batch`` once on
every live context of those workers (an SLM batches across envs; a cheap policy never stalls the other
worker) and sends the actions back. With ``policy_in_workers=True`` each worker instead gets a copy of a
picklable policy and runs whole episodes, with no round trip per step. Each episode (task_id, z) runs on
``open_env(env_id, seed=z, ...)`` (:mod:`r2v_envs.resolve`: a registered id, ``module:Id``, or the URL of an
``r2v serve`` server, whose sessions reset with ``seed=z``) reset with
``options={"task_id": task_id, "episode_index": 0}``: its
perturbation stream depends on (z, task) only, not on the worker or slot that runs it, so logs are identical
across worker counts. Envs are reused per worker for the same z (reset reloads the task), and workers are
kept warm between runs with the same env setting.

Logging (see :mod:`r2v_agents.shards`): per step the context (goal, observation, action history, admissible
actions, perturbation events), the decision (action, source, candidates with log-probs/entropies/verifier
scores, features f_t, router probability, cost), reward and terminated/truncated; per episode success,
steps, teacher calls and cost; and router rows (f_t, y_t = 1[episode failed], Eq. 7) for steps with
features. Finished episodes are journaled at once and written to shards in grid order, so a finished run's
files are byte-identical across reruns and worker counts, and a rerun skips finished (task, z) episodes.

Example:
    >>> import tempfile, r2v_envs
    >>> from r2v_agents.teachers import OracleTeacher
    >>> out = tempfile.mkdtemp()
    >>> cfg = RunConfig("R2V/Scripted-v0", out, task_ids=("scripted-0", "scripted-1"), seeds=(0, 1),
    ...                 env_kwargs={"perturbations": None}, progress=False)
    >>> summary = run(OracleTeacher(), cfg)
    >>> summary.episodes, summary.success_rate
    (4, 1.0)
    >>> run(OracleTeacher(), cfg).episodes   # resumable: nothing left to do
    0
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import r2v_envs
from r2v_agents.episodes import (  # noqa: F401 - RunConfig, *_SOURCE(S), episode_key: the runner's API
    INFRA_SOURCE,
    TEACHER_SOURCES,
    Episode,
    LocalHost,
    RunConfig,
    RunContext,
    drive,
    episode_key,
)
from r2v_agents.policy import as_policy
from r2v_agents.ray_backend import run_ray
from r2v_agents.shards import ShardWriter
from r2v_agents.workers import EnvSlots, ProcessHost, WorkerPool
from r2v_envs.errors import ServedEnvMismatchError, UnknownChoiceError
from r2v_envs.fileio import write_json_atomic
from r2v_envs.resolve import is_url, open_env

RUN_FILE = "run.json"
"""A run directory's manifest: the env setting and the RunConfig it was made with (resuming checks it)."""


@dataclass
class RunSummary:
    out_dir: str
    episodes: int
    skipped: int
    successes: int
    steps: int
    teacher_calls: int
    cost: float
    wall_s: float
    worker_cpu_s: tuple[float, ...] = ()
    """CPU seconds of each env worker process (empty when ``workers=0``)."""
    worker_restarts: int = 0
    """Env workers that died and were replaced, their episodes rerun (``backend="ray"``)."""

    @property
    def success_rate(self) -> float:
        return self.successes / self.episodes if self.episodes else float("nan")


def _resolve_tasks(cfg: RunConfig) -> tuple[list[str], str, int | None]:
    # the env as the episodes will get it (an unknown id, or a server that does not build it, fails here, before
    # any worker starts)
    env = open_env(cfg.env_id, seed=0, **cfg.env_kwargs)
    try:
        base = env.unwrapped
        if is_url(cfg.env_id) and not base.served.get("oracle"):
            raise ServedEnvMismatchError(
                f"{cfg.env_id} serves no episode outcome (info['won']), which the runner scores episodes by: "
                f"launch the server with --oracle (agents still see only the agent-visible keys)")
        if cfg.task_ids is None:
            tasks = list(base.task_ids(cfg.split))
        else:
            tasks = list(cfg.task_ids)
            known = set(base.task_ids("all"))
            for t in tasks:
                if t not in known:
                    raise UnknownChoiceError(f"{getattr(base, 'benchmark', cfg.env_id)} task", t, sorted(known))
        benchmark = str(getattr(base, "benchmark", cfg.env_id))
        # a served env's cap is the server's (RemoteEnv.max_episode_steps), an env in process its spec's
        cap = env.spec.max_episode_steps if env.spec else getattr(base, "max_episode_steps", None)
        max_steps = cfg.max_steps if cfg.max_steps is not None else cap
    finally:
        env.close()
    return tasks, benchmark, max_steps


def run(policy: Any, cfg: RunConfig, policy_name: str | None = None) -> RunSummary:
    """Run ``policy`` over ``cfg``'s grid, skipping episodes already in ``cfg.out_dir``."""
    start = time.perf_counter()
    policy = as_policy(policy)
    name = policy_name or getattr(policy, "name", type(policy).__name__)
    tasks, benchmark, max_steps = _resolve_tasks(cfg)
    ctx = RunContext(cfg, name, benchmark, max_steps)
    os.makedirs(cfg.out_dir, exist_ok=True)
    _check_manifest(cfg, name, benchmark, max_steps)
    writer = ShardWriter(cfg.out_dir)
    grid = [(t, int(z)) for t in tasks for z in cfg.seeds]
    todo = [g for g in grid if episode_key(*g) not in writer.finished]
    done: dict[int, dict[str, Any]] = {}
    for i, g in enumerate(todo):
        if episode_key(*g) in writer.pending:
            done[i] = writer.pending[episode_key(*g)]
    queue = deque(i for i in range(len(todo)) if i not in done)
    stats = {"episodes": 0, "successes": 0, "steps": 0, "teacher_calls": 0, "cost": 0.0}
    bar = None
    if cfg.progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=len(grid), initial=len(grid) - len(queue), desc=f"{name} on {cfg.env_id}", unit="ep")
    flushed = [0]

    def next_episode() -> Episode | None:
        if not queue:
            return None
        index = queue.popleft()
        return Episode.start(index, *todo[index])

    def on_finish(record: dict[str, Any], index: int) -> None:
        writer.add_pending(record)  # journaled at once: a crash loses only episodes still in flight
        done[index] = record
        _count(stats, record)
        if bar is not None:
            bar.update(1)
        flushed[0] = _flush(writer, done, flushed[0], len(todo), cfg.shard_episodes)

    hosts: list[Any] = []
    worker_cpu: list[float] = []
    restarts = 0
    clean_exit = False
    try:
        if queue and cfg.backend == "ray":
            worker_cpu, restarts = run_ray(policy, ctx, todo, queue, next_episode, on_finish)
        elif queue and cfg.workers == 0:
            local = LocalHost(EnvSlots(cfg.env_id, cfg.env_kwargs, cfg.max_steps, cfg.wrappers))
            try:
                drive([local], policy, ctx, next_episode, on_finish)
            finally:  # its envs close with the run (a ScienceWorld env's JVM goes back to the process's idle ones)
                local.close()
        elif queue:
            hosts = WorkerPool.take(cfg, min(cfg.workers, -(-len(queue) // cfg.envs_per_worker)))
            cpu0 = [h.cpu_seconds() for h in hosts]
            if cfg.policy_in_workers:
                _run_policy_in_workers(hosts, policy, ctx, next_episode, on_finish)
            else:
                drive(hosts, policy, ctx, next_episode, on_finish)
            worker_cpu = [h.cpu_seconds() - c for h, c in zip(hosts, cpu0)]
        _flush(writer, done, flushed[0], len(todo), cfg.shard_episodes, final=True)
        clean_exit = True
    finally:
        if hosts and clean_exit and cfg.keep_workers:
            WorkerPool.give_back(cfg, hosts)
        else:  # after an error a worker may still owe us a reply: never reuse it
            for host in hosts:
                host.close()
        if bar is not None:
            bar.close()
    return RunSummary(cfg.out_dir, stats["episodes"], len(grid) - len(todo), stats["successes"], stats["steps"],
                      stats["teacher_calls"], stats["cost"], time.perf_counter() - start, tuple(worker_cpu), restarts)


def _run_policy_in_workers(hosts: list[ProcessHost], policy, run: RunContext, next_episode, on_finish) -> None:
    """``policy_in_workers``: each worker drives whole episodes with its own copy of the policy and asks
    for the next episode when a slot frees; the main process only hands out episodes and writes shards."""
    import pickle
    from multiprocessing.connection import wait

    try:
        pickle.dumps(policy)
    except Exception as e:  # noqa: BLE001 - lambdas, open clients, ...
        raise ValueError(f"policy_in_workers needs a picklable policy; {run.policy_name} is not ({e}). Use "
                         "policy_in_workers=False to keep the policy in the main process") from e
    conns = {}
    for h in hosts:
        h.send(("drive", policy, run))
        conns[h.conn] = h
    while conns:
        for conn in wait(list(conns)):
            msg = conns[conn].recv()
            if msg[0] == "next":
                ep = next_episode()
                conn.send(None if ep is None else (ep.index, ep.task_id, ep.z))
            elif msg[0] == "done":
                on_finish(msg[2], msg[1])
            else:  # "end"
                del conns[conn]


def _count(stats: dict[str, Any], record: Mapping[str, Any]) -> None:
    e = record["episode"]
    stats["episodes"] += 1
    stats["successes"] += int(e["success"])
    stats["steps"] += e["steps"]
    stats["teacher_calls"] += e["teacher_calls"]
    stats["cost"] += e["cost"]


def _flush(writer: ShardWriter, done: dict[int, Any], flushed: int, total: int, size: int,
           final: bool = False) -> int:
    """Write shards of ``size`` consecutive (grid-order) finished episodes; the rest at the end."""
    while True:
        n = 0
        while flushed + n < total and (flushed + n) in done and n < size:
            n += 1
        if n == 0 or (n < size and not final):
            return flushed
        writer.write_shard([done.pop(i) for i in range(flushed, flushed + n)])
        flushed += n


def _check_manifest(cfg: RunConfig, policy_name: str, benchmark: str, max_steps: int | None) -> None:
    """Record what this run directory holds; refuse to resume it with a different env setting."""
    path = os.path.join(cfg.out_dir, RUN_FILE)
    setting = {"env_id": cfg.env_id, "env_kwargs": json.loads(json.dumps(cfg.env_kwargs, default=str)),
               "wrappers": list(cfg.wrappers),
               "max_steps": max_steps, "benchmark": benchmark, "policy": policy_name}
    if os.path.exists(path):
        with open(path) as fh:
            old = json.load(fh)["setting"]
        diff = [k for k in setting if old.get(k) != setting[k]]
        if diff:
            raise ValueError(f"{cfg.out_dir} holds a run with a different {', '.join(diff)} "
                             f"({', '.join(f'{k}={old.get(k)!r}' for k in diff)}): use a new out_dir")
        return
    write_json_atomic(path, {"setting": setting, "config": {k: v for k, v in asdict(cfg).items()
                                                             if k not in ("env_kwargs",)},
                             "versions": {"r2v": r2v_envs.__version__}})

