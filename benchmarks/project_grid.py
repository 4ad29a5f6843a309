"""Projected wall time of the paper-scale grid on N nodes, from measured per-episode and per-step costs.

Model (stated so it can be checked against a real run):

* rollouts: ``episodes = benchmarks x backbones x tasks x seeds x passes``; each episode costs
  ``worker_s_per_episode`` worker-seconds of env time (measured by ``benchmarks/ray_throughput.py``,
  ``--measured``) plus ``steps_per_episode x policy_s_per_step / policy_batch`` of GPU policy time (batched
  SLM inference; measure it on the GPU box). Env work spreads over ``nodes x workers_per_node`` actors at
  ``ray_efficiency`` (1 - the measured Ray overhead); policy work over ``nodes x gpus_per_node``. The two
  overlap (lock-step batching), so rollout wall = max(env, policy).
* training: ``backbones x benchmarks x gpu_hours_per_cell`` GPU-hours (the paper: 25-40 per cell), spread
  over ``nodes x gpus_per_node`` GPUs at ``train_efficiency`` (DDP / ZeRO-3 scaling).

    python benchmarks/project_grid.py --measured runs/ray_throughput.json --nodes 1 2 4 8
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import tyro


@dataclass
class Args:
    measured: str | None = None
    """JSON written by benchmarks/ray_throughput.py (sets worker_s_per_episode and ray_efficiency)"""
    nodes: tuple[int, ...] = (1, 2, 4, 8)
    """cluster sizes to project"""
    benchmarks: int = 3
    backbones: int = 4
    tasks: int = 500
    """tasks per benchmark in the rollout grid"""
    seeds: int = 5
    """perturbation seeds z per task"""
    passes: int = 3
    """rollout passes per cell (teacher data, BC candidates, evaluation)"""
    worker_s_per_episode: float = 0.2
    """env worker-seconds per episode (overridden by --measured; TerminalBench episodes cost far more)"""
    steps_per_episode: float = 20.0
    policy_s_per_step: float = 0.5
    """GPU seconds of one SLM call (K candidates) before batching"""
    policy_batch: int = 32
    """contexts per batched policy call"""
    workers_per_node: int = 16
    gpus_per_node: int = 8
    ray_efficiency: float = 0.87
    """1 - Ray overhead (overridden by --measured)"""
    gpu_hours_per_cell: float = 32.5
    """training GPU-hours per benchmark x backbone cell (paper: 25-40)"""
    train_efficiency: float = 0.85
    """data-parallel scaling efficiency of training"""


def project(args: Args) -> list[dict]:
    if args.measured:
        m = json.loads(Path(args.measured).read_text())["variants"]["ray"]
        args.worker_s_per_episode = m["worker_s_per_episode"]
        args.ray_efficiency = 1.0 / (1.0 + max(0.0, m["overhead_vs_local"]))
    episodes = args.benchmarks * args.backbones * args.tasks * args.seeds * args.passes
    env_s = episodes * args.worker_s_per_episode / args.ray_efficiency
    policy_s = episodes * args.steps_per_episode * args.policy_s_per_step / args.policy_batch
    train_gpu_h = args.benchmarks * args.backbones * args.gpu_hours_per_cell
    rows = []
    for n in args.nodes:
        rollout_h = max(env_s / (n * args.workers_per_node), policy_s / (n * args.gpus_per_node)) / 3600
        train_h = train_gpu_h / (n * args.gpus_per_node * args.train_efficiency)
        rows.append({"nodes": n, "episodes": episodes, "rollout_h": rollout_h, "train_h": train_h,
                     "total_h": rollout_h + train_h})
    return rows


def main(args: Args) -> None:
    rows = project(args)
    print(f"{rows[0]['episodes']} episodes; env {args.worker_s_per_episode:.3f} worker-s/episode at Ray "
          f"efficiency {args.ray_efficiency:.2f}; policy {args.policy_s_per_step} GPU-s/step / batch "
          f"{args.policy_batch}; training {args.benchmarks * args.backbones * args.gpu_hours_per_cell:.0f} GPU-h")
    print(f"{'nodes':>5s} {'rollout h':>10s} {'train h':>8s} {'total h':>8s}")
    for r in rows:
        print(f"{r['nodes']:5d} {r['rollout_h']:10.2f} {r['train_h']:8.2f} {r['total_h']:8.2f}")


if __name__ == "__main__":
    main(tyro.cli(Args))
