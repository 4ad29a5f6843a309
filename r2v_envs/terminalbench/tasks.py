"""Terminal-Bench tasks in its directory format, and its pytest judge.

A task directory holds ``task.yaml`` (``instruction``, ``max_agent_timeout_sec``, ``max_test_timeout_sec``,
``parser_name``, ...), a ``Dockerfile`` (``WORKDIR /app``) and/or ``docker-compose.yaml``, ``run-tests.sh``,
``solution.sh`` or ``solution.yaml`` (a list of ``{command, min_timeout_sec, block}``) and ``tests/``.
A suite is any directory of such task directories: the shipped one (``r2v_envs/terminalbench/tasks``) or,
for hosts with Docker, a clone of Terminal-Bench's ``tasks/``.

Success is judged as Terminal-Bench does: after the episode the tests are copied in, ``run-tests.sh`` runs in a
fresh shell, and pytest's "short test summary info" (``-rA``) is parsed; the task is resolved only if every
test PASSED. Unlike Terminal-Bench's parser, an empty summary is *not* a pass.

Example:
    >>> out = '''=== short test summary info ===
    ... PASSED tests/test_outputs.py::test_a
    ... FAILED tests/test_outputs.py::test_b - assert 1 == 2
    ... === 1 failed, 1 passed in 0.1s ==='''
    >>> parse_pytest_summary(out)
    {'test_outputs.py::test_a': 'passed', 'test_outputs.py::test_b': 'failed'}
    >>> tests_passed(parse_pytest_summary(out)), tests_passed({})
    (False, False)
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_envs.errors import R2VError, UnknownChoiceError

SHIPPED_TASKS_DIR = Path(__file__).parent / "tasks"
DEFAULT_AGENT_TIMEOUT_S = 360.0  # Terminal-Bench's defaults
DEFAULT_TEST_TIMEOUT_S = 60.0
_SUMMARY_HEADER = re.compile(r"=+ short test summary info =+")
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")
PARSERS = ("pytest",)


class TaskFormatError(R2VError, ValueError):
    """A task directory that does not follow Terminal-Bench's format."""


@dataclass(frozen=True)
class SolutionStep:
    command: str
    timeout_s: float = 30.0
    block: bool = True


@dataclass(frozen=True)
class DockerfileStep:
    """One instruction of the task's Dockerfile the local backend interprets (``COPY``/``ADD``, ``RUN``,
    ``WORKDIR``, ``ENV``); ``FROM`` and the rest are the host's business."""

    op: str
    args: tuple[str, ...]


@dataclass(frozen=True)
class TerminalTask:
    task_id: str
    path: Path
    instruction: str
    max_agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    max_test_timeout_s: float = DEFAULT_TEST_TIMEOUT_S
    parser_name: str = "pytest"
    difficulty: str = ""
    category: str = ""
    tags: tuple[str, ...] = ()
    solution: tuple[SolutionStep, ...] = ()
    workdir: str = "/app"
    dockerfile: tuple[DockerfileStep, ...] = ()
    meta: Mapping[str, Any] = field(default_factory=dict)

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def run_tests_script(self) -> Path:
        return self.path / "run-tests.sh"

    def expert_actions(self) -> list[str]:
        """The solution replayed as env actions, then ``mark_task_complete``."""
        return [*(f"run {s.command}" for s in self.solution), "mark_task_complete"]


