"""Exit statuses of every r2v command line: 0 on success, 2 on a usage error, 1 on a failure.

Console scripts are ``sys.exit(main())``: a ``main`` that returns a dict (as ``r2v pipeline`` returns its summary)
makes Python print the dict and exit 1 after a run that succeeded (measured 2026-11-28, shared/NOTES.md). So the
installed scripts and the ``python -m`` entry points call :func:`run_console`, which turns what a command does into
an int: what it returns is for in-process callers and tests, never the exit status.

An expected failure (an :class:`~r2v_envs.errors.R2VError`, a missing or existing file, an unregistered env id) is one
line on stderr, ``PROG: error: [Kind] message``, and status 1; ``R2V_TRACEBACK=1`` adds the traceback. Anything else
is a defect and keeps Python's traceback (status 1). Usage errors come from tyro or argparse as ``SystemExit(2)``.

Example:
    >>> def fails(argv):
    ...     raise FileNotFoundError("no such config: x.yaml")
    >>> import contextlib, io
    >>> with contextlib.redirect_stderr(io.StringIO()) as err:
    ...     status = run_console(fails, "r2v pipeline", [])
    >>> status, err.getvalue()
    (1, 'r2v pipeline: error: [FileNotFoundError] no such config: x.yaml\\n')
    >>> run_console(lambda argv: {"summary": 1}, "r2v pipeline", [])
    0
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any

import gymnasium as gym

from r2v_envs.errors import R2VError

# what a user can cause and fix without reading code: the message says it all
EXPECTED_FAILURES: tuple[type[BaseException], ...] = (
    R2VError, FileNotFoundError, FileExistsError, NotADirectoryError, IsADirectoryError, PermissionError,
    gym.error.Error)
USAGE_ERROR, FAILURE, INTERRUPTED = 2, 1, 130


def run_console(main: Callable[[list[str] | None], Any], prog: str, argv: Sequence[str] | None = None) -> int:
    """Run ``main(argv)`` as a command line and return its exit status (see the module docstring)."""
    try:
        main(None if argv is None else list(argv))
    except SystemExit as e:  # tyro/argparse: 2 on a usage error, 0 for --help; SystemExit("text"): a failure
        if e.code is None or isinstance(e.code, int):
            return int(e.code or 0)
        print(f"{prog}: error: {e.code}", file=sys.stderr)
        return FAILURE
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return INTERRUPTED
    except EXPECTED_FAILURES as e:
        if os.environ.get("R2V_TRACEBACK"):
            traceback.print_exc()
        print(f"{prog}: error: [{type(e).__name__}] {e}", file=sys.stderr)
        return FAILURE
    return 0
