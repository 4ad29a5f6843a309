"""What Inspect AI's runner costs per episode over ``r2v eval``'s, the same model agent on the same episodes.

Both play R2V/Scripted-v0 (composite perturbations) against one local OpenAI-compatible server backed by a tiny
trained chat model (``tests/support/openai_server.py``), with the same prompts, grounding and request concurrency:
``r2v eval --agent openai`` (a fresh output directory per round) and ``inspect_ai.eval`` of ``r2v/scripted``. Rounds
alternate between the two, so machine load hits them alike. Printed per round: wall seconds, SR (they must agree),
model requests; then the median per-episode difference and the ratio. Needs the ``inspect``, ``api`` and ``train``
extras.

    python benchmarks/inspect_overhead.py --seeds 0 1 2 3 --rounds 3
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import tyro

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.support.openai_server, run from a checkout


@dataclass
class Args:
    tasks: int = 5
    """scripted tasks (scripted-0 ...)"""
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    """perturbation seeds"""
    setting: str = "composite"
    max_steps: int = 8
    concurrency: int = 4
    """parallel requests (r2v eval --concurrency, Inspect's max_connections)"""
    rounds: int = 3


def main(args: Args) -> None:
    from inspect_ai import eval as inspect_eval

    from r2v.inspect_tasks import scripted
    from r2v_eval.agents import AgentOptions
    from r2v_eval.cli import EvalArgs, evaluate
    from tests.support.openai_server import ChatServer, train_scripted_chat_model

    tmp = Path(tempfile.mkdtemp(prefix="r2v-inspect-bench-"))
    tasks = tuple(f"scripted-{i}" for i in range(args.tasks))
    episodes = len(tasks) * len(args.seeds)
    model_dir = train_scripted_chat_model(str(tmp / "model"), agent_prompt=True)
    walls: dict[str, list[float]] = {"r2v eval": [], "inspect": []}
    print(f"{episodes} episodes per round; {os.cpu_count()} CPUs; load {os.getloadavg()}")
    with ChatServer(model_dir, faults=False) as server:
        os.environ["LOCAL_BASE_URL"], os.environ["LOCAL_API_KEY"] = server.base_url, "unused"
        for k in range(args.rounds):
            n0 = sum(server.served.values())
            t = time.perf_counter()
            results = evaluate(EvalArgs(
                agent="openai", out=str(tmp / f"eval-{k}"), envs=("R2V/Scripted-v0",), perturbations=(args.setting,),
                seeds=args.seeds, task_ids=tasks, max_steps=args.max_steps, bootstrap=50, progress=False,
                options=AgentOptions(model="tiny", base_url=server.base_url, concurrency=args.concurrency)))
            walls["r2v eval"].append(time.perf_counter() - t)
            n1 = sum(server.served.values())
            t = time.perf_counter()
            (log,) = inspect_eval(scripted(perturbations=args.setting, seed=list(args.seeds), tasks=list(tasks),
                                           max_steps=args.max_steps), model="openai-api/local/tiny",
                                  log_dir=str(tmp / f"logs-{k}"), display="none", max_connections=args.concurrency)
            walls["inspect"].append(time.perf_counter() - t)
            n2 = sum(server.served.values())
            sr_eval, sr_inspect = results["cells"][0]["sr"], 100 * log.results.scores[0].metrics["accuracy"].value
            print(f"round {k}: r2v eval {walls['r2v eval'][-1]:.1f} s (SR {sr_eval:.1f}, {n1 - n0} requests) | "
                  f"inspect {walls['inspect'][-1]:.1f} s (SR {sr_inspect:.1f}, {n2 - n1} requests)")
    med = {name: statistics.median(w) for name, w in walls.items()}
    print(f"median: r2v eval {med['r2v eval']:.1f} s, inspect {med['inspect']:.1f} s; inspect / r2v eval "
          f"{med['inspect'] / med['r2v eval']:.2f}x; +{(med['inspect'] - med['r2v eval']) / episodes:.2f} s per episode")


if __name__ == "__main__":
    main(tyro.cli(Args))
