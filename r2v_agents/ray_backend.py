"""The runner on Ray (optional ``ray`` extra): env workers as Ray actors spread over a cluster.

Same API, same shards: ``run(policy, RunConfig(..., backend="ray", workers=N))`` runs the grid with ``N`` env
actors (``num_cpus=1`` each, placed by Ray on any node) instead of local worker processes, and writes through the
runner's own journal and :class:`~r2v_agents.shards.ShardWriter`, so a Ray run's files are byte-identical to a
local run's for the same grid and seeds (each episode (task_id, z) runs on ``gym.make(env_id, seed=z)`` reset
with ``options={"task_id", "episode_index": 0}``, whatever actor runs it).

Two modes, as in the local backend:

* ``policy_in_workers=False`` (an SLM batching over all envs): the policy stays in the driver and steps every
  env actor in lock step (:func:`r2v_agents.episodes.drive` with :class:`RayHost`s). For inference on GPU
  nodes wrap the policy in :class:`RayPolicy` (a vLLM engine per GPU actor) or give the SLM an
  :class:`~r2v_agents.samplers.openai_sampler.OpenAISampler` pointed at a ``vllm serve`` endpoint.
* ``policy_in_workers=True`` (cheap/API policies): each actor gets a copy of the policy (``ray.put`` once)
  and runs chunks of ``envs_per_worker`` whole episodes; the driver hands out chunks.

Back-pressure: an actor never holds more than ``envs_per_worker`` live episodes (lock-step mode: one command
batch in flight per actor, the next waits for the policy; chunk mode: at most :data:`CHUNKS_IN_FLIGHT` chunks
queued per actor), so a slow policy stalls the envs instead of piling up observations.

Fault tolerance: when an actor dies (node lost, OOM, ``ray.kill``), the episodes it was running are dropped
(nothing of them was journaled: an episode reaches the journal only when finished) and put back at the head of
the queue, and a fresh actor replaces the dead one (at most ``max(3, workers)`` replacements per run). Rerun
episodes start from ``reset``, so the shards are the same as if nothing had happened.

Example (not run here: it starts Ray; see tests/agents/test_ray_backend.py):
    >>> cfg = RunConfig("R2V/Scripted-v0", "runs/x", workers=4, backend="ray")  # doctest: +SKIP
    >>> run(OracleTeacher(), cfg).worker_restarts  # doctest: +SKIP
    0
"""

from __future__ import annotations

import atexit
import os
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.episodes import Episode, HostLost, LocalHost, RunConfig, RunContext, drive
from r2v_agents.policy import BatchPolicy, Decision, as_policy
from r2v_agents.workers import EnvSlots, WorkerPool
from r2v_envs.errors import BackendUnavailableError

CHUNKS_IN_FLIGHT = 2
"""Chunks queued per actor in ``policy_in_workers`` mode: one running, one ready, so the actor never idles."""


def _ray():
    try:
        import ray
    except ImportError as e:
        raise BackendUnavailableError("ray", "pip install 'ray[default]' (the r2v 'ray' extra)") from e
    return ray


def ensure_ray(address: str | None = None) -> Any:
    """Connect to Ray once: ``address`` (or ``$RAY_ADDRESS``) names a cluster; with neither, a local
    instance starts. An already initialised Ray (e.g. ``ray.init(num_cpus=2)`` in a test) is used as is."""
    ray = _ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    return ray


def _package_root() -> str:
    return os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _actor_options() -> dict[str, Any]:
    # Actors import r2v from the driver's checkout where it exists (a shared file system, or one machine);
    # elsewhere the installed r2v is used (a path that does not exist is ignored by Python).
    path = os.pathsep.join(p for p in (_package_root(), os.environ.get("PYTHONPATH", "")) if p)
    return {"num_cpus": 1, "max_restarts": 0, "runtime_env": {"env_vars": {"PYTHONPATH": path,
                                                                          "OMP_NUM_THREADS": "1"}}}


class EnvActor:
    """The body of an env actor (wrapped by ``ray.remote`` at run time, so this module imports without Ray)."""

    def __init__(self, env_id: str, env_kwargs: Mapping[str, Any], max_steps: int | None,
                 imports: tuple[str, ...], wrappers: tuple[str, ...]):
        import importlib

        for module in imports:
            importlib.import_module(module)
        self.slots = EnvSlots(env_id, env_kwargs, max_steps, wrappers)

    def handle(self, cmds: list[tuple]) -> list[tuple]:
        return self.slots.handle(cmds)

    def cpu_seconds(self) -> float:
        return time.process_time()

    def run_chunk(self, policy: Any, run: RunContext,
                  jobs: Sequence[tuple[int, str, int]]) -> list[tuple[int, dict[str, Any]]]:
        """Run whole episodes ``(index, task_id, z)`` with this actor's copy of the policy (batched over the
        chunk, like a local worker's slots); returns ``(index, record)`` per episode."""
        import sys

        if "torch" in sys.modules:
            sys.modules["torch"].set_num_threads(1)
        todo, out = deque(jobs), []

        def next_episode():
            if not todo:
                return None
            return Episode.start(*todo.popleft())

        drive([LocalHost(self.slots)], policy, run, next_episode, lambda rec, i: out.append((i, rec)))
        return out