def load_task(path: str | Path) -> TerminalTask:
    """Read one task directory; raises :class:`TaskFormatError` with what is missing."""
    import yaml

    path = Path(path)
    spec_file = path / "task.yaml"
    if not spec_file.is_file():
        raise TaskFormatError(f"{path}: no task.yaml")
    try:
        spec = yaml.safe_load(spec_file.read_text()) or {}
    except yaml.YAMLError as exc:
        raise TaskFormatError(f"{spec_file}: {exc}") from exc
    instruction = spec.get("instruction") or spec.get("descriptions", [{}])[0].get("description")
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError(f"{spec_file}: 'instruction' must be a non-empty string")
    if not (path / "run-tests.sh").is_file() or not (path / "tests").is_dir():
        raise TaskFormatError(f"{path}: needs run-tests.sh and tests/")
    parser = spec.get("parser_name", "pytest")
    if parser not in PARSERS:
        raise UnknownChoiceError("test parser", parser, PARSERS)
    dockerfile = _read_dockerfile(path / "Dockerfile") if (path / "Dockerfile").is_file() else ()
    workdir = next((s.args[0] for s in reversed(dockerfile) if s.op == "WORKDIR"), "/app")
    return TerminalTask(
        task_id=path.name, path=path, instruction=instruction.strip(),
        max_agent_timeout_s=float(spec.get("max_agent_timeout_sec", DEFAULT_AGENT_TIMEOUT_S)),
        max_test_timeout_s=float(spec.get("max_test_timeout_sec", DEFAULT_TEST_TIMEOUT_S)),
        parser_name=parser, difficulty=str(spec.get("difficulty", "")), category=str(spec.get("category", "")),
        tags=tuple(spec.get("tags") or ()), solution=_read_solution(path), workdir=workdir,
        dockerfile=dockerfile, meta=spec)


def load_suite(root: str | Path = SHIPPED_TASKS_DIR) -> dict[str, TerminalTask]:
    """Every task directory (one with a task.yaml) directly under ``root``, by name."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"terminal task suite {root} is not a directory")
    return {d.name: load_task(d) for d in sorted(root.iterdir()) if (d / "task.yaml").is_file()}


def _read_solution(path: Path) -> tuple[SolutionStep, ...]:
    import yaml

    if (path / "solution.yaml").is_file():
        steps = yaml.safe_load((path / "solution.yaml").read_text()) or []
        if not isinstance(steps, list):
            raise TaskFormatError(f"{path}/solution.yaml must be a list of commands")
        out = []
        for s in steps:
            s = {"command": s} if isinstance(s, str) else s
            # Terminal-Bench's min_timeout_sec is how long to wait at least; we block to completion anyway.
            out.append(SolutionStep(str(s["command"]).rstrip("\n"),
                                    max(30.0, float(s.get("max_timeout_sec", s.get("min_timeout_sec", 0)))),
                                    bool(s.get("block", True))))
        return tuple(out)
    if (path / "solution.sh").is_file():
        return (SolutionStep((path / "solution.sh").read_text().rstrip("\n"), 120.0),)
    return ()


def _read_dockerfile(path: Path) -> tuple[DockerfileStep, ...]:
    text = re.sub(r"\\\n", " ", path.read_text())  # line continuations
    steps = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        op, _, rest = line.partition(" ")
        op = op.upper()
        if op in ("COPY", "ADD"):
            args = [a for a in shlex.split(rest) if not a.startswith("--")]
            steps.append(DockerfileStep(op, tuple(args)))
        elif op in ("RUN", "WORKDIR"):
            steps.append(DockerfileStep(op, (rest.strip(),)))
        elif op == "ENV":
            key, _, value = rest.strip().partition("=") if "=" in rest.split()[0] else rest.strip().partition(" ")
            steps.append(DockerfileStep(op, (key.strip(), value.strip().strip('"'))))
    return tuple(steps)


def parse_pytest_summary(output: str) -> dict[str, str]:
    """Test name -> status from pytest's ``-rA`` short summary (the last one in ``output``)."""
    parts = _SUMMARY_HEADER.split(output)
    if len(parts) < 2:
        return {}
    results: dict[str, str] = {}
    for line in parts[-1].splitlines():
        m = _SUMMARY_LINE.match(line.strip())
        if m:
            name = m.group(2).split("/")[-1]
            results[name] = m.group(1).lower()
    return results


def tests_passed(results: Mapping[str, str]) -> bool:
    """Resolved only if there is at least one test and every test passed (an empty summary fails)."""
    return bool(results) and all(status == "passed" for status in results.values())
