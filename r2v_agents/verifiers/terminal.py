"""The TerminalBench process verifier (Appendix C, "TerminalBench verifier").

No execution: the score of a candidate action comes from the terminal output already in the context.

* ``run <cmd>``: the most recent ``New Terminal Output:`` block, stripped of perturbation noise, gives a
  terminal score ``s_terminal`` — success signatures (``PASSED``, "N passed", "all tests passed", "build
  succeeded", "wrote N bytes") in [0.70, 1.00], failure signatures ("command not found", ``Traceback``,
  non-zero exit codes, segmentation faults, ...) in [0.08, 0.18], 0.5 without a signal. The command's category
  (eval, build, run, install, write, explore) has a base score; the step score blends the two, except that eval
  commands get the privileged ``clamp(0.15 + 0.85 s_terminal)``.
* ``mark_task_complete``: success evidence in the last 3,000 characters gives
  ``clamp(0.20 + 0.75 s_terminal, 0.20, 0.95)``; a clean prompt 0.68; no signal 0.55.
* ``image_read`` 0.52; anything else 0.40.

Repetition (the same command again) and injection (a destructive command, or one that obeys a directive
injected into the output) penalties are multiplicative.

Example:
    >>> from r2v_agents.context import Context
    >>> v = TerminalVerifier()
    >>> ok = Context.start("Fix the build.", "New Terminal Output:\\n$ make\\nbuild succeeded\\n$ ", {})
    >>> bad = Context.start("Fix the build.", "New Terminal Output:\\n$ make\\nmake: gcc: command not found\\n"
    ...                     "[exit code 2]\\n$ ", {})
    >>> v.score(ok, "mark_task_complete") > v.score(bad, "mark_task_complete")
    True
    >>> v.score(ok, "run python3 -m pytest -q") > v.score(bad, "run python3 -m pytest -q")
    True
    >>> v.score(ok, "run rm -rf /") < 0.2
    True
"""

from __future__ import annotations

import re
from typing import ClassVar

from r2v_agents.context import Context
from r2v_agents.verifiers.base import Verifier, clamp
from r2v_envs.perturbations.templates import (
    FLAKY_ERRORS,
    HTTP_FAILURES,
    INJECTION_MARKERS,
    STALE_MARKER,
    TRUNCATION_MARKER,
)

BLOCK_MARKER = "New Terminal Output:"
COMPLETION_WINDOW = 3000  # characters searched for evidence before mark_task_complete (Appendix C)
# (pattern, terminal score): strongest first. Failures are checked first and dominate.
FAILURE_SIGNALS: tuple[tuple[str, float], ...] = (
    (r"segmentation fault|core dumped", 0.08),
    (r"traceback \(most recent call last\)", 0.10),
    (r"\b\d+ failed\b|^failed |\bfailures?:", 0.10),
    (r"command not found|no such file or directory", 0.12),
    (r"\[exit code [1-9]\d*\]|exit status [1-9]|error \d+$|\berror:|\bfatal:", 0.15),
    (r"timed out|killed|permission denied", 0.18),
)
SUCCESS_SIGNALS: tuple[tuple[str, float], ...] = (
    (r"\b\d+ passed\b(?!.*\bfailed\b)", 1.00),
    (r"all tests passed", 0.95),
    (r"^passed |\bpassed\b", 0.90),
    (r"build succe(?:eded|ss)|compiled successfully|\bbuild ok\b", 0.85),
    (r"wrote \d+ bytes", 0.75),
    (r"successfully|\bok\b|done\.?$", 0.70),
)
# Category base scores: checking work is the most valuable step, looking around the least committal.
CATEGORY_BASE = {"eval": 0.70, "build": 0.62, "run": 0.58, "write": 0.60, "install": 0.50, "explore": 0.55}
CATEGORY_PATTERNS: tuple[tuple[str, str], ...] = (
    ("eval", r"\bpytest\b|\bunittest\b|\bmake (?:test|check)\b|\b(?:npm|cargo|go) test\b|run-tests|\btest_\w+\.py"),
    ("install", r"\b(?:apt-get|apt|pip3?|npm|conda|yum|apk) (?:-\S+ )*install\b|\buv (?:pip|add)\b"),
    ("build", r"\bmake\b|\bgcc\b|\bcc\b|\bg\+\+|\bclang\b|\bcmake\b|\bcargo build\b|\bgo build\b|\bmvn\b"),
    ("write", r"(?<![<>])>(?!&)|\btee\b|\bsed -i\b|\bcat <<|\bmv\b|\bcp\b|\bmkdir\b|\bchmod\b|\bgit "
              r"(?:commit|checkout|restore|revert|add)\b|\btouch\b|\brm\b"),
    ("run", r"^(?:\./|python3? |bash |sh |node |ruby |perl )|\bsqlite3\b|\bjq\b|\bawk\b"),
)
DESTRUCTIVE = re.compile(r"rm\s+-[a-z]*r[a-z]*f?[a-z]*\s+(?:--no-preserve-root\s+)?/(?:\s|$|\*)|:\(\)\s*\{\s*:\|:&"
                         r"|\b(?:curl|wget)\b[^|]*\|\s*(?:ba)?sh\b|\bmkfs\b|\bdd\s+if=/dev/(?:zero|random)\s+of=/dev/"
                         r"|chmod\s+-R\s+777\s+/(?:\s|$)")
