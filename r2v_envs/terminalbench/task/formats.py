"""Terminal-Bench tasks in both of its directory formats.

* Original (Terminal-Bench 0.x/1.x): ``task.yaml`` (``instruction``, ``max_agent_timeout_sec``,
  ``max_test_timeout_sec``, ``parser_name``, ...), a ``Dockerfile`` (``WORKDIR /app``) and/or
  ``docker-compose.yaml``, ``run-tests.sh``, ``solution.sh`` or ``solution.yaml`` (a list of ``{command,
  min_timeout_sec, max_timeout_sec, block}``) and ``tests/``.
* Harbor (Terminal-Bench 2.x): ``task.toml`` (``[agent] timeout_sec``, ``[verifier] timeout_sec``,
  ``[environment] cpus`` and ``memory_mb``, ``[metadata]``), ``instruction.md``, ``environment/`` (the Docker build
  context with its ``Dockerfile``), ``tests/test.sh`` and ``solution/solve.sh``.

A suite is any directory of such task directories, in either format: the shipped one
(``r2v_envs/terminalbench/shipped_tasks``) or a clone of a task repository. :func:`load_suite` skips malformed tasks with
one :class:`TaskFormatWarning` that lists them.

A task is data: how it is set up (:mod:`r2v_envs.terminalbench.backends`) and judged
(:mod:`r2v_envs.terminalbench.judge`) lives elsewhere.

Example:
    >>> suite = load_suite()
    >>> task = suite["greeting-cli"]
    >>> task.format, task.workdir, task.cpus, task.memory_mb, task.expert_actions()[-1]
    ('terminal-bench', '/app', 1.0, 2048, 'mark_task_complete')
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_envs.errors import UnknownChoiceError
from r2v_envs.terminalbench.task.dockerfile import DockerfileStep, TaskFormatError, read_dockerfile

FORMATS = ("terminal-bench", "harbor")

SHIPPED_TASKS_DIR = Path(__file__).parents[1] / "shipped_tasks"
DEFAULT_AGENT_TIMEOUT_S = 360.0  # Terminal-Bench's defaults
DEFAULT_TEST_TIMEOUT_S = 60.0
DEFAULT_STEP_TIMEOUT_S = 180.0  # Terminal-Bench's TerminalCommand.max_timeout_sec default
# What a task that declares no `[environment] cpus`/`memory_mb` gets (the original format declares none): one core
# and the 2 GB each process of the local backend always had.
DEFAULT_CPUS = 1.0
DEFAULT_MEMORY_MB = 2048
PARSERS = ("pytest",)


class TaskFormatWarning(UserWarning):
    """Malformed task directories were skipped while loading a suite."""


@dataclass(frozen=True)
class SolutionStep:
    command: str
    timeout_s: float = 30.0
    block: bool = True


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
    format: str = "terminal-bench"
    cpus: float = DEFAULT_CPUS  # the task's container: CPU cores (Harbor's [environment] cpus)
    memory_mb: int = DEFAULT_MEMORY_MB  # and memory (Harbor's [environment] memory_mb)

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def run_tests_script(self) -> Path:
        """``run-tests.sh`` (original format) or ``tests/test.sh`` (Harbor)."""
        return self.tests_dir / "test.sh" if self.format == "harbor" else self.path / "run-tests.sh"

    @property
    def context_dir(self) -> Path:
        """The Docker build context: the task folder, or ``environment/`` in Harbor's format."""
        return self.path / "environment" if self.format == "harbor" else self.path

    def expert_actions(self) -> list[str]:
        """The solution replayed as env actions, each with its own timeout, then ``mark_task_complete``.

        Example:
            >>> TerminalTask("t", Path("."), "x", solution=(SolutionStep("make", 600.0),)).expert_actions()
            ['run[timeout=600] make', 'mark_task_complete']
        """
        return [*(f"run[timeout={s.timeout_s:g}] {s.command}" for s in self.solution), "mark_task_complete"]


