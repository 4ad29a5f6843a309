"""Counterfactual step labels y_cf (beyond the paper): does one teacher action at step t rescue the episode?

Eq. 7 labels every step of a failed SLM rollout 1, although most of them could not have been saved by one teacher
call. For sampled steps t of logged SLM-only rollouts this module replays the episode's prefix (the logged SLM
actions: the envs are deterministic per (task, z) and the perturbations draw from (z, episode, step) alone), plays
the teacher's action at t, continues with the same SLM, and records whether the outcome flips:

    y_cf(t) = 1[the logged rollout failed and the counterfactual one succeeded].

Successful rollouts need no rescue: all their steps get y_cf = 0 without a rerun, and so does a step whose logged
action already was the teacher's (``expert_action`` of the step row, the oracle teacher's choice): nothing would
change. The SLM's draws are a function of the context (the sampler seeds each prompt's stream by (seed, prompt),
``samplers.transformers_sampler``), so the continuation is what a routed run escalating only step t would play.

Cost bound: at most ``steps_per_rollout`` counterfactual episodes per failed rollout, drawn uniformly (a seeded
generator per episode) among its steps whose action differs from the teacher's. Every episode runs through the
rollout runner (:func:`r2v_agents.runner.run`; one runner directory per (slot, z), resumable, with a bar), and
``y_cf.parquet`` (episode_id, t, y_cf, sampled) plus ``summary.json`` (episodes and steps run, wall time) land in
the output directory.

The counterfactual oracle (:class:`StepOracleRouter`) escalates, for each failed test rollout, only the earliest
sampled step whose single teacher action rescued it: the escalation a perfect step router would need, which the
paper's oracle (every step of a failed rollout) overstates.

Example:
    >>> pick_steps("t@1", ["a", "b", "c", "d"], ["a", "x", "c", "y"], budget=5, seed=0)
    [1, 3]
"""

from __future__ import annotations

import json
import os
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from r2v_agents.context import Context
from r2v_agents.policy import BatchPolicy, Decision, visible_info
from r2v_agents.routers import Router
from r2v_agents.runner import RUN_FILE, RunConfig, run
from r2v_agents.shards import load_rows
from r2v_envs.fileio import atomic_write, write_json_atomic

LABELS_FILE, SUMMARY_FILE = "y_cf.parquet", "summary.json"


@dataclass
class CounterfactualConfig:
    """How many counterfactual episodes to spend per failed logged rollout."""

    steps_per_rollout: int = 3
    """budget: sampled steps t (one counterfactual episode each) per failed rollout"""
    seed: int = 0
    """seed of the step sampling"""

    def __post_init__(self) -> None:
        if self.steps_per_rollout < 1:
            raise ValueError(f"steps_per_rollout must be >= 1; got {self.steps_per_rollout}")


def pick_steps(episode_id: str, actions: Sequence[str], expert: Sequence[str | None], budget: int, seed: int
               ) -> list[int]:
    """Up to ``budget`` steps (sorted) of one rollout whose action differs from the teacher's, drawn uniformly with
    a generator seeded by (seed, episode_id), so the draw does not depend on which other rollouts exist."""
    informative = [t for t, (a, e) in enumerate(zip(actions, expert)) if e is not None and a != e]
    if len(informative) <= budget:
        return informative
    rng = np.random.default_rng([seed, zlib.crc32(episode_id.encode())])
    return sorted(int(t) for t in rng.choice(informative, size=budget, replace=False))


