"""The shared rollout runner: any policy, any registered env and wrapper stack, a grid of tasks x seeds.

Design. The policy lives in the main process; environments live in ``workers`` subprocesses (one thread
each, see :mod:`r2v_agents.workers`), each hosting ``envs_per_worker`` env slots (``workers=0`` steps them
in-process). The main loop waits for whichever workers have results, calls ``policy.act_batch`` once on
every live context of those workers (an SLM batches across envs; a cheap policy never stalls the other
worker) and sends the actions back. With ``policy_in_workers=True`` each worker instead gets a copy of a
picklable policy and runs whole episodes, with no round trip per step. Each episode (task_id, z) runs on
``gym.make(env_id, seed=z, ...)`` reset with ``options={"task_id": task_id, "episode_index": 0}``: its
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
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from r2v_agents.context import Context
from r2v_agents.policy import Decision, as_policy, visible_info
from r2v_agents.shards import ShardWriter, write_json_atomic
from r2v_agents.workers import EnvSlots, HostLost, LocalHost, ProcessHost, WorkerPool, wait_ready

TEACHER_SOURCES = ("teacher", "oracle")
INFRA_SOURCE = "infra"
"""``Decision.source`` of a policy that could not produce an action for reasons that are not the agent's (API
down, rate limit, timeout after its retries): the runner ends that episode unscored, with its ``error`` set to
``"infra:<kind>: <message>"`` from ``meta["infra_kind"]``/``meta["infra_error"]``, instead of stepping the env."""


@dataclass
class RunConfig:
    """What to run and where to write it."""

    env_id: str
    """A registered Gymnasium id, e.g. "R2V/TextWorld-v0"."""
    out_dir: str
    """Run directory for shards (created; a rerun resumes)."""
    task_ids: tuple[str, ...] | None = None
    """Tasks to run; None runs every task of ``split``."""
    seeds: tuple[int, ...] = (0,)
    """Perturbation seeds z; the grid is tasks x seeds."""
    split: str = "test"
    """Split whose tasks are run when ``task_ids`` is None."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments of ``gym.make`` (e.g. ``perturbations``)."""
    max_steps: int | None = None
    """Episode step cap (Gymnasium TimeLimit); None keeps the env's registered cap."""
    workers: int = 0
    """Env worker processes; 0 steps the envs in the main process."""
    envs_per_worker: int = 4
    """Env slots per worker (in-process: slots in total)."""
    keep_workers: bool = True
    """Keep the env workers alive for the next run with the same env setting (see :class:`WorkerPool`)."""
    policy_in_workers: bool = False
    """Give each worker its own copy of the (picklable, cheap) policy and run whole episodes there: no
    round trip per step, so the best throughput for oracle/scripted/API agents. Keep False for an SLM that
    should batch across all envs in one process."""
    shard_episodes: int = 64
    """Episodes per shard file."""
    wrappers: tuple[str, ...] = ()
    """Extra ``gym.Wrapper``s as import paths ``"module:Class"`` (each called with the env), applied in order
    on top of the registered stack (which ``env_kwargs["perturbations"]`` configures)."""
    imports: tuple[str, ...] = ()
    """Modules the workers import before ``gym.make`` (to register third-party envs)."""
    progress: bool = True
    """Show a tqdm progress bar."""
    backend: str = "local"
    """Where env workers run: "local" (processes on this machine, the default) or "ray" (Ray actors over a
    cluster, optional ``ray`` extra; see :mod:`r2v_agents.ray_backend`). Same shards either way."""
    ray_address: str | None = None
    """Ray cluster to join with ``backend="ray"`` (None: $RAY_ADDRESS, else a local Ray instance)."""

    def __post_init__(self):
        if self.workers < 0 or self.envs_per_worker < 1 or self.shard_episodes < 1:
            raise ValueError("workers must be >= 0, envs_per_worker and shard_episodes >= 1")
        if self.backend not in ("local", "ray"):
            from r2v_envs.errors import UnknownChoiceError
            raise UnknownChoiceError("runner backend", self.backend, ("local", "ray"))
        if self.backend == "ray" and self.workers < 1:
            raise ValueError("backend='ray' needs workers >= 1 (env actors)")
        if not self.seeds:
            raise ValueError("seeds must not be empty")


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


# ---------------------------------------------------------------------------------------------- main side
@dataclass
class _Episode:
    index: int
    episode_id: str
    task_id: str
    z: int
    ctx: Context | None = None
    info: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    decision: Decision | None = None


def _candidate_row(c) -> dict[str, Any]:
    return {"action": c.action, "logprob": c.logprob,
            "token_logprobs": None if c.token_logprobs is None else [float(x) for x in c.token_logprobs],
            "token_entropies": None if c.token_entropies is None else [float(x) for x in c.token_entropies],
            "verifier_score": c.verifier_score}