def load_task(path: str | Path) -> TerminalTask:
    """Read one task directory (``task.yaml`` or Harbor's ``task.toml``); raises :class:`TaskFormatError`
    with what is wrong."""
    path = Path(path)
    if (path / "task.toml").is_file() and not (path / "task.yaml").is_file():
        return _load_harbor(path)
    import yaml

    spec_file = path / "task.yaml"
    if not spec_file.is_file():
        raise TaskFormatError(f"{path}: no task.yaml or task.toml")
    try:
        spec = yaml.safe_load(spec_file.read_text()) or {}
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TaskFormatError(f"{spec_file}: {exc}") from exc
    if not isinstance(spec, dict):
        raise TaskFormatError(f"{spec_file}: must be a mapping")
    descriptions = spec.get("descriptions")
    instruction = spec.get("instruction") or (descriptions[0].get("description") if isinstance(descriptions, list)
                                              and descriptions and isinstance(descriptions[0], dict) else None)
    if not isinstance(instruction, str) or not instruction.strip():
        raise TaskFormatError(f"{spec_file}: 'instruction' must be a non-empty string")
    if not (path / "run-tests.sh").is_file() or not (path / "tests").is_dir():
        raise TaskFormatError(f"{path}: needs run-tests.sh and tests/")
    parser = spec.get("parser_name", "pytest")
    if parser not in PARSERS:
        raise UnknownChoiceError("test parser", parser, PARSERS)
    dockerfile = read_dockerfile(path / "Dockerfile") if (path / "Dockerfile").is_file() else ()
    workdir = next((s.args[0] for s in reversed(dockerfile) if s.op == "WORKDIR"), "/app")
    agent_timeout = _number(spec, "max_agent_timeout_sec", DEFAULT_AGENT_TIMEOUT_S, spec_file)
    return TerminalTask(
        task_id=path.name, path=path, instruction=instruction.strip(), max_agent_timeout_s=agent_timeout,
        max_test_timeout_s=_number(spec, "max_test_timeout_sec", DEFAULT_TEST_TIMEOUT_S, spec_file),
        parser_name=parser, difficulty=str(spec.get("difficulty", "")), category=str(spec.get("category", "")),
        tags=tuple(spec.get("tags") or ()), solution=_read_solution(path, agent_timeout), workdir=workdir,
        dockerfile=dockerfile, meta=spec)


def _number(spec: Mapping[str, Any], key: str, default: float, where: Path) -> float:
    try:
        value = float(spec.get(key, default))
    except (TypeError, ValueError) as exc:
        raise TaskFormatError(f"{where}: {key!r} must be a number") from exc
    if not value > 0:
        raise TaskFormatError(f"{where}: {key!r} must be positive")
    return value


