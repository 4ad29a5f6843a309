"""DRRN's training loop: rounds of episodes through the runner, then Q-learning updates from replay.

A round plays ``episodes_per_round`` episodes at once through :func:`r2v_agents.episodes.drive`, the runner's own
loop (env slots in this process or in its warm worker processes, the policy batched over every live episode), with
:class:`r2v_agents.drrn.DRRNPolicy` exploring by a softmax over Q. Episode ``i`` plays train task ``order[i]`` (the
tasks in seeded shuffled passes) under perturbation seed ``z_start + i``, so every training episode has its own noise
stream. Its transitions (:mod:`r2v_train.drrn.replay`) go to replay, then ``updates_per_step`` x its env steps
updates follow: Huber loss of Q(s, a) against r + gamma max_a' Q_target(s', a') over the next visible actions, the
target network copied every ``target_every`` updates (He et al., 2016; Hausknecht et al., 2020).

Everything a run needs to go on is one checkpoint file (networks, optimizer, replay with its generator, counters,
curve, torch's generator), replaced atomically every ``checkpoint_every`` rounds: a rerun after SIGKILL restarts from
it and, as exploration draws depend on (seed, episode, step) alone, plays and learns what the killed run would have.
``model.pt`` (the network ``drrn:RUN_DIR`` loads) is written with it.
"""

from __future__ import annotations

import dataclasses
import os
import random
import sys
import time
from typing import Any

import torch

import r2v_envs  # noqa: F401 - registers the envs
from r2v_agents.drrn import DRRN, MODEL_FILE, DRRNArch, DRRNPolicy, save_drrn
from r2v_agents.episodes import Episode, LocalHost, RunConfig, RunContext, drive
from r2v_agents.runner import run as run_episodes
from r2v_agents.shards import load_rows
from r2v_agents.workers import EnvSlots, WorkerPool
from r2v_envs.fileio import write_json_atomic
from r2v_eval.stats import bootstrap_episodes, difference_bootstrap, episode_metrics, mean_bootstrap
from r2v_train.drrn.config import DRRNConfig
from r2v_train.drrn.replay import Replay, td_batch, transitions
from r2v_train.rl.plot import CURVE_PNG, plot_curve
from r2v_train.runtime.cpu import set_threads

CHECKPOINT, CURVE_JSON, SUMMARY = "checkpoint.pt", "curve.json", "summary.json"


def train_tasks(cfg: DRRNConfig) -> tuple[list[str], str]:
    """The tasks trained on (``split`` filtered by ``task_filter``, first ``max_tasks``) and the benchmark name."""
    import gymnasium as gym

    env = gym.make(cfg.env_id, seed=0, **cfg.make_kwargs("none"))
    try:
        tasks = [t for t in env.unwrapped.task_ids(cfg.split) if cfg.task_filter in t]
        benchmark = str(getattr(env.unwrapped, "benchmark", cfg.env_id))
    finally:
        env.close()
    tasks = tasks[:cfg.max_tasks] if cfg.max_tasks else tasks
    if not tasks:
        raise ValueError(f"no {cfg.split} task of {cfg.env_id} matches task_filter {cfg.task_filter!r}")
    return tasks, benchmark


def episode_start(tasks: list[str], i: int, cfg: DRRNConfig) -> tuple[str, int]:
    """(task, z) of training episode ``i``: the tasks in shuffled passes (each once per pass), z counting up."""
    order = list(tasks)
    random.Random(f"{cfg.seed}:{i // len(tasks)}").shuffle(order)
    return order[i % len(tasks)], cfg.z_start + i


