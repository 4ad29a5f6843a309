"""The action syntax of R2V/HumanEval-v0 (forgiving) and how code becomes a complete solution.

Three commands, case-insensitive, optionally followed by ``:`` or wrapped as a call:

* ``write_code`` + code: the code in a fenced block (```` ```python ... ``` ````) or, without a fence,
  everything after the command. Saves the code as the current solution.
* ``test``: runs the current solution on the task's public examples and shows the runner's output.
* ``submit``: judges the current solution on the full HumanEval+ suite and ends the episode.

``test`` or ``submit`` followed by a code block first saves that code. A bare fenced block counts as
``write_code``. Aliases: ``write``/``code``/``edit`` for ``write_code``, ``run_tests``/``run`` for ``test``,
``finish``/``final`` for ``submit``.

The code may be the whole function (``def entry_point(...)``, plus helpers and imports) or only its
body; either way it is appended to the task prompt, so the prompt's imports and helper functions exist.

Example:
    >>> parse_action("write_code\\n```python\\ndef f(x):\\n    return x\\n```")
    Action(command='write_code', code='def f(x):\\n    return x')
    >>> parse_action("  SUBMIT ")
    Action(command='submit', code=None)
    >>> parse_action("please run it").command is None
    True
    >>> print(assemble_solution("def f(x):\\n    \\"\\"\\"Doc.\\"\\"\\"\\n", "f", "return x + 1"))
    def f(x):
        \"\"\"Doc.\"\"\"
        return x + 1
    <BLANKLINE>
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

COMMANDS = ("write_code", "test", "submit")
ALIASES = {
    "write_code": "write_code", "write": "write_code", "code": "write_code", "edit": "write_code",
    "writecode": "write_code", "test": "test", "tests": "test", "run_tests": "test", "run": "test",
    "submit": "submit", "finish": "submit", "final": "submit",
}
# Templates offered as info["admissible_actions"]: the three commands, code left as a placeholder.
ACTION_TEMPLATES = ("write_code\n```python\n<your code>\n```", "test", "submit")
SYNTAX_HELP = (
    "Actions:\n"
    "  write_code  followed by your code in a fenced block, e.g.\n"
    "      write_code\n      ```python\n      def f(x):\n          return x\n      ```\n"
    "      (the whole function or only its body; it is added after the task prompt)\n"
    "  test        run the saved code on the public examples\n"
    "  submit      submit the saved code for final judging (ends the episode)"
)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[ \t]*\n(.*?)(?:```|\Z)", re.S)
_COMMAND = re.compile(r"^\s*[`*]*([A-Za-z_]+)[`*]*\s*(?:[:(]|\s|$)")


@dataclass(frozen=True)
class Action:
    command: str | None  # one of COMMANDS, or None when the text is not a valid action
    code: str | None = None


def extract_code(text: str) -> str | None:
    """The first fenced code block of ``text`` (an unclosed fence runs to the end), or None."""
    m = _FENCE.search(text)
    if not m:
        return None
    return m.group(2).strip("\n").rstrip() or None


def parse_action(text: str) -> Action:
    """Read an agent's action; see the module doc for the syntax."""
    m = _COMMAND.match(text)
    word = m.group(1).lower() if m else ""
    command = ALIASES.get(word)
    if command is None:
        if text.lstrip().startswith("```"):
            code = extract_code(text)
            return Action("write_code", code) if code else Action(None)
        return Action(None)
    rest = text[m.end():] if m else ""
    code = extract_code(rest)
    if code is None and command == "write_code":
        body = rest.strip()
        if body.endswith(")") and text[m.end() - 1:m.end()] == "(":
            body = body[:-1]
        code = textwrap.dedent(body.strip("\n")).rstrip() or None  # None: the env explains what is missing
    return Action(command, code)


def defines(code: str, name: str) -> bool:
    """Whether ``code`` defines a top-level-looking function ``name``."""
    return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None


def assemble_solution(prompt: str, entry_point: str, code: str) -> str:
    """The complete program judged for ``code``: the prompt, then the code (a whole function redefines the
    prompt's stub; a bare body is indented under it)."""
    if defines(code, entry_point):
        return f"{prompt.rstrip()}\n\n\n{textwrap.dedent(code).strip()}\n"
    body = textwrap.dedent(code).strip("\n")
    return prompt.rstrip("\n") + "\n" + textwrap.indent(body, "    ") + "\n"