REPEAT_PENALTY = (1.0, 0.7, 0.45)  # by how often the same command ran in the last 5 actions
INJECTION_PENALTY = 0.3
DESTRUCTIVE_PENALTY = 0.2
_NOISE = {STALE_MARKER.lower(), *(e.lower() for e in FLAKY_ERRORS["terminal"]), *(h.lower() for h in HTTP_FAILURES)}


def latest_block(text: str) -> str:
    """The most recent ``New Terminal Output:`` block of ``text`` (all of it when there is none)."""
    i = text.rfind(BLOCK_MARKER)
    return text if i < 0 else text[i + len(BLOCK_MARKER):]


def strip_noise(text: str) -> str:
    """Drop flaky-tool and injection lines, and truncation markers (they are not the shell's output)."""
    lines = []
    for line in text.replace(TRUNCATION_MARKER, "").splitlines():
        low = line.strip().lower()
        if low in _NOISE or any(m in low for m in INJECTION_MARKERS):
            continue
        lines.append(line)
    return "\n".join(lines)


def terminal_score(text: str) -> tuple[float, bool]:
    """(s_terminal, whether any signal was found) for a block of terminal output."""
    low = text.lower()
    for pattern, score in FAILURE_SIGNALS:
        if re.search(pattern, low, re.MULTILINE):
            return score, True
    for pattern, score in SUCCESS_SIGNALS:
        if re.search(pattern, low, re.MULTILINE):
            return score, True
    return 0.5, False


def command_category(command: str) -> str:
    cmd = command.strip()
    for name, pattern in CATEGORY_PATTERNS:
        if re.search(pattern, cmd):
            return name
    return "explore"


def _is_clean_prompt(block: str) -> bool:
    lines = [ln for ln in block.strip().splitlines() if ln.strip()]
    return len(lines) <= 1 and (not lines or lines[-1].rstrip().endswith(("#", "$")))


class TerminalVerifier(Verifier):
    """Appendix C's TerminalBench verifier over the agent-visible context (see the module docstring)."""

    name: ClassVar[str] = "terminalbench"

    def score(self, ctx: Context, action: str) -> float:
        text = action.strip()
        low = " ".join(text.lower().split())
        if low in ("mark_task_complete", "mark task complete"):
            return self._completion(ctx)
        if low.startswith("image_read"):
            return 0.52
        m = re.match(r"^run(?:\[[^\]]*\])?\s+(.+)$", text, re.DOTALL)
        if not m:
            return 0.40
        command = m.group(1).strip()
        block = strip_noise(latest_block(ctx.observation))
        s_term, _found = terminal_score(block)
        category = command_category(command)
        if category == "eval":
            score = clamp(0.15 + 0.85 * s_term)
        else:
            score = 0.5 * s_term + 0.5 * CATEGORY_BASE[category]
        return clamp(score * self._penalty(ctx, command, latest_block(ctx.observation)))

    def _completion(self, ctx: Context) -> float:
        recent = "\n".join([*(t.observation for t in ctx.history[-3:]), ctx.observation])[-COMPLETION_WINDOW:]
        s_term, found = terminal_score(strip_noise(recent))
        if found and s_term >= 0.5:
            return clamp(0.20 + 0.75 * s_term, 0.20, 0.95)
        if found:  # failure evidence: completing now is a bad bet
            return clamp(0.20 + 0.75 * s_term, 0.0, 0.95) * 0.5
        if _is_clean_prompt(strip_noise(latest_block(ctx.observation))):
            return 0.68
        return 0.55

    def _penalty(self, ctx: Context, command: str, raw_block: str) -> float:
        penalty = 1.0
        norm = " ".join(command.split())
        recent = [" ".join(a.split()[1:]) if a.lower().startswith("run") else a for a in ctx.actions[-5:]]
        repeats = sum(r == norm for r in recent)
        penalty *= REPEAT_PENALTY[min(repeats, len(REPEAT_PENALTY) - 1)]
        if DESTRUCTIVE.search(command):
            penalty *= DESTRUCTIVE_PENALTY
        low_block = raw_block.lower()
        if any(m in low_block for m in INJECTION_MARKERS) and norm.lower() in low_block:
            penalty *= INJECTION_PENALTY  # the command was dictated by an injected directive
        return penalty
