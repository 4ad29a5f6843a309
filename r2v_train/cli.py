"""The ``r2v`` command: one subcommand per job.

    r2v rollout                       # expert + random baseline through perturbed TextWorld, success table
    r2v textworld-generate --suite default --workers 2
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


COMMANDS = {"rollout": (_rollout, RolloutArgs), "textworld-generate": (_generate, GenerateArgs)}


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip())
        print("\ncommands: " + ", ".join(COMMANDS))
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    fn, cls = COMMANDS[argv[0]]
    fn(tyro.cli(cls, args=argv[1:], prog=f"r2v {argv[0]}"))


if __name__ == "__main__":
    main()