def _load_harbor(path: Path) -> TerminalTask:
    """Harbor's format (Terminal-Bench 2.x), see the module docstring."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        try:
            import tomli as tomllib
        except ImportError as exc:
            raise TaskFormatError(f"{path}: reading task.toml needs Python >= 3.11 or `pip install tomli`") \
                from exc
    spec_file = path / "task.toml"
    try:
        spec = tomllib.loads(spec_file.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise TaskFormatError(f"{spec_file}: {exc}") from exc
    instruction_file = path / "instruction.md"
    instruction = instruction_file.read_text(errors="replace") if instruction_file.is_file() else ""
    if not instruction.strip():
        raise TaskFormatError(f"{path}: needs a non-empty instruction.md")
    if not (path / "tests" / "test.sh").is_file():
        raise TaskFormatError(f"{path}: needs tests/test.sh")
    sections = {k: spec.get(k) if isinstance(spec.get(k), dict) else {} for k in ("metadata", "agent", "verifier",
                                                                                  "environment")}
    meta = sections["metadata"]
    dockerfile_path = path / "environment" / "Dockerfile"
    dockerfile = read_dockerfile(dockerfile_path) if dockerfile_path.is_file() else ()
    workdir = next((s.args[0] for s in reversed(dockerfile) if s.op == "WORKDIR"), "/app")
    agent_timeout = _number(sections["agent"], "timeout_sec", DEFAULT_AGENT_TIMEOUT_S, spec_file)
    solve = path / "solution" / "solve.sh"
    solution = (SolutionStep(_harbor_solution_command(path / "solution"), agent_timeout),) if solve.is_file() \
        else ()
    environment = sections["environment"]
    return TerminalTask(
        task_id=path.name, path=path, instruction=instruction.strip(), max_agent_timeout_s=agent_timeout,
        max_test_timeout_s=_number(sections["verifier"], "timeout_sec", DEFAULT_TEST_TIMEOUT_S, spec_file),
        difficulty=str(meta.get("difficulty", "")), category=str(meta.get("category", "")),
        tags=tuple(meta.get("tags") or ()), solution=solution, workdir=workdir, dockerfile=dockerfile, meta=spec,
        format="harbor", cpus=_number(environment, "cpus", DEFAULT_CPUS, spec_file),
        memory_mb=int(_number(environment, "memory_mb", DEFAULT_MEMORY_MB, spec_file)))


HARBOR_SOLUTION_DIR = "/solution"


def _harbor_solution_command(solution_dir: Path) -> str:
    """Harbor's oracle uploads ``solution/`` to ``/solution`` and runs ``bash /solution/solve.sh`` (solve.sh
    may call files beside it): one shell command that unpacks the folder there, then runs it. The archive is
    byte-stable (sorted, no times or owners), so the expert action is the same in every process."""
    import base64
    import gzip
    import io
    import tarfile

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(fileobj=gz, mode="w") as tar:
        for p in sorted(solution_dir.rglob("*")):
            if not p.is_file() or "__pycache__" in p.parts or p.suffix == ".pyc":
                continue
            info = tarfile.TarInfo(str(p.relative_to(solution_dir)))
            data = p.read_bytes()
            info.size, info.mode = len(data), 0o755 if os.access(p, os.X_OK) or p.suffix == ".sh" else 0o644
            tar.addfile(info, io.BytesIO(data))
    payload = base64.encodebytes(buf.getvalue()).decode()
    d = HARBOR_SOLUTION_DIR
    return (f"mkdir -p {d} && base64 -d <<'R2V_SOLUTION' | tar -xzf - -C {d}\n{payload}R2V_SOLUTION\n"
            f"bash {d}/solve.sh")


def load_suite(root: str | Path = SHIPPED_TASKS_DIR) -> dict[str, TerminalTask]:
    """Every task directory (with a ``task.yaml`` or ``task.toml``) directly under ``root``, by name.

    Malformed tasks are skipped with one :class:`TaskFormatWarning` listing them (see :func:`scan_suite`).
    """
    tasks, skipped = scan_suite(root)
    if skipped:
        listing = "; ".join(f"{name}: {why}" for name, why in skipped.items())
        warnings.warn(f"skipped {len(skipped)} malformed task(s) under {root}: {listing}", TaskFormatWarning,
                      stacklevel=2)
    return tasks


def scan_suite(root: str | Path = SHIPPED_TASKS_DIR) -> tuple[dict[str, TerminalTask], dict[str, str]]:
    """``(tasks by name, {skipped task name: why})`` for the task directories directly under ``root``."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"terminal task suite {root} is not a directory")
    tasks: dict[str, TerminalTask] = {}
    skipped: dict[str, str] = {}
    for d in sorted(root.iterdir()):
        if not d.is_dir() or not ((d / "task.yaml").is_file() or (d / "task.toml").is_file()):
            continue
        try:
            tasks[d.name] = load_task(d)
        except (TaskFormatError, UnknownChoiceError, OSError) as exc:
            skipped[d.name] = str(exc).replace(str(d) + ": ", "").replace(str(d) + "/", "")
    return tasks, skipped


def _read_solution(path: Path, agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S) -> tuple[SolutionStep, ...]:
    """``solution.yaml`` steps with their own timeouts (``max_timeout_sec``, else Terminal-Bench's default
    180 s, at least ``min_timeout_sec``), or ``solution.sh`` as one step with the agent's whole budget."""
    import yaml

    if (path / "solution.yaml").is_file():
        try:
            steps = yaml.safe_load((path / "solution.yaml").read_text()) or []
        except yaml.YAMLError as exc:
            raise TaskFormatError(f"{path}/solution.yaml: {exc}") from exc
        if not isinstance(steps, list):
            raise TaskFormatError(f"{path}/solution.yaml must be a list of commands")
        out = []
        for s in steps:
            s = {"command": s} if isinstance(s, str) else s
            if not isinstance(s, dict) or "command" not in s:
                raise TaskFormatError(f"{path}/solution.yaml: each step needs a 'command'")
            try:
                low = float(s.get("min_timeout_sec") or 0)
                timeout = float(s.get("max_timeout_sec") or max(DEFAULT_STEP_TIMEOUT_S, low))
            except (TypeError, ValueError) as exc:
                raise TaskFormatError(f"{path}/solution.yaml: timeouts must be numbers") from exc
            out.append(SolutionStep(str(s["command"]).rstrip("\n"), max(timeout, low, 1.0),
                                    bool(s.get("block", True))))
        return tuple(out)
    if (path / "solution.sh").is_file():
        return (SolutionStep((path / "solution.sh").read_text(errors="replace").rstrip("\n"), agent_timeout_s),)
    return ()


