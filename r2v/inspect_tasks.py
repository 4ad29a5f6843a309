"""The ``r2v/<benchmark>`` tasks of Inspect AI (``inspect eval r2v/textworld --model ... -T perturbations=composite``).

Each is :func:`r2v_eval.inspect_tasks.r2v_task` on one registered env id; the task parameters (``-T``) are the same
for all: ``perturbations`` (one setting: none, flaky, partial, distractor, injection, composite, or a YAML file),
``seed`` (a seed or a list: one sample per task and seed), ``split``, ``tasks`` (first N of the split, or a list of
task ids) and ``max_steps``. See docs/inspect.md.
"""

from __future__ import annotations

from collections.abc import Sequence

from inspect_ai import Task, task

from r2v_eval.inspect_tasks import ENV_OF, r2v_task

Seeds = int | Sequence[int]
Tasks = int | Sequence[str] | None


@task
def textworld(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
              max_steps: int | None = None) -> Task:
    """R2V/TextWorld-v0: TextWorld cooking games."""
    return r2v_task(ENV_OF["textworld"], perturbations, seed, split, tasks, max_steps)


@task
def alfworld(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
             max_steps: int | None = None) -> Task:
    """R2V/ALFWorld-v0: ALFWorld's household tasks in text."""
    return r2v_task(ENV_OF["alfworld"], perturbations, seed, split, tasks, max_steps)


@task
def scienceworld(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
                 max_steps: int | None = None) -> Task:
    """R2V/ScienceWorld-v0: ScienceWorld's science experiments."""
    return r2v_task(ENV_OF["scienceworld"], perturbations, seed, split, tasks, max_steps)


@task
def babyai(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
           max_steps: int | None = None) -> Task:
    """R2V/BabyAI-v0: BabyAI's grid levels described in text."""
    return r2v_task(ENV_OF["babyai"], perturbations, seed, split, tasks, max_steps)


@task
def humaneval(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
              max_steps: int | None = None) -> Task:
    """R2V/HumanEval-v0: HumanEval+ as write_code / test / submit turns, judged by EvalPlus."""
    return r2v_task(ENV_OF["humaneval"], perturbations, seed, split, tasks, max_steps)


@task
def terminalbench(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
                  max_steps: int | None = None) -> Task:
    """R2V/TerminalBench-v0: Terminal-Bench tasks in a sandbox, judged by their tests."""
    return r2v_task(ENV_OF["terminalbench"], perturbations, seed, split, tasks, max_steps)


@task
def scripted(perturbations: str = "none", seed: Seeds = 0, split: str = "test", tasks: Tasks = None,
             max_steps: int | None = None) -> Task:
    """R2V/Scripted-v0: r2v's scripted test env (seconds, no engine): a smoke test of a model and its server."""
    return r2v_task(ENV_OF["scripted"], perturbations, seed, split, tasks, max_steps)
