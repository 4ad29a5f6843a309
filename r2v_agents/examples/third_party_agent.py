"""Plug your own agent into a perturbed benchmark: any callable ``(obs, info) -> str`` or object with ``act``.

Run it: ``python -m r2v_agents.examples.third_party_agent /tmp/my-run`` (Scripted env: no engine needed; pass
``--env R2V/TextWorld-v0 --env-kwargs '{"suite": "small"}'`` for TextWorld).
"""

from __future__ import annotations

import argparse
import json

import r2v_envs  # noqa: F401 - registers the R2V/* environments
from r2v_agents.runner import RunConfig, run
from r2v_agents.shards import load_dataset


class GreedyExplorer:
    """A stateful third-party agent: prefers 'take', then moves it has not tried, from the visible actions."""

    def reset(self, goal: str, info: dict) -> None:
        self.tried: set[str] = set()

    def act(self, obs: str, info: dict) -> str:
        actions = info.get("admissible_actions") or ["look"]
        takes = [a for a in actions if a.startswith("take")]
        fresh = [a for a in actions if a.startswith("go") and a not in self.tried and a != "go west"]
        action = (takes or fresh or actions)[0]
        self.tried.add(action)
        return action


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("out_dir")
    p.add_argument("--env", default="R2V/Scripted-v0")
    p.add_argument("--env-kwargs", default='{"perturbations": "composite"}')
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--workers", type=int, default=0)
    args = p.parse_args(argv)
    cfg = RunConfig(args.env, args.out_dir, split="test", seeds=tuple(args.seeds),
                    env_kwargs=json.loads(args.env_kwargs), workers=args.workers, progress=False)
    summary = run(GreedyExplorer(), cfg)                       # an object with reset/act ...
    lam = run(lambda obs, info: "look", RunConfig(**{**vars(cfg), "out_dir": args.out_dir + "-look"}))  # ... or a callable
    steps = load_dataset(args.out_dir, "steps")                  # a Hugging Face datasets.Dataset
    result = {"episodes": summary.episodes, "success_rate": summary.success_rate, "steps": steps.num_rows,
              "look_success_rate": lam.success_rate}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