class RayHost:
    """A runner host (``send``/``recv`` of command batches, as :class:`~r2v_agents.workers.ProcessHost`) whose
    env slots live in a Ray actor."""

    def __init__(self, cfg: RunConfig):
        ray = _ray()
        self.cfg = cfg
        self.actor = ray.remote(EnvActor).options(**_actor_options()).remote(
            cfg.env_id, cfg.env_kwargs, cfg.max_steps, cfg.imports, cfg.wrappers)
        self.ref = None

    def send(self, cmds: list[tuple]) -> None:
        self.ref = self.actor.handle.remote(cmds)

    def recv(self) -> list[tuple]:
        ref, self.ref = self.ref, None
        return _ray().get(ref)

    def cpu_seconds(self) -> float:
        return float(_ray().get(self.actor.cpu_seconds.remote()))

    def close(self) -> None:
        _ray().kill(self.actor)


def _wait_ready(hosts: Sequence[RayHost], busy: set[int]) -> list[int]:
    """The busy hosts whose replies are in (a dead actor's reply is "in" too: its ``recv`` raises)."""
    ray = _ray()
    refs = {hosts[h].ref: h for h in busy}
    ray.wait(list(refs), num_returns=1)
    ready, _ = ray.wait(list(refs), num_returns=len(refs), timeout=0)
    return sorted(refs[r] for r in ready)


class _LockstepHost(RayHost):
    def recv(self) -> list[tuple]:
        ray = _ray()
        try:
            return super().recv()
        except ray.exceptions.RayActorError as e:
            raise HostLost(str(e).splitlines()[0] if str(e) else "env actor died") from e