class DRRNTrainer:
    """One run directory's training (see the module doc): ``DRRNTrainer(cfg, run_dir).train()``."""

    def __init__(self, cfg: DRRNConfig, run_dir: str):
        self.cfg, self.run_dir = cfg, run_dir
        os.makedirs(run_dir, exist_ok=True)
        set_threads(cfg.threads)
        self.tasks, self.benchmark = train_tasks(cfg)
        torch.manual_seed(cfg.seed)
        arch = DRRNArch(buckets=cfg.buckets, embed=cfg.embed, hidden=cfg.hidden, encoder=cfg.encoder,
                        history=cfg.history)
        self.net, self.target = DRRN(arch), DRRN(arch)
        self.target.load_state_dict(self.net.state_dict())
        self.opt = torch.optim.Adam(self.net.parameters(), lr=cfg.learning_rate, foreach=True)
        self.replay = Replay(cfg.replay_size, cfg.priority_fraction, cfg.seed)
        self.state: dict[str, Any] = {"round": 0, "episodes": 0, "updates": 0, "env_steps": 0, "collect_s": 0.0,
                                      "update_s": 0.0, "eval_s": 0.0, "losses": []}
        self.curve: dict[str, Any] = {"train": {}, "eval": {}, "episodes": []}
        self._local: LocalHost | None = None
        self._resume()

    # ------------------------------------------------------------------------------------------- checkpoints
    def _resume(self) -> None:
        path = os.path.join(self.run_dir, CHECKPOINT)
        if not os.path.exists(path):
            return
        blob = torch.load(path, map_location="cpu", weights_only=False)
        old = blob["config"]
        diff = self.cfg.differing_fields(old)
        if diff:
            raise ValueError(f"{self.run_dir} holds a DRRN run with a different {', '.join(diff)} "
                             f"({', '.join(f'{k}={old.get(k)!r}' for k in diff)}): use a new run directory")
        self.net.load_state_dict(blob["net"])
        self.target.load_state_dict(blob["target"])
        self.opt.load_state_dict(blob["optim"])
        self.replay, self.state, self.curve = blob["replay"], blob["state"], blob["curve"]
        torch.set_rng_state(blob["torch_rng"])

    def _checkpoint(self) -> None:
        meta = {"config": self.cfg.learning_fields(), "episodes": self.state["episodes"], "tasks": self.tasks,
                "benchmark": self.benchmark}
        save_drrn(os.path.join(self.run_dir, MODEL_FILE), self.net, meta)
        tmp = os.path.join(self.run_dir, CHECKPOINT + ".tmp")
        torch.save({"config": self.cfg.learning_fields(), "net": self.net.state_dict(),
                    "target": self.target.state_dict(), "optim": self.opt.state_dict(), "replay": self.replay,
                    "state": self.state, "curve": self.curve, "torch_rng": torch.get_rng_state()}, tmp)
        os.replace(tmp, os.path.join(self.run_dir, CHECKPOINT))
        write_json_atomic(os.path.join(self.run_dir, CURVE_JSON), self.curve)

    # ------------------------------------------------------------------------------------------- collection
    def _run_config(self, n: int) -> RunConfig:
        per_worker = max(1, -(-n // max(self.cfg.workers, 1)))
        return RunConfig(self.cfg.env_id, "", seeds=(0,), split=self.cfg.split, env_kwargs=self.cfg.make_kwargs(),
                         max_steps=self.cfg.max_steps, workers=self.cfg.workers, envs_per_worker=per_worker,
                         progress=False)

    def collect(self, first: int, n: int) -> list[dict[str, Any]]:
        """Play training episodes ``first .. first + n - 1`` with the exploring policy; their records in order."""
        cfg = self._run_config(n)
        ctx = RunContext(cfg, "drrn", self.benchmark, self.cfg.max_steps)
        pending = [Episode.start(i, *episode_start(self.tasks, first + i, self.cfg)) for i in range(n)][::-1]
        records: dict[int, dict[str, Any]] = {}
        policy = DRRNPolicy(self.net, temperature=self.cfg.temperature, seed=self.cfg.seed)
        self.net.eval()
        next_episode = lambda: pending.pop() if pending else None  # noqa: E731
        on_finish = lambda record, index: records.__setitem__(index, record)  # noqa: E731
        if self.cfg.workers == 0:  # one in-process host whose env slots stay open between rounds
            self._local = self._local or LocalHost(EnvSlots(self.cfg.env_id, cfg.env_kwargs, self.cfg.max_steps))
            drive([self._local], policy, ctx, next_episode, on_finish)
        else:
            with WorkerPool.borrow(cfg, min(self.cfg.workers, n)) as hosts:
                drive(hosts, policy, ctx, next_episode, on_finish)
        return [records[i] for i in range(n)]

    # ------------------------------------------------------------------------------------------- learning
    def update(self) -> float:
        """One Q-learning step on a replay batch; returns the loss."""
        s, a, r, d, s2, a2 = td_batch(self.replay.sample(self.cfg.batch_size))
        self.net.train()
        q = self.net.score(self.net.encode(s, "state"), self.net.encode(a, "action"))
        with torch.no_grad():
            live = [i for i, done in enumerate(d) if not done and a2[i]]
            best = torch.zeros(len(s))
            if live:
                qs = self.target.q_values([s2[i] for i in live], [a2[i] for i in live])
                best[live] = torch.stack([x.max() for x in qs])
            y = torch.tensor(r) + self.cfg.gamma * best
        loss = torch.nn.functional.smooth_l1_loss(q, y)
        self.opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.cfg.grad_clip)
        self.opt.step()
        self.state["updates"] += 1
        if self.state["updates"] % self.cfg.target_every == 0:
            self.target.load_state_dict(self.net.state_dict())
        return float(loss.detach())

    def evaluate(self) -> dict[str, Any]:
        """The trained policy (the softmax at ``temperature``, as :func:`r2v_agents.drrn.trained_policy` acts) on the
        first ``eval_tasks`` tasks of ``eval_split`` that match ``task_filter`` (z = 0), through the runner."""
        cfg = self.cfg
        tasks, _ = train_tasks(dataclasses.replace(cfg, split=cfg.eval_split, max_tasks=cfg.eval_tasks))
        out = os.path.join(self.run_dir, "evals", f"episodes-{self.state['episodes']:06d}")
        policy = DRRNPolicy(self.net, temperature=cfg.temperature, seed=cfg.seed)
        run_episodes(policy, RunConfig(cfg.env_id, out, task_ids=tuple(tasks), seeds=(0,), split=cfg.eval_split,
                                       env_kwargs=cfg.make_kwargs(), max_steps=cfg.max_steps, workers=cfg.workers,
                                       progress=False), policy_name="drrn")
        rows = load_rows(out, "episodes")
        m = episode_metrics(rows)
        return {"sr": m["sr"], "sr_ci": m["sr_ci"], "episodes": m["episodes"],
                "mean_return": sum(r["return"] for r in rows) / len(rows)}

    # ------------------------------------------------------------------------------------------- the loop
    def train(self) -> dict[str, Any]:
        cfg, st = self.cfg, self.state
        try:
            while st["episodes"] < cfg.episodes:
                n = min(cfg.episodes_per_round, cfg.episodes - st["episodes"])
                t0 = time.perf_counter()
                records = self.collect(st["episodes"], n)
                t1 = time.perf_counter()
                steps = sum(r["episode"]["steps"] for r in records)
                for r in records:
                    self.replay.extend(transitions(r, cfg.terminal_penalty, cfg.reward_scale, cfg.history))
                    e = r["episode"]
                    self.curve["episodes"].append([st["episodes"], e["task_id"], e["z"], int(e["success"]),
                                                   e["return"], e["steps"]])
                    st["episodes"] += 1
                losses = [self.update() for _ in range(round(cfg.updates_per_step * steps))
                          if len(self.replay) >= cfg.learning_starts]
                t2 = time.perf_counter()
                st["round"] += 1
                st["env_steps"] += steps
                st["collect_s"] += t1 - t0
                st["update_s"] += t2 - t1
                mean_loss = sum(losses) / len(losses) if losses else None
                st["losses"].append(mean_loss)
                won = [r["episode"]["success"] for r in records]
                self.curve["train"][str(st["round"])] = {
                    "step": st["episodes"], "train_wall_s": st["collect_s"] + st["update_s"],
                    "success": sum(won) / len(won), "mean_return": sum(r["episode"]["return"] for r in records) / n,
                    "loss": mean_loss}
                last = st["round"] * cfg.episodes_per_round >= cfg.episodes
                if cfg.eval_every and (st["round"] % cfg.eval_every == 0 or last):
                    t3 = time.perf_counter()
                    self.curve["eval"][str(st["round"])] = {"step": st["episodes"], "train_wall_s":
                                                            st["collect_s"] + st["update_s"], **self.evaluate()}
                    st["eval_s"] += time.perf_counter() - t3
                if st["round"] % cfg.checkpoint_every == 0 or last:
                    self._checkpoint()
                if cfg.progress:
                    self._progress(mean_loss)
        finally:
            if self._local is not None:
                self._local.close()
                self._local = None
        return self.finish()

    def _progress(self, loss: float | None) -> None:
        st, eps = self.state, self.curve["episodes"]
        recent = eps[-max(1, len(eps) // 10):]
        print(f"drrn {self.cfg.perturbations} round {st['round']}: episodes {st['episodes']}/{self.cfg.episodes}, "
              f"won (last tenth) {sum(e[3] for e in recent) / len(recent):.2f}, loss "
              f"{'-' if loss is None else f'{loss:.4f}'}, replay {len(self.replay)}, "
              f"{st['env_steps'] / max(st['collect_s'], 1e-9):.0f} env steps/s, "
              f"{st['updates'] / max(st['update_s'], 1e-9):.0f} updates/s", file=sys.stderr, flush=True)

    def finish(self) -> dict[str, Any]:
        """summary.json (first against last tenth of training, throughput) and the curve PNG."""
        summary = learning_summary(self.curve["episodes"])
        st = self.state
        summary.update({"env_id": self.cfg.env_id, "perturbations": self.cfg.perturbations, "tasks": len(self.tasks),
                        "env_steps": st["env_steps"], "updates": st["updates"], "collect_s": round(st["collect_s"], 2),
                        "update_s": round(st["update_s"], 2), "eval_s": round(st["eval_s"], 2),
                        "env_steps_per_s": round(st["env_steps"] / max(st["collect_s"], 1e-9), 1),
                        "updates_per_s": round(st["updates"] / max(st["update_s"], 1e-9), 1),
                        "eval": self.curve["eval"].get(str(st["round"]))})
        summary["tenths"] = training_tenths(self.curve["episodes"])
        write_json_atomic(os.path.join(self.run_dir, SUMMARY), summary)
        plot_curve(self.curve, os.path.join(self.run_dir, CURVE_PNG),
                   title=f"DRRN on {self.cfg.env_id} ({self.cfg.perturbations})", step_label="training episodes",
                   eval_label=f"SR on {self.cfg.eval_split} tasks (evaluation)", tenths=summary["tenths"])
        return summary


def learning_summary(episodes: list[list[Any]]) -> dict[str, Any]:
    """Success of the first and the last tenth of the training episodes with 95% CIs, and their difference (also of
    the mean return: the score a game pays before its win).

    Example:
        >>> eps = [[i, "t", i, int(i >= 50), 0.0, 5] for i in range(100)]
        >>> s = learning_summary(eps)
        >>> s["first_tenth"]["sr"], s["last_tenth"]["sr"], s["rise"]["diff"]
        (0.0, 100.0, 100.0)
    """
    n = len(episodes)
    k = max(1, n // 10)
    first, last = [e[3] for e in episodes[:k]], [e[3] for e in episodes[-k:]]
    def tenth(won: list[int]) -> dict[str, Any]:
        m = bootstrap_episodes(won, [1] * len(won), [0] * len(won))
        return {key: m[key] for key in ("episodes", "sr", "sr_ci")}

    r_first, r_last = [e[4] for e in episodes[:k]], [e[4] for e in episodes[-k:]]
    return {"episodes": n, "first_tenth": {**tenth(first), "mean_return": sum(r_first) / k},
            "last_tenth": {**tenth(last), "mean_return": sum(r_last) / k}, "rise": difference_bootstrap(last, first),
            "return_rise": difference_bootstrap(r_last, r_first, percent=False)}


def training_tenths(episodes: list[list[Any]], parts: int = 10) -> list[dict[str, Any]]:
    """The training curve with CIs: success (%) and mean return of each tenth of the training episodes, each with
    its 95% bootstrap CI, at the tenth's middle episode (``step``). The grey dots of the PNG are single rounds of a
    few episodes; these are what a rise is read from.

    Example:
        >>> eps = [[i, "t", i, int(i >= 50), float(i >= 50), 5] for i in range(100)]
        >>> t = training_tenths(eps)
        >>> len(t), t[0]["step"], t[0]["sr"], t[-1]["sr"], t[-1]["mean_return"]
        (10, 5.0, 0.0, 100.0, 1.0)
    """
    n = len(episodes)
    out = []
    for j in range(min(parts, n)):
        part = episodes[j * n // parts:(j + 1) * n // parts] if n >= parts else episodes[j:j + 1]
        won, ret = mean_bootstrap([e[3] for e in part]), mean_bootstrap([e[4] for e in part])
        out.append({"step": (part[0][0] + part[-1][0] + 1) / 2, "episodes": len(part), "sr": 100 * won["mean"],
                    "sr_ci": [100 * c for c in won["ci"]], "mean_return": ret["mean"], "return_ci": ret["ci"]})
    return out


def train_drrn(cfg: DRRNConfig, run_dir: str) -> dict[str, Any]:
    """Train (or resume) a DRRN run directory; returns its summary."""
    return DRRNTrainer(cfg, run_dir).train()
