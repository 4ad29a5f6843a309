"""DRRN's collection through the runner: env steps/s with the envs in this process against two worker processes.

The same 64 episodes (after 16 that warm the envs and start the workers) are played by an untrained DRRN's softmax
policy, batched in this process over every live episode (lockstep), with ``workers=0`` and ``workers=2``, twice each
in alternation; the episodes are identical in both modes (same steps). Usage::

    python benchmarks/drrn_collection.py [ENV_ID] [ENV_KWARGS_JSON] [--episodes N] [--max-steps N] [--modes 0,2,0,2]

Each training episode has its own perturbation seed z (DRRNConfig.z_start counts up), so this also times what a new
z costs the env side: ``--modes 2 --episodes 16`` under ``farm-bench --vs`` against an older checkout is the
before/after of a runner change.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

from r2v_train.drrn.config import DRRNConfig
from r2v_train.drrn.trainer import DRRNTrainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("env_id", nargs="?", default="R2V/BabyAI-v0")
    ap.add_argument("env_kwargs", nargs="?", default='{"levels": ["GoToRedBallGrey", "GoToLocal"]}')
    ap.add_argument("--episodes", type=int, default=64, help="timed episodes per mode (after 16 warm-up ones)")
    ap.add_argument("--max-steps", type=int, default=30)
    ap.add_argument("--modes", default="0,2,0,2", help="worker counts, run in this order")
    args = ap.parse_args()
    torch.set_num_threads(1)
    for w in (int(m) for m in args.modes.split(",")):
        cfg = DRRNConfig(env_id=args.env_id, env_kwargs=args.env_kwargs, max_steps=args.max_steps, encoder="bag",
                         buckets=4096, embed=32, hidden=64, workers=w, episodes_per_round=16, progress=False)
        t = DRRNTrainer(cfg, tempfile.mkdtemp())
        t.collect(0, 16)
        t0 = time.perf_counter()
        steps = sum(r["episode"]["steps"] for r in t.collect(16, args.episodes))
        dt = time.perf_counter() - t0
        print(f"workers={w}: {steps} steps in {dt:.1f} s = {steps / dt:.0f} env steps/s", flush=True)


if __name__ == "__main__":  # spawned env workers re-import the main module
    main()
