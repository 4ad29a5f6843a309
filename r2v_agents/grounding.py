"""Grounding: a language model's free-text reply becomes one action of the benchmark's action space.

A chat model rarely answers with the bare command ("You should try going south." instead of ``go south``);
played as it is, the env answers "That's not a verb I recognise." and the evaluation measures the parser, not
the model. :func:`ground` maps a reply onto an action with a fixed chain and says which link produced it
(:data:`GROUNDING_KINDS`), so a report can show how often the model was taken at its word:

1. the **candidate**: the text after an explicit ``Action:`` (the first such line; the next non-empty line when
   it is bare), else the content of the first fenced block, else the whole reply;
2. ``exact``: the candidate's first line is one of the admissible actions, character for character (outer
   quotes, backticks and a trailing full stop aside);
3. ``normalised``: equal after normalising both sides (case, articles, punctuation, simple word endings, so
   ``going`` reads as ``go``), or an admissible action appears word for word inside the normalised reply
   (the longest one, the earliest on ties);
4. ``similar``: the admissible action whose normalised text is most similar to the candidate's first line
   (difflib ratio) when that similarity is at least ``threshold`` (:data:`DEFAULT_THRESHOLD`);
5. ``raw``: the candidate's first non-empty line as it is: no silent best guess, the env judges it (and the
   report counts it as invalid when it is not an action, :func:`is_invalid`);
6. ``empty``: the reply holds no text.

Benchmarks without a list of concrete actions ground by their syntax instead: R2V/HumanEval-v0 takes a valid
command as it is (``exact``) and the fenced code of a prose reply as ``write_code`` (``normalised``);
R2V/TerminalBench-v0 takes ``run <cmd>`` / ``mark_task_complete`` as they are (``exact``) and a fenced or
``$``-prefixed command as ``run <cmd>`` (``normalised``).

Example:
    >>> ground("You're right! You should try going south.", ["go south", "inventory", "look"])
    Grounded(action='go south', kind='normalised')
    >>> ground("take the Coin", ["take coin", "look"]), ground("look", ["take coin", "look"]).kind
    (Grounded(action='take coin', kind='normalised'), 'exact')
    >>> ground("I think so.\\nAction: go to fridge 1", ["go to fridge 1", "go to sinkbasin 1"]).kind
    'exact'
    >>> ground("dance wildly", ["go south", "look"])
    Grounded(action='dance wildly', kind='raw')
    >>> ground("Here it is:\\n```python\\nreturn a + b\\n```", None, "humaneval")
    Grounded(action='write_code\\n```python\\nreturn a + b\\n```', kind='normalised')
    >>> ground("First list the files:\\n$ ls -la", None, "terminalbench")
    Grounded(action='run ls -la', kind='normalised')
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Sequence
from dataclasses import dataclass

from r2v_agents.prompts import FENCE, parse_completion
from r2v_envs.humaneval.actions import extract_code, parse_action

GROUNDING_KINDS = ("exact", "normalised", "similar", "raw", "empty")
"""How :func:`ground` obtained an action, from most to least literal."""
LIKELIHOOD = "likelihood"
"""The grounding recorded for a step whose action was chosen among the admissible ones by likelihood."""
DEFAULT_THRESHOLD = 0.75
"""Least difflib similarity for a ``similar`` match: one wrong character in a short command passes
("go sooth" -> "go south", 0.88), a different object does not ("take apple" vs "take coin", 0.63)."""
CODE_BENCHMARKS = frozenset({"humaneval"})
TERMINAL_BENCHMARKS = frozenset({"terminalbench"})
TERMINAL_COMPLETE = "mark_task_complete"

_ACTION_LINE = re.compile(r"^[\s*_>#`-]*action\s*[:：]\s*(.*)$", re.I | re.M)
_FENCED = re.compile(r"```[ \t]*[A-Za-z0-9_+-]*[ \t]*\n(.*?)(?:```|\Z)", re.S)
_WORD = re.compile(r"[a-z0-9]+")
_ARTICLES = frozenset({"a", "an", "the"})
_SHELL_LINE = re.compile(r"^\s*\$\s+(\S.*)$", re.M)
_RUN = re.compile(r"^run(?:\[[^\]]*\])?\s+\S", re.S)
_PREAMBLE = re.compile(r"^[\s*_#>-]*(thought|thinking|reasoning|plan)\s*:", re.I)


@dataclass(frozen=True)
class Grounded:
    """An action and how it was obtained (one of :data:`GROUNDING_KINDS`)."""

    action: str
    kind: str


def stem(word: str) -> str:
    """A crude stem that makes inflections of one verb or noun meet (``going``/``goes`` -> ``go``).

    Example:
        >>> [stem(w) for w in ("going", "goes", "go", "taking", "take", "apples", "opened", "south")]
        ['go', 'go', 'go', 'tak', 'tak', 'appl', 'open', 'south']
    """
    for suffix in ("ing", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 2:
            word = word[:-len(suffix)]
            break
    return word[:-1] if word.endswith("e") and len(word) > 3 else word


def normalise(text: str) -> tuple[str, ...]:
    """The words of ``text`` as the ``normalised`` link compares them: lower case, articles and punctuation
    dropped, each word stemmed (:func:`stem`).

    Example:
        >>> normalise("Take the Red apple, from the counter-top!")
        ('tak', 'red', 'appl', 'from', 'counter', 'top')
    """
    return tuple(stem(w) for w in _WORD.findall(text.lower()) if w not in _ARTICLES)


def candidate_text(reply: str) -> str:
    """The part of ``reply`` that names the action (step 1 of the chain in the module doc)."""
    m = _ACTION_LINE.search(reply)
    if m:
        rest = m.group(1).strip()
        if rest:
            return rest
        after = reply[m.end():].strip()
        if after:
            return after
    f = _FENCED.search(reply)
    if f and f.group(1).strip():
        return f.group(1)
    return reply


def _first_line(text: str) -> str:
    """The first non-empty line, outer quotes/backticks and one closing full stop dropped."""
    line = parse_completion(text)
    if line.endswith(".") and not line.endswith(".."):
        line = line[:-1].strip("`'\"").strip()
    return line


def _contained(words: tuple[str, ...], options: Sequence[tuple[str, ...]]) -> int | None:
    """Index of the longest option occurring word for word in ``words`` (earliest occurrence on ties)."""
    best: tuple[int, int, int] | None = None  # (-length, position, index)
    for i, opt in enumerate(options):
        n = len(opt)
        if n == 0 or n > len(words):
            continue
        pos = next((p for p in range(len(words) - n + 1) if words[p:p + n] == opt), None)
        if pos is not None and (best is None or (-n, pos, i) < best):
            best = (-n, pos, i)
    return None if best is None else best[2]


def ground_admissible(reply: str, admissible: Sequence[str], threshold: float = DEFAULT_THRESHOLD) -> Grounded:
    """Steps 1-6 of the chain against a list of concrete actions."""
    if not reply.strip():
        return Grounded("", "empty")
    cand = candidate_text(reply)
    line = _first_line(cand)
    if line in admissible:
        return Grounded(line, "exact")
    options = [normalise(a) for a in admissible]
    for words in (normalise(line), normalise(cand), normalise(reply)):
        if words in options:
            return Grounded(admissible[options.index(words)], "normalised")
        i = _contained(words, options)
        if i is not None:
            return Grounded(admissible[i], "normalised")
    key = " ".join(normalise(line))
    if key and options:
        ratios = [difflib.SequenceMatcher(None, key, " ".join(o)).ratio() for o in options]
        best = max(range(len(ratios)), key=lambda k: (ratios[k], -k))
        if ratios[best] >= threshold:
            return Grounded(admissible[best], "similar")
    return Grounded(line, "raw") if line else Grounded(reply.strip(), "raw")


def ground_code(reply: str) -> Grounded:
    """HumanEval+: a valid command as it is; else the fenced code of a prose reply as ``write_code``; else a
    ``test``/``submit`` the reply names; else the reply as it is."""
    if not reply.strip():
        return Grounded("", "empty")
    text = reply.strip()
    m = _ACTION_LINE.match(text)
    if m:  # "Action: test" or "Action:\nwrite_code ..." names the command explicitly
        text = text[m.start(1):].strip()
    if parse_action(text).command is not None:
        return Grounded(parse_completion(text, style="block"), "exact")
    code = extract_code(reply)
    if code is not None:
        return Grounded(f"write_code\n{FENCE}python\n{code}\n{FENCE}", "normalised")
    g = ground_admissible(reply, ("test", "submit"))
    if g.kind in ("normalised", "similar"):
        return g
    return Grounded(parse_completion(reply, style="block"), "raw")


def ground_terminal(reply: str) -> Grounded:
    """TerminalBench: ``run <cmd>`` / ``mark_task_complete`` as they are; a fenced or ``$``-prefixed command as
    ``run <cmd>``; else the first line as it is."""
    if not reply.strip():
        return Grounded("", "empty")
    cand = candidate_text(reply) if _ACTION_LINE.search(reply) else reply
    line = _first_line(cand)
    if _RUN.match(line.strip()) or line.strip() == TERMINAL_COMPLETE:
        return Grounded(line.strip(), "exact")
    f = _FENCED.search(reply)
    if f and f.group(1).strip():
        cmd = "\n".join(ln.removeprefix("$ ") for ln in f.group(1).strip("\n").splitlines())
        return Grounded(f"run {cmd.strip()}", "normalised")
    s = _SHELL_LINE.search(reply)
    if s:
        return Grounded(f"run {s.group(1).strip()}", "normalised")
    if _contained(normalise(reply), [normalise("mark task complete")]) is not None:
        return Grounded(TERMINAL_COMPLETE, "normalised")
    return Grounded(line, "raw")


def reply_complete(text: str) -> bool:
    """Whether a one-line-action reply being generated can stop: it holds a finished line with text that does
    not announce more (a line ending in ``:`` or a ``Thought:``/``Reasoning:`` line, after which an ``Action:``
    line may follow). Generating past it only costs time: the chain reads the first such line.

    Example:
        >>> reply_complete("go south\\n"), reply_complete("go south"), reply_complete("Thought: dark.\\nAction:")
        (True, False, False)
    """
    for line in text.split("\n")[:-1]:
        line = line.strip()
        if line and not line.endswith(":") and not _PREAMBLE.match(line):
            return True
    return False


def ground(reply: str, admissible: Sequence[str] | None = None, benchmark: str = "",
           threshold: float = DEFAULT_THRESHOLD) -> Grounded:
    """The action for a model's ``reply`` at a step that lists ``admissible`` actions (None: not listed) on
    ``benchmark`` (the env's ``benchmark`` name), by the chain of the module doc."""
    if benchmark in CODE_BENCHMARKS:
        return ground_code(reply)
    if benchmark in TERMINAL_BENCHMARKS:
        return ground_terminal(reply)
    if admissible:
        return ground_admissible(reply, list(admissible), threshold)
    if not reply.strip():
        return Grounded("", "empty")
    return Grounded(_first_line(candidate_text(reply)), "raw")


def is_invalid(action: str, admissible: Sequence[str] | None, benchmark: str = "") -> bool | None:
    """Whether a played ``action`` is not an action of the benchmark (the env can only answer it with
    feedback such as "That's not a verb I recognise."); None when that cannot be told (no list, no syntax).

    Lists of concrete actions (TextWorld, ALFWorld) decide by membership (case and spacing aside, as the
    engines read commands); HumanEval+ and TerminalBench by their command syntax.

    Example:
        >>> is_invalid("Go  South", ["go south", "look"]), is_invalid("go north", ["go south"])
        (False, True)
        >>> is_invalid("submit", None, "humaneval"), is_invalid("please run", None, "humaneval")
        (False, True)
        >>> is_invalid("run ls", None, "terminalbench"), is_invalid("ls", None, "terminalbench")
        (False, True)
    """
    if benchmark in CODE_BENCHMARKS:
        act = parse_action(action)
        return act.command is None or (act.command == "write_code" and act.code is None)
    if benchmark in TERMINAL_BENCHMARKS:
        text = action.strip()
        return not (_RUN.match(text) or " ".join(text.lower().split()) in (TERMINAL_COMPLETE, "mark task complete"))
    if not admissible:
        return None
    key = " ".join(action.lower().split())
    return key not in {" ".join(a.lower().split()) for a in admissible}
