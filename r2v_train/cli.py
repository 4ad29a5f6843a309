"""The ``r2v`` command: one subcommand per job.

    r2v pipeline --config r2v_train/configs/default.yaml --run-dir runs/r2v   # the whole chain + report
    r2v evaluate | report | ablate-features | ablate-closed-source | ablate-cvar | ablate-consistency
    r2v train --run-dir runs/r2v --preset tiny   # the training chain only (Algorithm 1); also per stage:
    r2v collect | preferences | distill | router-train
    r2v rollout                       # expert + random baseline through perturbed envs, success table
    r2v textworld-generate --suite default --workers 2
    r2v doctor                        # what this machine gives the suite (sandbox, Docker, GPU, cache, extras)
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import tyro

from r2v_train.rollout import RolloutArgs, rollout, success_table


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
    from r2v_envs.textworld.generate import cache_root, pregenerate

    paths = pregenerate(args.suite, args.workers)
    print(f"{len(paths)} games in {cache_root()}")


def _commands() -> dict:
    from r2v_train.pipeline import register_commands

    from r2v_train.doctor import DoctorArgs, doctor
    from r2v_train.launch import BCLaunch, DPOLaunch, run_bc, run_dpo

    return {**register_commands(), "rollout": (_rollout, RolloutArgs), "textworld-generate": (_generate, GenerateArgs),
            "train-bc": (run_bc, BCLaunch), "train-dpo": (run_dpo, DPOLaunch), "doctor": (doctor, DoctorArgs)}


COMMANDS = _commands()
# Stage commands that parse their own arguments (module:function called with the remaining argv).
SELF_PARSING = {"train": "r2v_train.chain:main", "collect": "r2v_train.collect:main",
                "preferences": "r2v_train.preferences:main", "distill": "r2v_train.policy_stages:main",
                "router-train": "r2v_train.router_train:main"}


def main(argv: list[str] | None = None) -> None:
    from r2v_train.runtime import keep_freed_memory

    keep_freed_memory()  # CPU training and sampling reuse large blocks instead of page-faulting fresh ones
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in SELF_PARSING:
        import importlib

        module, fn = SELF_PARSING[argv[0]].split(":")
        getattr(importlib.import_module(module), fn)(argv[1:])
        return
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip())
        print("\ncommands: " + ", ".join([*COMMANDS, *SELF_PARSING]))
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    fn, cls = COMMANDS[argv[0]]
    fn(tyro.cli(cls, args=argv[1:], prog=f"r2v {argv[0]}"))


if __name__ == "__main__":
    main()
