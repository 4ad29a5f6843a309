"""Terminal-Bench tasks in both of its directory formats.

* Original (Terminal-Bench 0.x/1.x): ``task.yaml`` (``instruction``, ``max_agent_timeout_sec``,
  ``max_test_timeout_sec``, ``parser_name``, ...), a ``Dockerfile`` (``WORKDIR /app``) and/or
  ``docker-compose.yaml``, ``run-tests.sh``, ``solution.sh`` or ``solution.yaml`` (a list of ``{command,
  min_timeout_sec, max_timeout_sec, block}``) and ``tests/``.
* Harbor (Terminal-Bench 2.x): ``task.toml`` (``[agent] timeout_sec``, ``[verifier] timeout_sec``,
  ``[metadata]``), ``instruction.md``, ``environment/`` (the Docker build context with its ``Dockerfile``),
  ``tests/test.sh`` and ``solution/solve.sh``.

A suite is any directory of such task directories, in either format: the shipped one
(``r2v_envs/terminalbench/shipped_tasks``) or a clone of a task repository. :func:`load_suite` skips malformed tasks with
one :class:`TaskFormatWarning` that lists them.

Success is judged from the judge's own record of its pytest runs (:mod:`r2v_envs.terminalbench.runtime`) with
pytest's semantics (:func:`tests_passed`): resolved when at least one test ran and none failed or errored. :func:`parse_pytest_summary` reads
pytest's printed "short test summary info" (``-rA``), for display only: printed text can be forged.

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

import os
import re
import shlex
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from r2v_envs.errors import R2VError, UnknownChoiceError

FORMATS = ("terminal-bench", "harbor")

SHIPPED_TASKS_DIR = Path(__file__).parent / "shipped_tasks"
DEFAULT_AGENT_TIMEOUT_S = 360.0  # Terminal-Bench's defaults
DEFAULT_TEST_TIMEOUT_S = 60.0
DEFAULT_STEP_TIMEOUT_S = 180.0  # Terminal-Bench's TerminalCommand.max_timeout_sec default
_SUMMARY_HEADER = re.compile(r"=+ short test summary info =+")
_SUMMARY_LINE = re.compile(r"^(PASSED|FAILED|ERROR|XFAIL|XPASS|SKIPPED)\s+(\S+)")
PARSERS = ("pytest",)


class TaskFormatError(R2VError, ValueError):
    """A task directory that does not follow Terminal-Bench's format."""


class TaskFormatWarning(UserWarning):
    """Malformed task directories were skipped while loading a suite."""


@dataclass(frozen=True)
class SolutionStep:
    command: str
    timeout_s: float = 30.0
    block: bool = True


@dataclass(frozen=True)
class DockerfileStep:
    """One instruction of the task's Dockerfile; the local backend interprets ``COPY``/``ADD``, ``RUN``,
    ``WORKDIR``, ``ENV`` and ``ARG`` (:mod:`r2v_envs.terminalbench.build`); ``FROM`` and the rest are the host's
    business."""

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
    format: str = "terminal-bench"

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
    dockerfile = _read_dockerfile(path / "Dockerfile") if (path / "Dockerfile").is_file() else ()
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
    dockerfile = _read_dockerfile(dockerfile_path) if dockerfile_path.is_file() else ()
    workdir = next((s.args[0] for s in reversed(dockerfile) if s.op == "WORKDIR"), "/app")
    agent_timeout = _number(sections["agent"], "timeout_sec", DEFAULT_AGENT_TIMEOUT_S, spec_file)
    solve = path / "solution" / "solve.sh"
    solution = (SolutionStep(_harbor_solution_command(path / "solution"), agent_timeout),) if solve.is_file() \
        else ()
    return TerminalTask(
        task_id=path.name, path=path, instruction=instruction.strip(), max_agent_timeout_s=agent_timeout,
        max_test_timeout_s=_number(sections["verifier"], "timeout_sec", DEFAULT_TEST_TIMEOUT_S, spec_file),
        difficulty=str(meta.get("difficulty", "")), category=str(meta.get("category", "")),
        tags=tuple(meta.get("tags") or ()), solution=solution, workdir=workdir, dockerfile=dockerfile, meta=spec,
        format="harbor")


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


_HEREDOC = re.compile(r"(?<!<)<<-?(?!<)\s*(['\"]?)([A-Za-z_][\w-]*)\1")