def run_ray(policy: BatchPolicy, run: RunContext, todo: list[tuple[str, int]], queue: deque,
            next_episode: Callable[[], Any],
            on_finish: Callable[[dict[str, Any], int], None]) -> tuple[tuple[float, ...], int]:
    """Run the episodes whose indices (into ``todo``) are in ``queue``; called by :func:`r2v_agents.runner.run`
    (``next_episode`` pops the queue's head). Returns (CPU seconds of each actor, actor replacements)."""
    cfg = run.cfg
    ensure_ray(cfg.ray_address)
    n = min(cfg.workers, -(-len(queue) // cfg.envs_per_worker))
    key = _ray().get_runtime_context().get_job_id() + WorkerPool.key(cfg)
    warm = _alive(_WARM.pop(key, []))  # actors kept from an earlier run with the same setting (keep_workers)
    close_warm_actors()  # warm actors of another setting would hold the CPUs this run's actors need
    hosts: list[RayHost] = warm[:n] + [_LockstepHost(cfg) for _ in range(n - len(warm[:n]))]
    for h in warm[n:]:
        h.close()
    budget, restarts = [max(3, cfg.workers)], [0]
    clean = False
    try:
        cpu0 = {id(h): h.cpu_seconds() for h in hosts}  # also waits until every actor is up

        def on_lost(h: int, episodes: Sequence[Any]) -> None:
            queue.extendleft(sorted((e.index for e in episodes), reverse=True))  # rerun first, in grid order
            _replace(hosts, h, cfg, budget)
            restarts[0] += 1

        if cfg.policy_in_workers:
            restarts[0] = _run_chunks(hosts, policy, run, todo, queue, on_finish, budget)
        else:
            drive(hosts, policy, run, next_episode, on_finish, wait=_wait_ready, on_lost=on_lost)
        cpu = tuple(h.cpu_seconds() - cpu0.get(id(h), 0.0) for h in hosts)  # a replacement counts from 0
        clean = True
    finally:
        if clean and cfg.keep_workers and _ray().is_initialized():
            _WARM[key] = hosts
        else:  # after an error an actor may still owe a reply: never reuse it
            for h in hosts:
                h.close()
    return cpu, restarts[0]


_WARM: dict[str, list[RayHost]] = {}


def _alive(hosts: list[RayHost]) -> list[RayHost]:
    ray, out = _ray(), []
    for h in hosts:
        try:
            ray.get(h.actor.cpu_seconds.remote(), timeout=30)
            out.append(h)
        except Exception:  # noqa: BLE001 - died or unreachable since the last run: start a fresh one
            h.close()
    return out


def close_warm_actors() -> None:
    """Kill the env actors kept warm between runs (``keep_workers``); also done at interpreter exit."""
    ray = _ray()
    for hosts in _WARM.values():
        for h in hosts:
            if ray.is_initialized():
                h.close()
    _WARM.clear()


atexit.register(lambda: _WARM and close_warm_actors())


def _replace(hosts: list[RayHost], h: int, cfg: RunConfig, budget: list[int]) -> None:
    if budget[0] <= 0:
        raise RuntimeError("env actors keep dying (replacement budget spent); see the Ray logs "
                           "(/tmp/ray/session_latest/logs) for the cause")
    budget[0] -= 1
    _ray().kill(hosts[h].actor)
    hosts[h] = _LockstepHost(cfg)


def _run_chunks(hosts, policy, run: RunContext, todo, queue, on_finish, budget) -> int:
    ray, cfg = _ray(), run.cfg
    try:
        policy_ref = ray.put(policy)
    except Exception as e:  # noqa: BLE001 - lambdas, open clients, ...
        raise ValueError(f"policy_in_workers needs a picklable policy; {run.policy_name} is not ({e})") from e
    inflight: dict[Any, tuple[int, list[int]]] = {}
    restarts = 0

    def submit(h: int) -> None:
        chunk = [queue.popleft() for _ in range(min(cfg.envs_per_worker, len(queue)))]
        if chunk:
            jobs = [(i, *todo[i]) for i in chunk]
            ref = hosts[h].actor.run_chunk.remote(policy_ref, run, jobs)
            inflight[ref] = (h, chunk)

    for h in range(len(hosts)):
        for _ in range(CHUNKS_IN_FLIGHT):
            submit(h)
    while inflight:
        ready, _ = ray.wait(list(inflight), num_returns=1)
        h, chunk = inflight.pop(ready[0])
        try:
            results = ray.get(ready[0])
        except ray.exceptions.RayActorError:  # the actor's other chunks are lost too: rerun them all
            lost = [chunk] + [inflight.pop(r)[1] for r in [r for r, (hh, _) in inflight.items() if hh == h]]
            queue.extendleft(sorted((i for c in lost for i in c), reverse=True))
            _replace(hosts, h, cfg, budget)
            restarts += 1
            for _ in range(CHUNKS_IN_FLIGHT):
                submit(h)
            continue
        for index, record in results:
            on_finish(record, index)
        submit(h)
    return restarts


class PolicyActor:
    """The body of a policy actor: builds its policy with ``factory()`` on its node (e.g. a vLLM engine on a
    GPU) and answers ``act_batch``/``end_episodes``."""

    def __init__(self, factory: Callable[[], Any]):
        self.policy = as_policy(factory())

    def describe(self) -> tuple[str, bool]:
        return str(getattr(self.policy, "name", type(self.policy).__name__)), bool(self.policy.sees_oracle)

    def act_batch(self, contexts, infos) -> list[Decision]:
        return self.policy.act_batch(contexts, infos)

    def end_episodes(self, episode_ids) -> None:
        self.policy.end_episodes(episode_ids)


class RayPolicy(BatchPolicy):
    """A policy served by ``replicas`` Ray actors (``num_gpus`` each): ``act_batch`` splits the batch over the
    replicas and gathers the decisions in order. ``factory`` must be picklable (a module-level function or a
    ``functools.partial``), e.g. ``partial(make_vllm_slm, "runs/bc/model")`` building an
    :class:`~r2v_agents.slm.SLMPolicy` over a :class:`~r2v_agents.samplers.vllm_sampler.VLLMSampler`.
    Stateless policies only across replicas (a per-episode state would be split): use ``replicas=1`` else."""

    def __init__(self, factory: Callable[[], Any], replicas: int = 1, num_gpus: float = 0.0,
                 num_cpus: float = 1.0, address: str | None = None):
        if replicas < 1:
            raise ValueError("replicas must be >= 1")
        ray = ensure_ray(address)
        opts = {**_actor_options(), "num_cpus": num_cpus, "num_gpus": num_gpus}
        self.actors = [ray.remote(PolicyActor).options(**opts).remote(factory) for _ in range(replicas)]
        self.name, self.sees_oracle = ray.get(self.actors[0].describe.remote())

    def act_batch(self, contexts, infos):
        ray = _ray()
        n = len(self.actors)
        size = -(-len(contexts) // n) if contexts else 0
        refs = [a.act_batch.remote(list(contexts[i * size:(i + 1) * size]), list(infos[i * size:(i + 1) * size]))
                for i, a in enumerate(self.actors) if i * size < len(contexts)]
        return [d for part in ray.get(refs) for d in part]

    def end_episodes(self, episode_ids):
        _ray().get([a.end_episodes.remote(list(episode_ids)) for a in self.actors])

    def close(self) -> None:
        for a in self.actors:
            _ray().kill(a)
