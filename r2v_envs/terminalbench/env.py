"""R2V/TerminalBench-v0: Terminal-Bench tasks in a sandboxed shell (Sec. 5.1, Appendix C).

Actions (text):

* ``run <command>`` — run a shell command (multi-line scripts allowed) in the task's persistent session
  (``cd`` and ``export`` carry over); it blocks until the command exits or its timeout passes, then the whole
  process tree is killed. ``run[timeout=N] <command>`` sets the timeout (default ``command_timeout_s``,
  capped by what is left of the task's ``max_agent_timeout_sec``).
* ``mark_task_complete`` — end the episode: the task's tests run from a fresh root-owned copy in a fresh
  shell, under the offline test runtime, and the judge's own record of its pytest runs decides with pytest's
  semantics (at least one test ran, none failed or errored; skips count for neither; see
  docs/terminalbench.md for the verdict channel). ``info["outcome"]`` types the end: ``resolved``, ``unresolved`` (tests failed),
  ``no_test_results``, or ``needs_network`` (unresolved after a command hit the missing network, e.g. a
  solution that installs packages: count it apart from agent failures).

Anything else gets an in-terminal error message. Observations are labelled ``info["channel"] == "terminal"``
and look like a terminal after the command (``New Terminal Output:``, the prompt, the command, its output and
a non-zero exit status); long output and long commands keep their head and tail, and control characters
(NUL, escape sequences, ...) are shown as ``\ufffd``. ``expert_action`` replays the task's solution
(``solution.yaml`` steps, or ``solution.sh`` as one script), then marks the task complete. The episode also
ends (and is judged) once the agent's time budget is spent.

The paper's terminal perturbations are flaky tools and partial observability only (default).

Example:
    >>> import gymnasium as gym, r2v_envs
    >>> env = gym.make("R2V/TerminalBench-v0", seed=0, perturbations=None, backend="local",
    ...                task_id="word-frequency")
    >>> obs, info = env.reset()
    >>> while not (info["won"] or info["lost"]):
    ...     obs, reward, terminated, truncated, info = env.step(info["expert_action"])
    >>> reward, info["won"], info["channel"]
    (1.0, True, 'terminal')
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

from r2v_envs.core import TextEnv, build_env
from r2v_envs.errors import UnknownChoiceError
from r2v_envs.terminalbench.backends import Backend, CommandResult, make_backend
from r2v_envs.terminalbench.judge import run_tests, tests_passed
from r2v_envs.terminalbench.task import SHIPPED_TASKS_DIR, TaskFormatWarning, TerminalTask, scan_suite

PROMPT = "root@sandbox:{cwd}# "
COMPLETE = "mark_task_complete"
_RUN = re.compile(r"^run(?:\[\s*(?:timeout\s*=\s*)?(\d+(?:\.\d+)?)\s*\])?(?:\s+|$)(.*)$", re.DOTALL)
OUTCOMES = ("resolved", "unresolved", "no_test_results", "needs_network")
MAX_COMMAND_ECHO = 500  # characters of the command echoed on the screen
# What a command prints when it needs the network it does not have (curl, pip, apt, git, getaddrinfo, ...).
NETWORK_ERRORS = re.compile(r"Could not resolve host|Temporary failure in name resolution|Name or service not "
                            r"known|Network is unreachable|Failed to establish a new connection|"
                            r"NewConnectionError|getaddrinfo failed|Could not resolve proxy|"
                            r"Failed to fetch https?://|unable to access 'https?://|No route to host", re.I)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
USAGE = (f"Unknown action. Use `run <shell command>` (optionally `run[timeout=SECONDS] <command>`) "
         f"or `{COMPLETE}`.")


def truncate_output(text: str, max_chars: int, head_fraction: float = 0.3) -> str:
    """Keep the head and the tail of long output (errors and summaries are usually at the end).

    Example:
        >>> truncate_output("a" * 50 + "b" * 50, 40)
        'aaaaaaaaaaaa\\n[... 60 characters omitted ...]\\nbbbbbbbbbbbbbbbbbbbbbbbbbbbb'
    """
    if len(text) <= max_chars:
        return text
    head = int(max_chars * head_fraction)
    tail = max_chars - head
    return f"{text[:head]}\n[... {len(text) - max_chars} characters omitted ...]\n{text[-tail:]}"


def clean_text(text: str) -> str:
    """What a terminal screen may show: CRLF/CR become newlines, other control characters (NUL, ESC, ...)
    become U+FFFD, so no raw byte that breaks a tokenizer or a log reaches the observation.

    Example:
        >>> clean_text("a\\x00b\\r\\nc\\x1b[31md\\te") == "a\\ufffdb\\nc\\ufffd[31md\\te"
        True
    """
    return _CONTROL.sub("\ufffd", text.replace("\r\n", "\n").replace("\r", "\n"))



class TerminalBenchEnv(TextEnv):
    """Terminal-Bench-format tasks (the shipped suite, or any directory of them) behind a shell action API."""

    benchmark = "terminalbench"
    perturbation_profile = "terminal"
    # Sec. 5.1: terminal perturbations are tool flakiness and partial observability only. Flaky shell tools
    # fail transiently, cut their output short, or lag (the screen still shows the previous output).
    default_perturbations = {"flaky": {"modes": ["error", "truncate", "stale"]}, "partial": {}}

    def __init__(self, seed: int | None = None, split: str = "train", task_id: str | None = None,
                 task_index: int | None = None, render_mode: str | None = None,
                 tasks_dir: str | Path | None = None, backend: str | Backend = "auto", isolation: str = "auto",
                 command_timeout_s: float = 30.0, max_output_chars: int = 4000,
                 docker_options: dict[str, Any] | None = None):
        super().__init__(seed=seed, split=split, task_id=task_id, task_index=task_index, render_mode=render_mode)
        self.tasks_dir = Path(tasks_dir) if tasks_dir is not None else SHIPPED_TASKS_DIR
        self.tasks, self.skipped_tasks = scan_suite(self.tasks_dir)
        if self.skipped_tasks:
            listing = "; ".join(f"{name}: {why}" for name, why in self.skipped_tasks.items())
            warnings.warn(f"skipped {len(self.skipped_tasks)} malformed task(s) under {self.tasks_dir}: {listing}",
                          TaskFormatWarning, stacklevel=2)
        if not self.tasks:
            raise ValueError(f"no Terminal-Bench tasks (folders with task.yaml or task.toml) under "
                             f"{self.tasks_dir}")
        if command_timeout_s <= 0 or max_output_chars < 100:
            raise ValueError("command_timeout_s must be positive and max_output_chars at least 100")
        self.backend = make_backend(backend, isolation, docker_options)
        self.command_timeout_s = float(command_timeout_s)
        self.max_output_chars = int(max_output_chars)
        self._task: TerminalTask | None = None
        self._done = False
        self._won = False
        self._used_s = 0.0
        self._expert_i = 0
        self._cwd = "/app"
        self._network_errors = 0

    def _task_ids(self) -> list[str]:
        return list(self.tasks)

    # ------------------------------------------------------------------------------------- episodes
    def _reset_task(self, task_id: str) -> tuple[str, dict[str, Any]]:
        task = self.tasks[task_id]
        self.backend.start(task)
        self._task, self._done, self._won, self._used_s, self._expert_i = task, False, False, 0.0, 0
        self._network_errors = 0
        self._cwd = task.workdir
        goal = task.instruction
        obs = f"Task instruction:\n{goal}\n\nNew Terminal Output:\n{PROMPT.format(cwd=self._cwd)}"
        return obs, self._info(goal=goal)

    def _step_task(self, action: str) -> tuple[str, float, bool, dict[str, Any]]:
        if self._done:
            return "The episode is over.", 0.0, True, self._info()
        self._advance_expert(action)
        text = action.strip()
        if " ".join(text.lower().split()) in (COMPLETE, "mark task complete"):
            return self._judge("Task marked complete.")
        m = _RUN.match(text)
        if not m or not m.group(2).strip():
            return f"New Terminal Output:\n{USAGE}", 0.0, False, self._info()
        command = m.group(2)
        left = self._task.max_agent_timeout_s - self._used_s
        timeout = min(float(m.group(1)) if m.group(1) else self.command_timeout_s, left)
        result = self.backend.run(command, timeout)
        self._used_s += result.wall_time_s
        self._network_errors += bool(NETWORK_ERRORS.search(result.output))
        obs = self._screen(command, result, timeout)
        if self._used_s >= self._task.max_agent_timeout_s:
            judged, reward, done, info = self._judge("Agent time budget exhausted.")
            return f"{obs}\n{judged}", reward, done, info
        return obs, 0.0, False, self._info()

    def _screen(self, command: str, result: CommandResult, timeout: float) -> str:
        output = clean_text(truncate_output(result.output.rstrip("\n"), self.max_output_chars))
        shown = clean_text(truncate_output(command, min(MAX_COMMAND_ECHO, self.max_output_chars)))
        lines = ["New Terminal Output:", PROMPT.format(cwd=self._cwd) + shown]
        if output:
            lines.append(output)
        if result.timed_out:
            lines.append(f"[command timed out after {timeout:g} s and was killed]")
        elif result.exit_code not in (0, None):
            lines.append(f"[exit code {result.exit_code}]")
        self._cwd = result.cwd or self._cwd
        lines.append(PROMPT.format(cwd=self._cwd))
        return "\n".join(lines)

    def _judge(self, why: str) -> tuple[str, float, bool, dict[str, Any]]:
        result = run_tests(self.backend)
        tests = dict(result.results)
        self._won, self._done = tests_passed(tests), True
        n_pass = sum(s == "passed" for s in tests.values())
        if self._won:
            outcome = "resolved"
        elif self._network_errors:
            outcome = "needs_network"
        else:
            outcome = "unresolved" if tests else "no_test_results"
        summary = f"{n_pass} of {len(tests)} tests passed" if tests else "no test results (counted as a failure)"
        if result.timed_out:
            summary += f"; the tests timed out after {self._task.max_test_timeout_s:g} s"
        obs = f"{why} Running the task's tests... {summary}."
        return obs, float(self._won), True, self._info(test_results=tests, test_output=result.output[-4000:],
                                                       outcome=outcome, judge=dict(result.judge),
                                                       network_errors=self._network_errors)

    def _advance_expert(self, action: str) -> None:
        expert = self._expert()
        if expert is not None and " ".join(action.split()) == " ".join(expert.split()):
            self._expert_i += 1

    def _expert(self) -> str | None:
        if self._task is None or self._done:
            return None
        actions = self._task.expert_actions()
        return actions[min(self._expert_i, len(actions) - 1)]

    def _info(self, **extra: Any) -> dict[str, Any]:
        return {"won": self._won, "lost": self._done and not self._won, "score": float(self._won),
                "expert_action": self._expert(), "channel": "terminal", "agent_time_s": self._used_s, **extra}

    def close(self) -> None:
        self.backend.close()
        super().close()


def make(**kwargs: Any):
    """Entry point of ``R2V/TerminalBench-v0`` (see :func:`r2v_envs.core.build_env`)."""

    return build_env(TerminalBenchEnv, **kwargs)


__all__ = ["COMPLETE", "TerminalBenchEnv", "UnknownChoiceError", "make", "make_backend", "truncate_output"]
