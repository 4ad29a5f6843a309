"""The runner tests' scripted runs: the env, tasks and seeds, a noisy expert that plays them, and the shards' bytes
that two runs are compared by (the local, worker and Ray backends must write the same ones)."""

from __future__ import annotations

import time
import zlib
from pathlib import Path

import numpy as np

from r2v_agents.features import N_FEATURES
from r2v_agents.policy import BatchPolicy, Decision
from r2v_agents.runner import RunConfig

ENV = "R2V/Scripted-v0"
TASKS = tuple(f"scripted-{i}" for i in range(6))
SEEDS = (0, 1, 2)


class NoisyExpert(BatchPolicy):
    """The expert, except a deterministic pseudo-random ~25% of steps take another admissible action.

    Depends only on the context (episode id, step, observation), so logs must not depend on scheduling."""

    name = "noisy-expert"
    sees_oracle = True

    def __init__(self, sleep_s: float = 0.0):
        self.sleep_s = sleep_s

    def act_batch(self, contexts, infos):
        if self.sleep_s:
            time.sleep(self.sleep_s)
        out = []
        for ctx, info in zip(contexts, infos):
            h = zlib.crc32(f"{ctx.extra['episode_id']}|{ctx.step}|{ctx.observation}".encode())
            options = sorted(ctx.admissible_actions or ["look"])
            action = info["expert_action"] if h % 4 else options[h % len(options)]
            feats = np.full(N_FEATURES, (h % 1000) / 1000.0, dtype=np.float32)
            out.append(Decision(action=action, source="slm", features=feats, router_prob=float(feats[0])))
        return out


def config(out: Path, **kw) -> RunConfig:
    """The scripted run of ``TASKS`` x ``SEEDS`` under the composite perturbations, in shards of 5 episodes."""
    base = dict(task_ids=TASKS, seeds=SEEDS, env_kwargs={"perturbations": "composite"}, max_steps=8,
                progress=False, shard_episodes=5)
    base.update(kw)
    return RunConfig(ENV, str(out), **base)


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))}