class CounterfactualPolicy(BatchPolicy):
    """Replays a logged prefix, plays the teacher's action at step t, then the SLM: ``plan[episode_id] =
    (logged actions, t)``. Sources: ``replay`` for the prefix, the teacher's own source at t, the SLM's after."""

    name = "counterfactual"

    def __init__(self, slm: Any, teacher: Any, plan: Mapping[str, tuple[Sequence[str], int]]):
        self.slm, self.teacher, self.plan = slm, teacher, dict(plan)
        self.sees_oracle = bool(getattr(teacher, "sees_oracle", False))

    def act_batch(self, contexts: Sequence[Context], infos: Sequence[Mapping[str, Any]]) -> list[Decision]:
        out: list[Decision | None] = [None] * len(contexts)
        ask, slm = [], []
        for i, ctx in enumerate(contexts):
            actions, t = self.plan[str(ctx.extra["episode_id"])]
            s = len(ctx.history)
            if s < t:
                out[i] = Decision(action=actions[s], source="replay")
            elif s == t:
                ask.append(i)
            else:
                slm.append(i)
        if ask:
            replies = self.teacher.query_batch([contexts[i] for i in ask], [infos[i] for i in ask])
            for i, reply in zip(ask, replies):
                # a teacher that cannot answer leaves the logged action: the episode then cannot flip
                out[i] = reply or Decision(action=self.plan[str(contexts[i].extra["episode_id"])][0][len(
                    contexts[i].history)], source="replay", meta={"teacher_failed": True})
        if slm:
            for i, d in zip(slm, self.slm.act_batch([contexts[i] for i in slm], [visible_info(infos[i]) for i in slm])):
                out[i] = d
        return out  # type: ignore[return-value]

    def end_episodes(self, episode_ids):
        for part in (self.slm, self.teacher):
            if hasattr(part, "end_episodes"):
                part.end_episodes(episode_ids)


def _rollouts(rollout_dir: str | os.PathLike) -> tuple[dict[str, dict[str, Any]], dict[str, list[dict[str, Any]]]]:
    episodes = {e["episode_id"]: e for e in load_rows(rollout_dir, "episodes",
                                                      ["episode_id", "task_id", "z", "success", "steps"])}
    steps: dict[str, list[dict[str, Any]]] = {}
    for r in load_rows(rollout_dir, "steps", ["episode_id", "t", "action", "expert_action"]):
        steps.setdefault(r["episode_id"], []).append(r)
    for rows in steps.values():
        rows.sort(key=lambda r: r["t"])
    return episodes, steps


def logged_setting(rollout_dir: str | os.PathLike) -> dict[str, Any]:
    """The env setting and split a runner directory was made with (its ``run.json``)."""
    with open(Path(rollout_dir) / RUN_FILE) as fh:
        meta = json.load(fh)
    s = meta["setting"]
    return {"env_id": s["env_id"], "env_kwargs": s["env_kwargs"], "max_steps": s["max_steps"],
            "wrappers": tuple(s.get("wrappers") or ()), "split": meta["config"].get("split", "test")}


