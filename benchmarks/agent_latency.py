"""Per-step latency of the `hf:smollm2` agent at its default settings, on the first observations of the TextWorld
small suite's test games and of ALFWorld test games: generation + grounding (batch 1 and a batch of all
contexts, as `r2v eval` batches live episodes) and `--choose likelihood` (one decision at a time).

Wall time depends on the machine's load, so the script also reports the process CPU seconds per step (with
`--threads 1`, wall time on an idle core is about the CPU time), and prints the load average before and after.

    python benchmarks/agent_latency.py --threads 2 --repeats 3
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from dataclasses import dataclass, replace

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@dataclass
class Args:
    threads: int = 2
    """torch threads"""
    repeats: int = 3
    """timed rounds per mode (the median is reported)"""
    alfworld_games: int = 3
    """ALFWorld test games added to the three TextWorld ones"""


def contexts(n_alf: int) -> list:
    import gymnasium as gym

    import r2v_envs  # noqa: F401
    from r2v_agents.context import Context

    out = []
    for env_id, kw, bench in (("R2V/TextWorld-v0", {"suite": "small"}, "textworld"),
                              ("R2V/ALFWorld-v0", {}, "alfworld")):
        env = gym.make(env_id, seed=0, split="test", perturbations=None, **kw)
        ids = env.unwrapped.task_ids()[: (3 if bench == "textworld" else n_alf)]
        for t in ids:
            obs, info = env.reset(options={"task_id": t})
            out.append(replace(Context.start(info["goal"], obs, info), benchmark=bench, task_id=t))
        env.close()
    return out


def timed(fn, repeats: int, steps: int) -> tuple[float, float]:
    """(median wall s, median CPU s) per step over ``repeats`` calls of ``fn`` (each acting ``steps`` steps)."""
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - w) / steps)
        cpus.append((time.process_time() - c) / steps)
    return statistics.median(walls), statistics.median(cpus)


def main(args: Args) -> None:
    import torch

    torch.set_num_threads(args.threads)
    from r2v_agents.backbones import load_backbone
    from r2v_eval.model_agents import HFChatAgent

    model, tok = load_backbone("smollm2")
    ctxs = contexts(args.alfworld_games)
    gen, lik = HFChatAgent(model, tok), HFChatAgent(model, tok, choose="likelihood")
    gen.act_batch(ctxs[:1], [{}])  # warm-up
    print(f"load before: {os.getloadavg()}; torch threads {args.threads}; {len(ctxs)} contexts")
    rows = {
        "generate, batch 1": timed(lambda: [gen.act_batch([c], [{}]) for c in ctxs], args.repeats, len(ctxs)),
        f"generate, batch {len(ctxs)}": timed(lambda: gen.act_batch(ctxs, [{}] * len(ctxs)), args.repeats, len(ctxs)),
        "likelihood": timed(lambda: lik.act_batch(ctxs, [{}] * len(ctxs)), args.repeats, len(ctxs)),
    }
    print(f"load after: {os.getloadavg()}")
    print(f"{'mode':<22} {'wall s/step':>12} {'CPU s/step':>11}")
    for k, (w, c) in rows.items():
        print(f"{k:<22} {w:12.3f} {c:11.3f}")
    d = gen.act_batch(ctxs, [{}] * len(ctxs))
    print("replies:", [(x.meta["reply"], x.action, x.meta["grounding"]) for x in d])


if __name__ == "__main__":
    try:
        import tyro

        main(tyro.cli(Args))
    except ImportError:
        main(Args())