def _resolve_tasks(cfg: RunConfig) -> tuple[list[str], str, int | None]:
    import gymnasium as gym

    import r2v_envs  # noqa: F401

    gym.spec(cfg.env_id)  # a clear error for an unknown id, before any worker starts
    env = gym.make(cfg.env_id, seed=0, **cfg.env_kwargs)
    try:
        base = env.unwrapped
        if cfg.task_ids is None:
            if hasattr(base, "split"):
                base.split = cfg.split
            tasks = list(base.split_task_ids())
        else:
            tasks = list(cfg.task_ids)
            known = set(base._task_ids())
            for t in tasks:
                if t not in known:
                    from r2v_envs.errors import UnknownChoiceError
                    raise UnknownChoiceError(f"{getattr(base, 'benchmark', cfg.env_id)} task", t, sorted(known))
        benchmark = str(getattr(base, "benchmark", cfg.env_id))
        max_steps = cfg.max_steps if cfg.max_steps is not None else (env.spec.max_episode_steps if env.spec else None)
    finally:
        env.close()
    return tasks, benchmark, max_steps


def episode_key(task_id: str, z: int) -> str:
    return f"{task_id}@{z}"


def run(policy: Any, cfg: RunConfig, policy_name: str | None = None) -> RunSummary:
    """Run ``policy`` over ``cfg``'s grid, skipping episodes already in ``cfg.out_dir``."""
    start = time.perf_counter()
    policy = as_policy(policy)
    name = policy_name or getattr(policy, "name", type(policy).__name__)
    tasks, benchmark, max_steps = _resolve_tasks(cfg)
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

    def next_episode() -> _Episode | None:
        return _start(todo, queue.popleft()) if queue else None

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
            from r2v_agents.ray_backend import run_ray
            worker_cpu, restarts = run_ray(policy, cfg, name, benchmark, max_steps, todo, queue, next_episode,
                                           on_finish)
        elif queue and cfg.workers == 0:
            host = LocalHost(EnvSlots(cfg.env_id, cfg.env_kwargs, cfg.max_steps, cfg.wrappers))
            _drive([host], policy, next_episode, on_finish, cfg, name, benchmark, max_steps)
        elif queue:
            hosts = WorkerPool.take(cfg, min(cfg.workers, -(-len(queue) // cfg.envs_per_worker)))
            cpu0 = [h.cpu_seconds() for h in hosts]
            if cfg.policy_in_workers:
                _run_policy_in_workers(hosts, policy, cfg, name, benchmark, max_steps, next_episode, on_finish)
            else:
                _drive(hosts, policy, next_episode, on_finish, cfg, name, benchmark, max_steps)
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


def _drive(hosts, policy, next_episode, on_finish, cfg: RunConfig, name: str, benchmark: str,
           max_steps: int | None, wait=wait_ready, on_lost=None) -> None:
    """Step every slot of ``hosts`` until ``next_episode`` runs dry, batching policy calls over ready hosts.

    ``wait(hosts, busy)`` returns the busy hosts with replies. A host whose ``recv`` raises
    :class:`~r2v_agents.workers.HostLost` has its live episodes dropped (never journaled) and handed to
    ``on_lost(h, episodes)``, which must requeue them and replace ``hosts[h]``; without ``on_lost`` it raises."""
    live: dict[tuple[int, int], _Episode] = {}
    per_host = cfg.envs_per_worker
    outbox: dict[int, list[tuple]] = {h: [] for h in range(len(hosts))}

    def fill(h: int) -> None:
        for slot in range(per_host):
            if (ep := next_episode()) is not None:
                live[(h, slot)] = ep
                outbox[h].append(("reset", slot, ep.task_id, ep.z))

    def end(h: int, slot: int, ep: _Episode, error: str | None) -> None:
        policy.end_episodes([ep.episode_id])
        on_finish(_finish(ep, cfg, benchmark, name, error), ep.index)
        if (nxt := next_episode()) is not None:
            live[(h, slot)] = nxt
            outbox[h].append(("reset", slot, nxt.task_id, nxt.z))
        else:
            del live[(h, slot)]

    for h in range(len(hosts)):
        fill(h)
    busy = set()
    for h, cmds in outbox.items():
        if cmds:
            hosts[h].send(cmds)
            busy.add(h)
    while busy:
        ready = wait(hosts, busy)
        to_act: list[tuple[int, int]] = []
        outbox = {h: [] for h in ready}
        for h in ready:
            busy.discard(h)
            try:
                results = hosts[h].recv()
            except HostLost:
                if on_lost is None:
                    raise
                lost = [live.pop((h, s)) for s in range(per_host) if (h, s) in live]
                policy.end_episodes([e.episode_id for e in lost])
                on_lost(h, lost)
                fill(h)
                continue
            for slot, obs, reward, term, trunc, info, error in results:
                ep = live[(h, slot)]
                if not _observe(ep, obs, reward, term, trunc, info, error, max_steps, benchmark):
                    to_act.append((h, slot))
                    continue
                end(h, slot, ep, error)
        if to_act:
            eps = [live[k] for k in to_act]
            infos = [e.info if policy.sees_oracle else visible_info(e.info) for e in eps]
            decisions = policy.act_batch([e.ctx for e in eps], infos)
            if len(decisions) != len(eps):
                raise RuntimeError(f"{name}.act_batch returned {len(decisions)} decisions for {len(eps)} contexts")
            for (h, slot), ep, d in zip(to_act, eps, decisions):
                if d.source == INFRA_SOURCE:  # no action to play: end the episode unscored (see INFRA_SOURCE)
                    end(h, slot, ep, f"infra:{d.meta.get('infra_kind', 'error')}: {d.meta.get('infra_error', '')}")
                    continue
                ep.decision = d
                outbox[h].append(("step", slot, d.action))
        for h, cmds in outbox.items():
            if cmds:
                hosts[h].send(cmds)
                busy.add(h)


def _run_policy_in_workers(hosts: list[ProcessHost], policy, cfg: RunConfig, name: str, benchmark: str,
                           max_steps: int | None, next_episode, on_finish) -> None:
    """``policy_in_workers``: each worker drives whole episodes with its own copy of the policy and asks
    for the next episode when a slot frees; the main process only hands out episodes and writes shards."""
    import pickle
    from multiprocessing.connection import wait

    try:
        pickle.dumps(policy)
    except Exception as e:  # noqa: BLE001 - lambdas, open clients, ...
        raise ValueError(f"policy_in_workers needs a picklable policy; {name} is not ({e}). Use "
                         "policy_in_workers=False to keep the policy in the main process") from e
    conns = {}
    for h in hosts:
        h.send(("drive", policy, cfg, name, benchmark, max_steps))
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


def _start(todo, index: int) -> _Episode:
    task_id, z = todo[index]
    return _Episode(index, episode_key(task_id, z), task_id, z)


def _observe(ep: _Episode, obs, reward, term, trunc, info, error, max_steps, benchmark) -> bool:
    """Fold an env result into the episode; True when the episode is over."""
    if ep.ctx is None:  # reset result
        if error is None:
            ctx = Context.start(str(info.get("goal", "")), obs, info, max_steps=max_steps)
            ep.ctx = replace(ctx, benchmark=str(info.get("benchmark", benchmark)), task_id=ep.task_id,
                             extra={"episode_id": ep.episode_id, "z": ep.z})
            ep.info = info
        return error is not None
    d, ctx, prev_info = ep.decision, ep.ctx, ep.info
    ep.steps.append({
        "t": len(ep.steps), "max_steps": max_steps, "goal": ctx.goal, "observation": ctx.observation,
        "history_actions": ctx.actions, "admissible_actions": None if ctx.admissible_actions is None
        else list(ctx.admissible_actions), "perturbations": json.dumps(prev_info.get("perturbations", [])),
        "action": d.action, "source": d.source, "candidates": [_candidate_row(c) for c in d.candidates],
        "verifier_score": d.verifier_score,
        "features": None if d.features is None else [float(x) for x in d.features],
        "router_prob": None if d.router_prob is None else float(d.router_prob), "cost": float(d.cost),
        "reward": reward, "terminated": term, "truncated": trunc,
        "expert_action": prev_info.get("expert_action"), "meta": json.dumps(d.meta, sort_keys=True, default=str)})
    if error is not None:
        return True
    ep.ctx, ep.info = ctx.advance(d.action, obs, reward, info), info
    return term or trunc


def _finish(ep: _Episode, cfg: RunConfig, benchmark: str, policy_name: str, error: str | None) -> dict[str, Any]:
    key = {"episode_id": ep.episode_id, "env_id": cfg.env_id, "benchmark": benchmark,
           "split": str(ep.info.get("split", cfg.split)), "task_id": ep.task_id, "z": ep.z}
    success = bool(ep.info.get("won", False)) and error is None
    last = ep.steps[-1] if ep.steps else {}
    episode = {**key, "policy": policy_name, "success": success, "steps": len(ep.steps),
               "return": float(sum(s["reward"] for s in ep.steps)),
               "teacher_calls": sum(s["source"] in TEACHER_SOURCES for s in ep.steps),
               "cost": float(sum(s["cost"] for s in ep.steps)), "terminated": bool(last.get("terminated", False)),
               "truncated": bool(last.get("truncated", False)), "error": error}
    y = int(not success)  # Eq. 7: every context of a failed episode is labelled 1
    router = [{**key, "t": s["t"], "features": s["features"], "y": y, "source": s["source"],
               "router_prob": s["router_prob"]} for s in ep.steps if s["features"] is not None]
    steps = [{**key, **s} for s in ep.steps]
    return {"episode": episode, "steps": steps, "router": router}


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
    path = os.path.join(cfg.out_dir, "run.json")
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
    import r2v_envs

    write_json_atomic(path, {"setting": setting, "config": {k: v for k, v in asdict(cfg).items()
                                                             if k not in ("env_kwargs",)},
                             "versions": {"r2v": r2v_envs.__version__}})