def counterfactual_labels(rollout_dir: str | os.PathLike, out_dir: str | os.PathLike, slm: Any, teacher: Any,
                          cfg: CounterfactualConfig | None = None, workers: int = 0, progress: bool = True
                          ) -> dict[str, Any]:
    """Label sampled steps of the SLM-only rollouts in ``rollout_dir`` with y_cf (see the module docstring).

    The counterfactual episodes run on the logged rollouts' own env setting (``run.json``), ``workers`` env worker
    processes. Returns (and writes) the summary; resumable: finished runner episodes are skipped."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    cfg = cfg or CounterfactualConfig()
    setting = logged_setting(rollout_dir)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    episodes, steps = _rollouts(rollout_dir)
    plans: dict[tuple[int, int], dict[str, tuple[list[str], int]]] = {}  # (slot, z) -> episode_id -> plan
    sampled: dict[str, list[int]] = {}
    for eid, e in episodes.items():
        if e["success"] or eid not in steps:
            continue
        rows = steps[eid]
        actions = [r["action"] for r in rows]
        sampled[eid] = pick_steps(eid, actions, [r["expert_action"] for r in rows], cfg.steps_per_rollout, cfg.seed)
        for slot, t in enumerate(sampled[eid]):
            plans.setdefault((slot, int(e["z"])), {})[eid] = (actions, t)
    policy_runs, n_eps, n_steps = {}, 0, 0
    for (slot, z), plan in sorted(plans.items()):
        d = out / "runs" / f"slot{slot}_z{z}"
        rc = RunConfig(setting["env_id"], os.fspath(d), task_ids=tuple(sorted(episodes[e]["task_id"] for e in plan)),
                       seeds=(z,), split=setting["split"], env_kwargs=setting["env_kwargs"],
                       max_steps=setting["max_steps"], wrappers=setting["wrappers"], workers=workers, progress=progress)
        summary = run(CounterfactualPolicy(slm, teacher, plan), rc, policy_name="counterfactual")
        n_eps, n_steps = n_eps + summary.episodes, n_steps + summary.steps
        for e in load_rows(d, "episodes", ["episode_id", "success", "steps"]):
            policy_runs[(e["episode_id"], plan[e["episode_id"]][1])] = e
    rows = []
    for eid, e in episodes.items():
        for t in range(int(e["steps"])):
            if e["success"]:
                rows.append((eid, t, 0, False, None))
                continue
            cf = policy_runs.get((eid, t))
            rows.append((eid, t, int(bool(cf and cf["success"])), cf is not None,
                         None if cf is None else int(cf["steps"])))
    table = pa.table({"episode_id": [r[0] for r in rows], "t": [r[1] for r in rows], "y_cf": [r[2] for r in rows],
                      "sampled": [r[3] for r in rows], "cf_steps": [r[4] for r in rows]})
    atomic_write(out / LABELS_FILE, lambda f: pq.write_table(table, f))
    failed = [e for e in episodes.values() if not e["success"]]
    rescued = {eid for (eid, _), e in policy_runs.items() if e["success"]}
    summary = {"rollouts": len(episodes), "failed_rollouts": len(failed), "steps_per_rollout": cfg.steps_per_rollout,
               "sampled_steps": sum(len(v) for v in sampled.values()), "episodes_run": len(policy_runs),
               "episodes_run_now": n_eps, "env_steps_run_now": n_steps,
               "rescuing_steps": int(sum(r[2] for r in rows)), "rescued_rollouts": len(rescued),
               "wall_s": time.perf_counter() - t0}
    write_json_atomic(out / SUMMARY_FILE, summary)
    return summary


def load_labels(out_dir: str | os.PathLike) -> dict[tuple[str, int], tuple[int, bool]]:
    """(episode_id, t) -> (y_cf, sampled) from a :func:`counterfactual_labels` directory."""
    import pyarrow.parquet as pq

    t = pq.read_table(os.fspath(Path(out_dir) / LABELS_FILE)).to_pydict()
    return {(e, int(s)): (int(y), bool(m)) for e, s, y, m in zip(t["episode_id"], t["t"], t["y_cf"], t["sampled"])}


class StepOracleRouter(Router):
    """Counterfactual oracle (hindsight, not deployable): p = 1 only at the earliest sampled step of each failed
    (task, z) whose single teacher action rescued the episode (``y_cf = 1``)."""

    name = "cf-oracle"
    hindsight = True

    def __init__(self, rescue: Mapping[tuple[str, int], int], threshold: float = 0.5):
        super().__init__(threshold)
        self.rescue = {(str(k[0]), int(k[1])): int(t) for k, t in rescue.items()}

    @classmethod
    def from_labels(cls, rollout_dir: str | os.PathLike, labels_dir: str | os.PathLike) -> StepOracleRouter:
        episodes = {e["episode_id"]: e for e in load_rows(rollout_dir, "episodes", ["episode_id", "task_id", "z"])}
        first: dict[tuple[str, int], int] = {}
        for (eid, t), (y, _) in sorted(load_labels(labels_dir).items(), key=lambda kv: kv[0][1]):
            key = (episodes[eid]["task_id"], int(episodes[eid]["z"]))
            if y and key not in first:
                first[key] = t
        return cls(first)

    def predict(self, features, contexts=None):
        if contexts is None:
            raise ValueError("the counterfactual oracle needs the contexts (task id, z and step)")
        return np.array([float(self.rescue.get((c.task_id, int(c.extra.get("z", -1)))) == len(c.history))
                         for c in contexts])
