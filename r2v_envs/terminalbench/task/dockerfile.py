r"""A task's Dockerfile as the local backend reads it: instructions in order, continuations joined, ``RUN`` heredocs
kept whole, ``ENV``/``ARG`` assignments split, and Docker's variable expansion (:func:`expand_vars`).

Example:
    >>> import tempfile, pathlib
    >>> f = pathlib.Path(tempfile.mkdtemp()) / "Dockerfile"
    >>> _ = f.write_text('FROM python:3.12\nENV A=1 B="x y"\nRUN echo a \\\n  b\nWORKDIR /app\n')
    >>> [(s.op, s.args) for s in read_dockerfile(f)]
    [('FROM', ('python:3.12',)), ('ENV', ('A', '1', 'B', 'x y')), ('RUN', ('echo a    b',)), ('WORKDIR', ('/app',))]
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from r2v_envs.errors import R2VError


class TaskFormatError(R2VError, ValueError):
    """A task directory that does not follow Terminal-Bench's format."""


@dataclass(frozen=True)
class DockerfileStep:
    """One instruction of the task's Dockerfile; the local backend interprets ``COPY``/``ADD``, ``RUN``,
    ``WORKDIR``, ``ENV`` and ``ARG`` (:mod:`r2v_envs.terminalbench.backends.build`); ``FROM`` and the rest are the
    host's business."""

    op: str
    args: tuple[str, ...]



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


def read_dockerfile(path: Path) -> tuple[DockerfileStep, ...]:
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
                args = [str(a) for a in json.loads(rest)]
            steps.append(DockerfileStep(op, tuple(args)))
        elif op in ("RUN", "WORKDIR", "USER"):
            if op == "RUN" and rest.startswith("["):  # exec form: ["executable", "arg", ...]
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
