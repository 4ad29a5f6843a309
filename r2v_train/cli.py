"""The ``r2v`` command: one dispatch table (:data:`COMMANDS`) for every subcommand of the package.

    r2v pipeline --config r2v_train/configs/default.yaml --run-dir runs/r2v   # the whole chain + report
    r2v eval --agent AGENT --envs R2V/TextWorld-v0 --tasks 20                 # any agent's robustness report
    r2v view runs/eval                                                        # a run in the browser, offline
    r2v serve --env R2V/TextWorld-v0 --port 8000                              # an env as an OpenEnv server
    r2v train --run-dir runs/r2v --preset tiny                                # the training chain only
    r2v doctor                                                                # what this machine gives the suite

``r2v`` alone (or ``r2v --help``) lists every command with one line each; ``r2v CMD --help`` gives its flags.

Example:
    >>> sorted(COMMANDS)[:4]
    ['ablate-closed-source', 'ablate-consistency', 'ablate-cvar', 'ablate-cvar-deviation']
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import tyro

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.exit_status import run_console
from r2v_envs.resolve import require_server_stack
from r2v_envs.serving.config import ServeConfig
from r2v_envs.textworld.generate import cache_root, pregenerate
from r2v_eval.cli import main as eval_main
from r2v_eval.results import main_table
from r2v_eval.stats import with_ci
from r2v_eval.view import main as view_main
from r2v_train import run_dir as paths
from r2v_train.chain.launch import BCLaunch, DPOLaunch, run_bc, run_dpo
from r2v_train.chain.stages import ChainConfig, run_chain
from r2v_train.config import DEFAULT_CONFIG, PipelineConfig, load_config, preset, read_config
from r2v_train.doctor import DoctorArgs, doctor
from r2v_train.drrn.config import DRRNArgs
from r2v_train.evaluation.agents import agents_from_run
from r2v_train.evaluation.methods import evaluate, methods_table
from r2v_train.evaluation.report import ablation_table, write_report
from r2v_train.evaluation.rollout import RolloutArgs, rollout, success_table
from r2v_train.pipeline import run_ablation, run_pipeline, run_study, summary_text
from r2v_train.rl.config import RLArgs
from r2v_train.router.config import ROUTER_FILE
from r2v_train.router.data import RouterData
from r2v_train.router.train import RouterTrainArgs, RouterTrainResult, train_router
from r2v_train.runtime.cpu import keep_freed_memory, pin_cpu_kernels, set_threads
from r2v_train.table1 import Table1Args, table1_main


@dataclass(frozen=True)
class Command:
    """One ``r2v`` subcommand: a line of help and the function that takes its argument list."""

    summary: str
    run: Callable[[list[str]], Any]


# ------------------------------------------------------------------------------------------------ arguments
@dataclass
class PipelineArgs:
    """Run the whole R2V pipeline (chain, evaluation, ablations, report) into a run directory; resumable."""

    config: str = str(DEFAULT_CONFIG)
    """YAML config (default: the embedded CPU default)"""
    run_dir: str = "runs/r2v"
    """run directory (a rerun resumes)"""
    progress: bool | None = None
    """progress bars on stderr (default: the config's ``progress:``, itself on by default); off for logs"""


@dataclass
class RunDirArgs:
    """Act on an existing run directory made by ``r2v pipeline`` (or the chain) with the same config."""

    run_dir: str = "runs/r2v"
    """run directory"""
    config: str = str(DEFAULT_CONFIG)
    """the YAML config the run was made with"""


@dataclass
class GenerateArgs:
    suite: str = "default"
    """TextWorld suite to pre-generate (default, small)"""
    workers: int = 2
    """parallel generator processes"""


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


# ------------------------------------------------------------------------------------------------ commands
def _use_chain_threads(cfg: PipelineConfig) -> None:
    """Torch threads and CPU kernels as in the chain (``r2v pipeline`` evaluates in the chain's process)."""
    pin_cpu_kernels(cfg.chain.cpu_kernels)
    set_threads(cfg.chain.threads)


def pipeline(args: PipelineArgs) -> dict[str, Any]:
    data = read_config(args.config)
    if args.progress is not None:
        data["progress"] = args.progress
    summary = run_pipeline(load_config(data), args.run_dir)
    print(summary_text(summary))
    return summary


def evaluate_run(args: RunDirArgs) -> None:
    cfg = load_config(args.config)
    _use_chain_threads(cfg)
    r = evaluate(agents_from_run(cfg.chain, args.run_dir), cfg.evaluate, paths.eval_dir(args.run_dir))
    print(methods_table(main_table(r)))


def report(args: RunDirArgs) -> None:
    print(write_report(args.run_dir))


def router_study(args: RunDirArgs) -> None:
    """Only the router study (settings, counterfactual oracle, repeats) on a finished run, then the report."""
    cfg = load_config(args.config)
    _use_chain_threads(cfg)
    run_study(cfg, args.run_dir)
    print(write_report(args.run_dir))


def ablate(name: str) -> Callable[[RunDirArgs], None]:
    def cmd(args: RunDirArgs) -> None:
        cfg = load_config(args.config)
        _use_chain_threads(cfg)
        out = run_ablation(name, cfg, args.run_dir)
        print(ablation_table(out["rows"]))
        if paths.results_file(paths.eval_dir(args.run_dir)).exists():
            print(write_report(args.run_dir))
    return cmd


def rollout_table(args: RolloutArgs) -> None:
    records = rollout(args)
    print(f"\n{args.env_id} / split={args.split} / seeds={list(args.seeds)}\n")
    print(success_table(records))


def generate(args: GenerateArgs) -> None:
    games = pregenerate(args.suite, args.workers)
    print(f"{len(games)} games in {cache_root()}")


def serve(cfg: ServeConfig) -> None:
    """``r2v serve``: the server stack (FastAPI, uvicorn, openenv: the serve extra) loads only here."""
    require_server_stack()
    from r2v_envs.serving.app import serve as run_server

    run_server(cfg)


def rl(args: RLArgs) -> dict[str, Any]:
    """``r2v rl``: torch, transformers and TRL load only here."""
    from r2v_train.rl.run import RL_STAGES, run_rl

    bad = [s for s in args.only if s not in RL_STAGES]
    if bad:
        raise UnknownChoiceError("rl stage", bad[0], RL_STAGES)
    summary = run_rl(args.config(), args.run_dir, args.target(), stages=tuple(args.only) or RL_STAGES)
    for cond, methods in (summary.get("test") or {}).items():
        for method, c in methods.items():
            d = c["paired"]
            print(f"{cond:10s} {method:9s} SR {c['rl']['sr']:5.1f} (source {c['source']['sr']:5.1f}, paired "
                  f"{with_ci(d['sr_diff'], d['sr_diff_ci'], signed=True)})  LLM% "
                  f"{c['rl']['llm_pct']:5.1f} (source {c['source']['llm_pct']:5.1f})")
    print(f"RL run: {args.target()} (report: {os.path.join(args.target(), 'report.md')})")
    return summary


def drrn(args: DRRNArgs) -> None:
    """``r2v drrn``: torch loads only here. Prints the summary (a console script must not return a dict)."""
    from r2v_train.drrn.trainer import train_drrn

    s = train_drrn(args.config(), args.run_dir)
    f, last, rise = s["first_tenth"], s["last_tenth"], s["rise"]
    print(f"DRRN on {s['env_id']} ({s['perturbations']}): {s['episodes']} episodes; won first tenth "
          f"{with_ci(f['sr'], f['sr_ci'])}, last tenth {with_ci(last['sr'], last['sr_ci'])}, rise "
          f"{with_ci(rise['diff'], rise['diff_ci'], signed=True)}; "
          f"{s['env_steps_per_s']} env steps/s, {s['updates_per_s']} updates/s")
    print(f"DRRN run: {args.run_dir} (r2v eval --agent drrn:{args.run_dir})")


def drrn_matrix(args: Any) -> None:
    """``r2v drrn-matrix``: the train x test perturbation matrix (torch loads only here)."""
    from r2v_train.drrn.matrix import MATRIX_MD, MATRIX_PNG, matrix_table, run_matrix

    print(matrix_table(run_matrix(args)))
    print(f"matrix: {os.path.join(args.out, MATRIX_MD)} and {os.path.join(args.out, MATRIX_PNG)}")


def router_train_main(args: RouterTrainArgs) -> RouterTrainResult:
    """``r2v router-train --train DIR --valid DIR --run-dir DIR [--config.mode ...]`` (router rows from runner
    directories or .parquet files)."""
    load = lambda p: RouterData.read_parquet(p) if str(p).endswith(".parquet") else RouterData.from_run(p)
    result = train_router(load(args.train), load(args.valid), args.config, run_dir=args.run_dir)
    valid = result.metrics["valid"]
    print(f"router: threshold {result.threshold:.3f}, valid ECE {valid['ece']:.4f}, Brier {valid['brier']:.4f}, "
          f"escalation {valid['escalation_rate']:.1%} -> {os.path.join(args.run_dir, ROUTER_FILE)}")
    return result


def chain_main(argv: Sequence[str], stages: Sequence[str] | None = None) -> dict[str, dict[str, Any]]:
    """``r2v train`` (every stage) or a stage command (``stages``: only those, stopping where upstream outputs are
    missing): the chain's flags over one run directory."""
    argv = list(argv)
    pre = "default"
    for i, a in enumerate(argv):  # the preset picks the defaults that the other flags then override
        if a == "--preset" and i + 1 < len(argv):
            pre = argv[i + 1]
        elif a.startswith("--preset="):
            pre = a.split("=", 1)[1]
    args = tyro.cli(ChainArgs, args=argv, default=ChainArgs(run_dir="", preset=pre, config=preset(pre)))
    if not args.run_dir:
        print("r2v: error: --run-dir is required", file=sys.stderr)
        raise SystemExit(2)
    if args.env_kwargs:
        args.config.env.env_kwargs = json.loads(args.env_kwargs)
    only = tuple(args.only) or (tuple(stages) if stages else None)
    results = run_chain(args.config, args.run_dir, only=only, force=args.force,
                        stop_at_missing=not args.only and bool(stages))
    for stage, r in results.items():
        print(f"{stage:12s} {'skipped' if r['skipped'] else 'ran':8s} {r['wall_s']:8.1f}s  {r['dir']}")
    return results


def _matrix_args() -> type:
    """The flags of ``r2v drrn-matrix`` (its module imports torch: loaded when the command runs)."""
    from r2v_train.drrn.matrix import MatrixArgs

    return MatrixArgs


def _flags(fn: Callable[[Any], Any], cls: type, name: str) -> Callable[[list[str]], Any]:
    """A command whose flags are the fields of the dataclass ``cls`` (parsed by tyro)."""
    return lambda argv: fn(tyro.cli(cls, args=argv, prog=f"r2v {name}"))


def _chain(stages: Sequence[str] | None) -> Callable[[list[str]], Any]:
    return lambda argv: chain_main(argv, stages)


_ABLATIONS = {"features": "Table 7: the router's feature groups removed one at a time",
              "closed-source": "Table 6: the router without the SLM's internals (closed-source features)",
              "cvar": "Table 5: the CVaR grid (alpha x epsilon)",
              "cvar-scaled": "Table 5's grid on the miss-scale budget (the scaled setting)",
              "cvar-deviation": "Table 5's grid on the deviation_scaled setting",
              "consistency": "Table 4: the lambda_cons sweep of DPO + consistency",
              "feature-sets": "the router on named feature sets"}

COMMANDS: dict[str, Command] = {
    "pipeline": Command("the whole chain, the evaluation, ablations, router study and report (resumable)",
                        _flags(pipeline, PipelineArgs, "pipeline")),
    "table1": Command("each benchmark's pipeline preset, then one Table 1 over them",
                      _flags(table1_main, Table1Args, "table1")),
    "eval": Command("any agent's robustness report over envs x perturbations (also compare, show, report)",
                    lambda argv: eval_main(argv)),
    "view": Command("one self-contained HTML page of a run: summary, episodes, every step (--serve: on 127.0.0.1)",
                    lambda argv: view_main(argv)),
    "serve": Command("any env id as an OpenEnv server (HTTP + WebSocket sessions) for TRL and other clients",
                     _flags(serve, ServeConfig, "serve")),
    "train": Command("the training chain (Algorithm 1) over one run directory", _chain(None)),
    "collect": Command("the chain's rollout stages: split, teacher, replay, router data",
                       _chain(("split", "teacher", "replay", "router_data"))),
    "preferences": Command("the chain's preference stage", _chain(("preferences",))),
    "distill": Command("the chain's BC and DPO + consistency stages", _chain(("bc", "dpo"))),
    "train-bc": Command("BC alone on prompt/completion rows (also under accelerate launch)",
                        _flags(run_bc, BCLaunch, "train-bc")),
    "train-dpo": Command("DPO + consistency alone on preference rows (also under accelerate launch)",
                         _flags(run_dpo, DPOLaunch, "train-dpo")),
    "rl": Command("GRPO from a run's SLM (TRL), its learning curve, and R2V rerun on the RL-tuned SLM",
                  _flags(rl, RLArgs, "rl")),
    "drrn": Command("DRRN, the text-game field's standard learner, on any env id with admissible actions (resumable)",
                    _flags(drrn, DRRNArgs, "drrn")),
    "drrn-matrix": Command("DRRN trained under each perturbation setting, tested under each, paired CIs and a heatmap",
                           lambda argv: drrn_matrix(tyro.cli(_matrix_args(), args=argv, prog="r2v drrn-matrix"))),
    "router-train": Command("a router on router rows of two runner directories",
                            _flags(router_train_main, RouterTrainArgs, "router-train")),
    "evaluate": Command("Table 1's methods on a finished run", _flags(evaluate_run, RunDirArgs, "evaluate")),
    "router-study": Command("named router settings, the counterfactual oracle and repeats on a finished run",
                            _flags(router_study, RunDirArgs, "router-study")),
    "report": Command("report.md and plots of a run", _flags(report, RunDirArgs, "report")),
    **{f"ablate-{name}": Command(text, _flags(ablate(name.replace("-", "_")), RunDirArgs, f"ablate-{name}"))
       for name, text in _ABLATIONS.items()},
    "rollout": Command("the expert and a random agent through each perturbation: a one-minute success table",
                       _flags(rollout_table, RolloutArgs, "rollout")),
    "textworld-generate": Command("pre-generate a TextWorld suite in parallel",
                                  _flags(generate, GenerateArgs, "textworld-generate")),
    "doctor": Command("what this machine gives the suite: sandbox, Docker, GPU, cache, extras",
                      _flags(doctor, DoctorArgs, "doctor")),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  r2v {name:<{width}}  {c.summary}" for name, c in COMMANDS.items()]
    return "usage: r2v COMMAND [flags]   (r2v COMMAND --help for its flags)\n\n" + "\n".join(lines)


def main(argv: list[str] | None = None) -> Any:
    """Run one ``r2v`` subcommand; returns what it returns (for scripting and tests; :func:`console` is the
    command line, whose exit status never depends on it)."""
    keep_freed_memory()  # CPU training and sampling reuse large blocks instead of page-faulting fresh ones
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] not in COMMANDS:
        print(usage())
        raise SystemExit(0 if argv and argv[0] in ("-h", "--help") else 2)
    return COMMANDS[argv[0]].run(argv[1:])


def console(argv: list[str] | None = None) -> int:
    """The installed ``r2v`` script: 0 on success, 2 on a usage error, 1 on a failure (one typed line)."""
    words = sys.argv[1:] if argv is None else argv
    return run_console(main, f"r2v {words[0]}" if words else "r2v", argv)


if __name__ == "__main__":
    sys.exit(console())
