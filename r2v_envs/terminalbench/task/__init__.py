"""A Terminal-Bench task as data: its folder in either format (:mod:`.formats`) and its Dockerfile's grammar
(:mod:`.dockerfile`). Setting a task up is the backends' business, grading it the judge's."""

from r2v_envs.terminalbench.task.dockerfile import DockerfileStep, TaskFormatError, expand_vars, read_dockerfile
from r2v_envs.terminalbench.task.formats import (
    HARBOR_SOLUTION_DIR,
    SHIPPED_TASKS_DIR,
    SolutionStep,
    TaskFormatWarning,
    TerminalTask,
    load_suite,
    load_task,
    scan_suite,
)

__all__ = ["HARBOR_SOLUTION_DIR", "SHIPPED_TASKS_DIR", "DockerfileStep", "SolutionStep", "TaskFormatError",
           "TaskFormatWarning", "TerminalTask", "expand_vars", "load_suite", "load_task", "read_dockerfile",
           "scan_suite"]
