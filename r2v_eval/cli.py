"""``r2v eval`` (also ``python -m r2v_eval``): any agent, any benchmark, a perturbation grid, a robustness report.

    r2v eval --agent openai --model M --base-url http://127.0.0.1:8000/v1 --envs R2V/TextWorld-v0 \\
             --perturbations none flaky composite --seeds 0 1 2 --tasks 20 --out runs/eval-m
    r2v eval --agent mypkg.agents:MyAgent --envs R2V/ALFWorld-v0 --workers 2 --out runs/eval-mine
    r2v eval compare runs/eval-a runs/eval-b       # A minus B per cell, paired CIs
    r2v eval show runs/eval-m --episode tw-cooking-easy-000@1 [--perturbation flaky]
    r2v eval report runs/eval-m                    # recompute results.json / report.md / plot from the shards

A rerun of the same command resumes; progress bars (with ETA) go to stderr; the report path is printed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any

import tyro

from r2v_envs.exit_status import run_console
from r2v_eval.agents import AgentOptions, agent_concurrency, build_agent
from r2v_eval.demos import DemoBank
from r2v_eval.grid import GridConfig, run_grid
from r2v_eval.model_agents import AGENT_PROMPT
from r2v_eval.robustness_report import REPORT_FILE, compare_text, show_episode, write_report


@dataclass
class EvalArgs:
    """Evaluate an agent over env ids x perturbation settings x seeds x tasks and write a robustness report."""

    agent: str
    """openai | hf:PATH | random | expert | module:callable | slm:RUN_DIR | r2v:RUN_DIR"""
    out: str = "runs/eval"
    """evaluation directory (a rerun resumes)"""
    envs: tuple[str, ...] = ("R2V/TextWorld-v0",)
    """registered env ids, module:Id, or URLs of r2v serve servers (launched with --oracle; cells bear the served id)"""
    perturbations: tuple[str, ...] = ("none", "flaky", "partial", "distractor", "injection", "composite")
    """perturbation settings: none, flaky, partial, distractor, injection, composite, or a yaml file"""
    seeds: tuple[int, ...] = (0, 1, 2)
    """perturbation seeds z"""
    split: str = "test"
    """task split"""
    tasks: int = 0
    """first N tasks of the split (0 = all)"""
    task_ids: tuple[str, ...] = ()
    """explicit task ids (single env)"""
    env_kwargs: str = ""
    """JSON gym.make arguments, for all envs or keyed by env id, e.g. '{"R2V/TextWorld-v0": {"suite": "small"}}'"""
    max_steps: int | None = None
    """episode step cap (None: each env's)"""
    workers: int = 0
    """env worker processes"""
    backend: str = "local"
    """local | ray"""
    ray_address: str | None = None
    """Ray cluster address"""
    episode_retries: int = 1
    """passes rerunning episodes that could not be run"""
    retry_backoff_s: float = 2.0
    """pause before the first retry pass (doubles)"""
    bootstrap: int = 1000
    """bootstrap resamples of the CIs"""
    progress: bool = True
    """progress bars on stderr"""
    options: Annotated[AgentOptions, tyro.conf.OmitArgPrefixes] = field(default_factory=AgentOptions)
    """model agent options"""

    def grid(self) -> GridConfig:
        kw = json.loads(self.env_kwargs) if self.env_kwargs else {}
        if not isinstance(kw, dict):
            raise ValueError("--env-kwargs must be a JSON object")
        return GridConfig(env_ids=self.envs, perturbations=self.perturbations, seeds=self.seeds, split=self.split,
                          tasks=self.tasks, task_ids=self.task_ids, env_kwargs=kw, max_steps=self.max_steps,
                          workers=self.workers, backend=self.backend, ray_address=self.ray_address,
                          episode_retries=self.episode_retries, retry_backoff_s=self.retry_backoff_s,
                          progress=self.progress)


@dataclass
class CompareArgs:
    """Compare two evaluation directories cell by cell (A minus B, paired over the episodes both ran)."""

    a: tyro.conf.Positional[str]
    b: tyro.conf.Positional[str]
    bootstrap: int = 1000


@dataclass
class ShowArgs:
    """Print one episode as the agent saw it, perturbation events marked."""

    run: tyro.conf.Positional[str]
    """evaluation directory"""
    episode: str
    """episode id, <task_id>@<z>"""
    env: str | None = None
    """only this env id"""
    perturbation: str | None = None
    """only this perturbation setting"""


@dataclass
class ReportArgs:
    """Recompute results.json, report.md and the plot of an evaluation directory from its shards."""

    run: tyro.conf.Positional[str]
    bootstrap: int = 1000


def evaluate(args: EvalArgs) -> dict[str, Any]:
    """Build the agent, run the grid, write the report; returns results.json's content."""
    grid = args.grid()
    policy, name = build_agent(args.agent, args.options)
    if args.options.shots:
        if not hasattr(policy, "demos"):
            raise ValueError(f"--shots shows demonstrations to a model agent (openai, hf:), not to {args.agent!r}")
        policy.demos = DemoBank(args.options.shots, {e: grid.kwargs_for(e) for e in grid.env_ids}, AGENT_PROMPT)
    record = {"spec": args.agent, "options": {k: v for k, v in asdict(args.options).items()
                                              if k not in ("system_prompt",)},
              "system_prompt": args.options.system_text()}
    try:
        summaries = run_grid(policy, name, grid, args.out, record, concurrency=agent_concurrency(policy))
    finally:
        if getattr(policy, "demos", None) is not None:
            policy.demos.close()  # the train-split envs the demonstrations were played on
    stats = getattr(policy, "stats", None)
    results = write_report(args.out, args.bootstrap)
    if stats is not None and args.progress:
        print(f"agent requests this session: {stats.requests} ({stats.replies} replies; errors "
              f"{dict(stats.errors) or 'none'})", file=sys.stderr)
    results["session"] = summaries
    return results


def main(argv: Sequence[str] | None = None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "compare":
        a = tyro.cli(CompareArgs, args=argv[1:], prog="r2v eval compare")
        print(compare_text(a.a, a.b, a.bootstrap))
    elif argv and argv[0] == "show":
        s = tyro.cli(ShowArgs, args=argv[1:], prog="r2v eval show")
        try:
            print(show_episode(s.run, s.episode, s.env, s.perturbation))
        except KeyError as e:
            raise SystemExit(str(e)) from None
    elif argv and argv[0] == "report":
        r = tyro.cli(ReportArgs, args=argv[1:], prog="r2v eval report")
        write_report(r.run, r.bootstrap)
        print(f"{r.run}/{REPORT_FILE}")
    else:
        args = tyro.cli(EvalArgs, args=argv, prog="r2v eval", description=__doc__)
        evaluate(args)
        print(f"{args.out}/{REPORT_FILE}")


if __name__ == "__main__":
    sys.exit(run_console(main, "python -m r2v_eval.cli"))