def _logical_lines(text: str) -> list[str]:
    """Dockerfile lines with continuations joined and ``RUN`` heredocs (``<<'EOF' ... EOF``) kept whole."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        while line.endswith("\\") and i < len(lines):
            nxt = lines[i]
            i += 1
            if not nxt.lstrip().startswith("#"):  # comment lines inside a continued instruction are dropped
                line = line[:-1] + " " + nxt
        for m in _HEREDOC.finditer(line):
            body = []
            while i < len(lines) and lines[i].strip() != m.group(2):
                body.append(lines[i])
                i += 1
            i += 1
            line += "\n" + "\n".join(body) + "\n" + m.group(2)
        out.append(line.strip())
    return out


def _read_dockerfile(path: Path) -> tuple[DockerfileStep, ...]:
    """The instructions the local backend interprets, in order: ``COPY``/``ADD`` (sources..., dest),
    ``RUN`` (the shell text, heredocs included), ``WORKDIR``, ``ENV`` (name, value, name, value, ...; values
    unexpanded), ``ARG`` (name[, default]); every other instruction (``FROM``, ``USER``, ``CMD``, ...) is kept
    with its text, so step numbers match the file."""
    steps = []
    for line in _logical_lines(path.read_text(errors="replace")):
        op, _, rest = line.partition(" ")
        op, rest = op.upper(), rest.strip()
        if op in ("COPY", "ADD"):
            try:
                args = [a for a in shlex.split(rest) if not a.startswith("--")]
            except ValueError as exc:
                raise TaskFormatError(f"{path}: cannot parse `{line[:200]}`: {exc}") from exc
            if rest.startswith("["):  # the JSON form
                import json

                args = [str(a) for a in json.loads(rest)]
            steps.append(DockerfileStep(op, tuple(args)))
        elif op in ("RUN", "WORKDIR", "USER"):
            if op == "RUN" and rest.startswith("["):  # exec form: ["executable", "arg", ...]
                import json

                rest = " ".join(shlex.quote(str(a)) for a in json.loads(rest))
            steps.append(DockerfileStep(op, (rest,)))
        elif op in ("ENV", "ARG"):
            steps.append(DockerfileStep(op, _assignments(op, rest, path)))
        else:  # FROM, CMD, EXPOSE, ...: kept (ignored) so steps are numbered as in the file
            steps.append(DockerfileStep(op, (rest,)))
    return tuple(steps)


def _assignments(op: str, rest: str, path: Path) -> tuple[str, ...]:
    """``ENV a=1 b="x y"`` -> (a, 1, b, x y); legacy ``ENV a x y`` -> (a, x y); ``ARG n[=d]`` -> (n[, d])."""
    first = rest.split(None, 1)[0] if rest.split() else ""
    if op == "ENV" and "=" not in first:
        key, _, value = rest.partition(" ")
        return key.strip(), value.strip()
    try:
        words = shlex.split(rest, posix=True) if "$" not in rest else _split_keep_dollars(rest)
    except ValueError as exc:
        raise TaskFormatError(f"{path}: cannot parse `{op} {rest[:200]}`: {exc}") from exc
    out: list[str] = []
    for word in words:
        key, eq, value = word.partition("=")
        out += [key, value] if eq or op == "ENV" else [key]
        if op == "ARG":
            break  # one ARG per instruction (Docker allows several; none of ours needs them)
    return tuple(out)


def _split_keep_dollars(text: str) -> list[str]:
    # shlex drops nothing but quotes; `$` is kept verbatim for the backend's Docker-style expansion
    lex = shlex.shlex(text, posix=True)
    lex.whitespace_split = True
    lex.escape = ""
    return list(lex)


_VAR = re.compile(r"(?P<esc>\\\$)|\$\{(?P<braced>\w+)(?::(?P<op>[-+])(?P<word>[^}]*))?\}|\$(?P<plain>\w+)")


def expand_vars(text: str, env: Mapping[str, str]) -> str:
    r"""Docker's variable substitution in ``ENV``, ``ARG``, ``COPY``, ``WORKDIR``: ``$VAR``, ``${VAR}``,
    ``${VAR:-default}``, ``${VAR:+alternative}``; ``\$`` is a literal dollar; unset variables are empty.

    Example:
        >>> expand_vars("/opt/v/bin:${PATH}", {"PATH": "/usr/bin"})
        '/opt/v/bin:/usr/bin'
        >>> expand_vars(r"${A:-x}-${B:+y}-$C-\$D", {"B": "1", "C": "c"})
        'x-y-c-$D'
    """
    def sub(m: re.Match) -> str:
        if m.group("esc"):
            return "$"
        value = env.get(m.group("braced") or m.group("plain"), "")
        if m.group("op") == "-":
            return value or m.group("word")
        if m.group("op") == "+":
            return m.group("word") if value else ""
        return value

    return _VAR.sub(sub, text)


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
    """pytest's own verdict (exit status 0 with tests run): resolved when at least one test ran (passed,
    xfailed or xpassed) and none failed or errored; skipped tests neither fail nor resolve a task. An empty
    report fails. ``xpass`` under ``strict`` arrives as ``failed``, as pytest reports it.

    Example:
        >>> tests_passed({"a": "passed", "b": "skipped"}), tests_passed({"a": "skipped"})
        (True, False)
        >>> tests_passed({"a": "passed", "b": "xfailed", "c": "xpassed"}), tests_passed({"a": "passed", "b": "error"})
        (True, False)
    """
    statuses = {_ALIASES.get(s, s) for s in results.values()}
    return bool(statuses & {"passed", "xfailed", "xpassed"}) and not statuses & {"failed", "error"}


_ALIASES = {"xfail": "xfailed", "xpass": "xpassed"}  # parse_pytest_summary's words
