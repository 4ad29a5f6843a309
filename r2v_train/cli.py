"""The ``r2v`` command: one subcommand per job, and every command line of the package.

    r2v pipeline --config r2v_train/configs/default.yaml --run-dir runs/r2v   # the whole chain + report
    r2v evaluate | report | ablate-features | ablate-closed-source | ablate-cvar | ablate-consistency
    r2v train --run-dir runs/r2v --preset tiny   # the training chain only (Algorithm 1); also per stage:
    r2v collect | preferences | distill | router-train
    r2v rollout                       # expert + random baseline through perturbed envs, success table
    r2v eval --agent AGENT --envs ... --perturbations ...   # any agent's robustness report (r2v_eval.cli)
    r2v textworld-generate --suite default --workers 2
    r2v doctor                        # what this machine gives the suite (sandbox, Docker, GPU, cache, extras)
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tyro

from r2v_envs.textworld.generate import cache_root, pregenerate
from r2v_eval.cli import main as eval_main
from r2v_train.chain.launch import BCLaunch, DPOLaunch, run_bc, run_dpo
from r2v_train.chain.stages import ChainConfig, run_chain
from r2v_train.configs import preset
from r2v_train.doctor import DoctorArgs, doctor
from r2v_train.evaluation import run_agents  # noqa: F401 - registers the slm:/r2v: run-directory agents of `r2v eval`
from r2v_train.evaluation.rollout import RolloutArgs, rollout, success_table
from r2v_train.pipeline import register_commands
from r2v_train.router.train import ROUTER_FILE, RouterData, RouterTrainArgs, RouterTrainResult, train_router
from r2v_train.runtime.cpu import keep_freed_memory
from r2v_train.table1 import register_commands as table1_commands


@dataclass
class GenerateArgs:
    suite: str = "default"
    """TextWorld suite to pre-generate (default, small)"""
    workers: int = 2
    """parallel generator processes"""


def _rollout(args: RolloutArgs) -> None:
    records = rollout(args)
    print(f"\n{args.env_id} / split={args.split} / seeds={list(args.seeds)}\n")
    print(success_table(records))


def _generate(args: GenerateArgs) -> None:
    paths = pregenerate(args.suite, args.workers)
    print(f"{len(paths)} games in {cache_root()}")


def router_train_main(args: RouterTrainArgs) -> RouterTrainResult:
    """``r2v router-train --train DIR --valid DIR --run-dir DIR [--config.mode ...]`` (router rows from runner
    directories or .parquet files)."""
    load = lambda p: RouterData.read_parquet(p) if str(p).endswith(".parquet") else RouterData.from_run(p)  # noqa: E731
    result = train_router(load(args.train), load(args.valid), args.config, run_dir=args.run_dir)
    valid = result.metrics["valid"]
    print(f"router: threshold {result.threshold:.3f}, valid ECE {valid['ece']:.4f}, Brier {valid['brier']:.4f}, "
          f"escalation {valid['escalation_rate']:.1%} -> {os.path.join(args.run_dir, ROUTER_FILE)}")
    return result


@dataclass
class ChainArgs:
    """Run the R2V training chain (Algorithm 1) over one run directory; finished stages are skipped."""

    run_dir: str
    """the run directory (created; a rerun resumes)"""
    preset: str = "default"
    """starting config: default (paper settings) | tiny (CPU smoke run on the small TextWorld suite)"""
    config: ChainConfig = field(default_factory=ChainConfig)
    """overrides of the preset (e.g. --config.bc.max-steps 50)"""
    env_kwargs: str = ""
    """JSON object replacing config.env.env_kwargs (e.g. '{"suite": "default"}'; '{}' for none)"""
    only: tuple[str, ...] = ()
    """run only these stages (upstream stages must be complete)"""
    force: tuple[str, ...] = ()
    """rerun these stages (and the ones after them) even when complete"""


def chain_main(argv: Sequence[str] | None = None, stages: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``r2v train`` (every stage) or a stage command (``stages``: only those, stopping where upstream outputs are
    missing): the chain's flags over one run directory."""
    argv = list(sys.argv[1:] if argv is None else argv)
    pre = "default"
    for i, a in enumerate(argv):  # the preset picks the defaults that the other flags then override
        if a == "--preset" and i + 1 < len(argv):
            pre = argv[i + 1]
        elif a.startswith("--preset="):
            pre = a.split("=", 1)[1]
    args = tyro.cli(ChainArgs, args=argv, default=ChainArgs(run_dir="", preset=pre, config=preset(pre)))
    if not args.run_dir:
        raise SystemExit("--run-dir is required")
    if args.env_kwargs:
        args.config.env.env_kwargs = json.loads(args.env_kwargs)
    only = tuple(args.only) or (tuple(stages) if stages else None)
    results = run_chain(args.config, args.run_dir, only=only, force=args.force,
                        stop_at_missing=not args.only and bool(stages))
    for stage, r in results.items():
        print(f"{stage:12s} {'skipped' if r['skipped'] else 'ran':8s} {r['wall_s']:8.1f}s  {r['dir']}")
    return results


def _commands() -> dict[str, tuple[Any, type]]:
    return {**register_commands(), **table1_commands(), "rollout": (_rollout, RolloutArgs), "textworld-generate": (_generate, GenerateArgs),
            "train-bc": (run_bc, BCLaunch), "train-dpo": (run_dpo, DPOLaunch),
            "router-train": (router_train_main, RouterTrainArgs), "doctor": (doctor, DoctorArgs)}


COMMANDS = _commands()
# The chain's command lines (they parse their own arguments: the preset picks the defaults the flags override).
CHAIN_COMMANDS: dict[str, tuple[str, ...] | None] = {
    "train": None, "collect": ("split", "teacher", "replay", "router_data"), "preferences": ("preferences",),
    "distill": ("bc", "dpo")}


def main(argv: list[str] | None = None) -> Any:
    """Run one ``r2v`` subcommand; returns what it returns (for scripting and tests)."""
    keep_freed_memory()  # CPU training and sampling reuse large blocks instead of page-faulting fresh ones
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in CHAIN_COMMANDS:
        return chain_main(argv[1:], stages=CHAIN_COMMANDS[argv[0]])
    if argv and argv[0] == "eval":  # parses its own arguments (and its compare/show/report subcommands)
        return eval_main(argv[1:])
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip())
        print("\ncommands: " + ", ".join([*COMMANDS, *CHAIN_COMMANDS, "eval"]))
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    fn, cls = COMMANDS[argv[0]]
    return fn(tyro.cli(cls, args=argv[1:], prog=f"r2v {argv[0]}"))


if __name__ == "__main__":
    main()
