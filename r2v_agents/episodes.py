"""One episode's life in the rollout runner, shared by every backend (in-process, worker processes, Ray).

:class:`RunConfig` says what to run; a :class:`RunContext` (frozen) carries what every episode of one run shares
(config, policy name, benchmark, step cap). :func:`drive` steps the env slots of some hosts until the episode
queue runs dry, batching the policy's calls over ready hosts; :func:`observe` folds an env result into an
:class:`Episode`, and :func:`finish` turns a finished episode into its record (episode row, step rows, router
rows with Eq. 7's labels). A host is anything with ``send(cmds)`` / ``recv()`` / ``close()`` over env slots:
:class:`LocalHost` in this process, ``workers.ProcessHost`` in a worker process, ``ray_backend.RayHost`` in a
Ray actor. The runner, the workers (``policy_in_workers``) and the Ray actors all call :func:`drive`, so an
episode's log is identical whichever backend ran it.

Example:
    >>> episode_key("scripted-0", 3)
    'scripted-0@3'
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from multiprocessing.connection import wait as wait_connections
from typing import Any, Protocol

from r2v_agents.context import Context
from r2v_agents.policy import BatchPolicy, Decision, visible_info
from r2v_agents.shards import token_columns
from r2v_envs.errors import UnknownChoiceError

TEACHER_SOURCES = ("teacher", "oracle")
REPLY_KEYS = ("grounding", "reply")
"""``Decision.meta`` keys written as step columns of their own: how a model agent's reply became the action
(:data:`r2v_agents.grounding.GROUNDING_KINDS`, ``"likelihood"``, or None) and the reply's text."""
INFRA_SOURCE = "infra"
VERDICT_KEYS = ("verdict", "outcome", "test_results", "judge", "network_errors")
"""Keys of an env's last ``info`` kept in the episode row's ``verdict`` column (JSON): HumanEval+'s EvalPlus
``verdict``, Terminal-Bench's judge ``outcome``, per-test results and judge record."""
"""``Decision.source`` of a policy that could not produce an action for reasons that are not the agent's (API
down, rate limit, timeout after its retries): the episode ends unscored, with its ``error`` set to
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
    lockstep: bool = True
    """Wait for every busy env host before each policy batch. Which contexts share a batch then depends on the
    run alone, not on worker timing; that matters because a batched forward pass's floats depend on the batch's
    make-up (shapes pick the kernels' blocking, padding lengths differ), so acting on whichever hosts happen to
    be ready let router features drift by ~1e-6 between reruns and moved calibrated thresholds. With it a rerun
    on the same machine writes identical bytes. False acts on ready hosts as they come: more throughput when env
    step times vary a lot (sandboxed tests), at the price of run-to-run float noise."""

    def __post_init__(self):
        if self.workers < 0 or self.envs_per_worker < 1 or self.shard_episodes < 1:
            raise ValueError("workers must be >= 0, envs_per_worker and shard_episodes >= 1")
        if self.backend not in ("local", "ray"):
            raise UnknownChoiceError("runner backend", self.backend, ("local", "ray"))
        if self.backend == "ray" and self.workers < 1:
            raise ValueError("backend='ray' needs workers >= 1 (env actors)")
        if not self.seeds:
            raise ValueError("seeds must not be empty")


@dataclass(frozen=True)
class RunContext:
    """What every episode of one run shares: the config, the policy's name, the benchmark and the step cap."""

    cfg: RunConfig
    policy_name: str
    benchmark: str
    max_steps: int | None


@dataclass
class Episode:
    """One (task, z) episode in flight: its grid index, context, last info, logged steps and pending decision."""

    index: int
    episode_id: str
    task_id: str
    z: int
    ctx: Context | None = None
    info: dict[str, Any] = field(default_factory=dict)
    steps: list[dict[str, Any]] = field(default_factory=list)
    decision: Decision | None = None

    @classmethod
    def start(cls, index: int, task_id: str, z: int) -> Episode:
        return cls(index, episode_key(task_id, z), task_id, z)


def episode_key(task_id: str, z: int) -> str:
    return f"{task_id}@{z}"


class Host(Protocol):
    def send(self, cmds: list[tuple]) -> None: ...
    def recv(self) -> list[tuple]: ...
    def close(self) -> None: ...


class HostLost(RuntimeError):
    """A host's worker is gone with its episodes (raised by a host's ``recv``; the Ray backend reruns them)."""


class LocalHost:
    """A host whose env slots (``workers.EnvSlots``) live in this process: a reply is ready at once."""

    def __init__(self, slots: Any):
        self.slots = slots
        self.results: list[tuple] | None = None

    def send(self, cmds):
        self.results = self.slots.handle(cmds)

    def recv(self):
        out, self.results = self.results, None
        return out

    def close(self):
        self.slots.close()


def wait_ready(hosts: Sequence[Host], busy: set[int]) -> list[int]:
    """The busy hosts with replies: in-process hosts at once, else whichever worker pipes are readable."""
    local = [h for h in busy if isinstance(hosts[h], LocalHost)]
    if local:
        return sorted(local)
    conns = {hosts[h].conn: h for h in busy}
    return sorted(conns[c] for c in wait_connections(list(conns)))


def wait_all(hosts: Sequence[Host], busy: set[int]) -> list[int]:
    """Every busy host, in index order: ``recv`` then blocks on each (``RunConfig.lockstep``)."""
    return sorted(busy)


def drive(hosts: Sequence[Host], policy: BatchPolicy, run: RunContext,
          next_episode: Callable[[], Episode | None], on_finish: Callable[[dict[str, Any], int], None],
          wait: Callable[[Sequence[Host], set[int]], list[int]] | None = None,
          on_lost: Callable[[int, list[Episode]], None] | None = None) -> None:
    """Step every slot of ``hosts`` until ``next_episode`` runs dry, batching policy calls over ready hosts.

    ``wait(hosts, busy)`` returns the busy hosts with replies (``RunConfig.lockstep`` waits for all of them). A host whose ``recv`` raises
    :class:`~r2v_agents.workers.HostLost` has its live episodes dropped (never journaled) and handed to
    ``on_lost(h, episodes)``, which must requeue them and replace ``hosts[h]``; without ``on_lost`` it raises."""
    if run.cfg.lockstep:
        wait = wait_all
    wait = wait or wait_ready
    live: dict[tuple[int, int], Episode] = {}
    per_host = run.cfg.envs_per_worker
    outbox: dict[int, list[tuple]] = {h: [] for h in range(len(hosts))}

    def fill(h: int) -> None:
        for slot in range(per_host):
            if (ep := next_episode()) is not None:
                live[(h, slot)] = ep
                outbox[h].append(("reset", slot, ep.task_id, ep.z))

    def end(h: int, slot: int, ep: Episode, error: str | None) -> None:
        policy.end_episodes([ep.episode_id])
        on_finish(finish(ep, run, error), ep.index)
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
                if not observe(ep, (obs, reward, term, trunc, info, error), run):
                    to_act.append((h, slot))
                    continue
                end(h, slot, ep, error)
        if to_act:
            eps = [live[k] for k in to_act]
            infos = [e.info if policy.sees_oracle else visible_info(e.info) for e in eps]
            decisions = policy.act_batch([e.ctx for e in eps], infos)
            if len(decisions) != len(eps):
                raise RuntimeError(f"{run.policy_name}.act_batch returned {len(decisions)} decisions for "
                                   f"{len(eps)} contexts")
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


def candidate_row(c) -> dict[str, Any]:
    return {"action": c.action, "logprob": c.logprob,
            "token_logprobs": None if c.token_logprobs is None else [float(x) for x in c.token_logprobs],
            "token_entropies": None if c.token_entropies is None else [float(x) for x in c.token_entropies],
            "verifier_score": c.verifier_score}


def observe(ep: Episode, result: tuple, run: RunContext) -> bool:
    """Fold an env result ``(obs, reward, terminated, truncated, info, error)`` into the episode; True when the
    episode is over."""
    obs, reward, term, trunc, info, error = result
    max_steps = run.max_steps
    if ep.ctx is None:  # reset result
        if error is None:
            ctx = Context.start(str(info.get("goal", "")), obs, info, max_steps=max_steps)
            ep.ctx = replace(ctx, benchmark=str(info.get("benchmark", run.benchmark)), task_id=ep.task_id,
                             extra={"episode_id": ep.episode_id, "z": ep.z})
            ep.info = info
        return error is not None
    d, ctx, prev_info = ep.decision, ep.ctx, ep.info
    ep.steps.append({
        "t": len(ep.steps), "max_steps": max_steps, "goal": ctx.goal, "observation": ctx.observation,
        "history_actions": ctx.actions, "admissible_actions": None if ctx.admissible_actions is None
        else list(ctx.admissible_actions), "perturbations": json.dumps(prev_info.get("perturbations", [])),
        "action": d.action, "source": d.source, "candidates": [candidate_row(c) for c in d.candidates],
        "verifier_score": d.verifier_score,
        "features": None if d.features is None else [float(x) for x in d.features],
        "router_prob": None if d.router_prob is None else float(d.router_prob), "cost": float(d.cost),
        "reward": reward, "terminated": term, "truncated": trunc,
        "expert_action": prev_info.get("expert_action"), "grounding": d.meta.get("grounding"),
        "reply": d.meta.get("reply"),
        "meta": json.dumps({k: v for k, v in d.meta.items() if k not in REPLY_KEYS}, sort_keys=True, default=str),
        **token_columns(getattr(d, "tokens", None))})
    if error is not None:
        return True
    ep.ctx, ep.info = ctx.advance(d.action, obs, reward, info), info
    return term or trunc


def _verdict(info: Mapping[str, Any]) -> str | None:
    """The :data:`VERDICT_KEYS` of an env's last info as JSON (None when it reports none).

    Example:
        >>> _verdict({"won": True, "outcome": "resolved"}), _verdict({"won": False})
        ('{"outcome": "resolved"}', None)
    """
    kept = {k: info[k] for k in VERDICT_KEYS if k in info}
    return json.dumps(kept, sort_keys=True, default=str) if kept else None


def finish(ep: Episode, run: RunContext, error: str | None) -> dict[str, Any]:
    """The episode's record: ``{"episode": row, "steps": rows, "router": rows}`` (Eq. 7 labels)."""
    key = {"episode_id": ep.episode_id, "env_id": run.cfg.env_id, "benchmark": run.benchmark,
           "split": str(ep.info.get("split", run.cfg.split)), "task_id": ep.task_id, "z": ep.z}
    success = bool(ep.info.get("won", False)) and error is None
    last = ep.steps[-1] if ep.steps else {}
    episode = {**key, "policy": run.policy_name, "success": success, "steps": len(ep.steps),
               "return": float(sum(s["reward"] for s in ep.steps)),
               "teacher_calls": sum(s["source"] in TEACHER_SOURCES for s in ep.steps),
               "cost": float(sum(s["cost"] for s in ep.steps)), "terminated": bool(last.get("terminated", False)),
               "truncated": bool(last.get("truncated", False)), "error": error,
               "final_observation": ep.ctx.observation if ep.ctx is not None and ep.steps else None,
               "verdict": _verdict(ep.info)}
    y = int(not success)  # Eq. 7: every context of a failed episode is labelled 1
    router = [{**key, "t": s["t"], "features": s["features"], "y": y, "source": s["source"],
               "router_prob": s["router_prob"]} for s in ep.steps if s["features"] is not None]
    steps = [{**key, **s} for s in ep.steps]
    return {"episode": episode, "steps": steps, "router": router}
