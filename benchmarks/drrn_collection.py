"""DRRN's collection through the runner: env steps/s with the envs in this process against two worker processes.

The same 64 episodes (after 16 that warm the envs and start the workers) are played by an untrained DRRN's softmax
policy, batched in this process over every live episode (lockstep), with ``workers=0`` and ``workers=2``, twice each
in alternation; the episodes are identical in both modes (same steps). Usage::

    python benchmarks/drrn_collection.py [ENV_ID] [ENV_KWARGS_JSON]
"""

from __future__ import annotations

import sys
import tempfile
import time

import torch

from r2v_train.drrn.config import DRRNConfig
from r2v_train.drrn.trainer import DRRNTrainer


def main() -> None:
    torch.set_num_threads(1)
    env_id = sys.argv[1] if len(sys.argv) > 1 else "R2V/BabyAI-v0"
    kwargs = sys.argv[2] if len(sys.argv) > 2 else '{"levels": ["GoToRedBallGrey", "GoToLocal"]}'
    for w in (0, 2, 0, 2):
        cfg = DRRNConfig(env_id=env_id, env_kwargs=kwargs, max_steps=30, encoder="bag", buckets=4096, embed=32,
                         hidden=64, workers=w, episodes_per_round=16, progress=False)
        t = DRRNTrainer(cfg, tempfile.mkdtemp())
        t.collect(0, 16)
        t0 = time.perf_counter()
        steps = sum(r["episode"]["steps"] for r in t.collect(16, 64))
        dt = time.perf_counter() - t0
        print(f"workers={w}: {steps} steps in {dt:.1f} s = {steps / dt:.0f} env steps/s", flush=True)


if __name__ == "__main__":  # spawned env workers re-import the main module
    main()
